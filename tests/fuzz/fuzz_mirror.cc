// Copyright 2026 The xform Authors.
//
// libFuzzer: the Mirror's handling of FrameUpdate bytes. The input is a
// stream of messages, each a 2-byte little-endian length and that many
// bytes. Each is parsed as the Mirror parses (v1::ParseLeavingMovedWorld,
// the bytes served in blocks of a size the length picks), which must agree
// with protobuf's own parse; those that parse are applied in order to a
// MirrorState (compact moves decoded against what earlier ones left), whose
// copy must stay a consistent table, every entity found at its own index,
// and be left as it was by a message it refuses.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "client/mirror_state.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "xform/v1/frame_update.h"
#include "xform/v1/xform.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // A small limit, so that refusals for size are reached too.
  xform::client_internal::MirrorState state(/*max_entities=*/4096);
  while (size >= 2) {
    const size_t length = std::min<size_t>(data[0] | (data[1] << 8), size - 2);
    xform::v1::FrameUpdate expected;
    const bool parses =
        expected.ParseFromArray(data + 2, static_cast<int>(length));
    google::protobuf::io::ArrayInputStream in(
        data + 2, static_cast<int>(length), 1 + static_cast<int>(length % 61));
    xform::v1::FrameUpdate update;
    xform::v1::WireMovedWorlds worlds;
    if (xform::v1::ParseLeavingMovedWorld(in, update, worlds).ok() != parses) {
      std::abort();
    }
    if (parses) {
      xform::v1::FrameUpdate whole = update;
      worlds.AppendTo(*whole.mutable_moved_world());
      if (whole.SerializeAsString() != expected.SerializeAsString()) {
        std::abort();
      }
      const auto& copy = state.copy();
      const size_t entities = copy.size();
      const uint64_t frame = state.frame();
      if (!state.Apply(update, &worlds).ok() &&
          (copy.size() != entities || state.frame() != frame)) {
        std::abort();
      }
      size_t held = 0;
      copy.ForEachRow([&](uint32_t i) {
        if (copy.Find(copy.id(i)) != i) std::abort();
        ++held;
      });
      if (held != copy.size()) std::abort();
    }
    data += 2 + length;
    size -= 2 + length;
  }
  bool resynced = false;
  state.TakeChanges(&resynced);
  return 0;
}
