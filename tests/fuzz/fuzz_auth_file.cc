// Copyright 2026 The xform Authors.
//
// libFuzzer: the --auth_file parser. Whatever the bytes, it parses or says
// why not; a policy it accepts answers lookups.

#include <cstddef>
#include <cstdint>
#include <string>

#include "server/access/access_policy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string json(reinterpret_cast<const char*>(data), size);
  auto policy = xform::server::AccessPolicy::Parse(json);
  if (!policy.ok()) return 0;
  if (const auto* principal = (*policy)->ByToken(json)) {
    principal->Allows(xform::server::kRead, json);
  }
  (*policy)->ByCertificate({json});
  return 0;
}
