// Copyright 2026 The xform Authors.
//
// libFuzzer: the Mirror's handling of FrameUpdate bytes. The input is a
// stream of messages, each a 2-byte little-endian length and that many
// bytes; those that parse as FrameUpdate are decoded as the Mirror decodes
// them (compact moves, against what earlier ones left) and, unless refused,
// applied in order to a MirrorState, whose copy must stay a consistent
// table: every entity found at its own index.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "client/mirror_state.h"
#include "xform/v1/compact_moves.h"
#include "xform/v1/xform.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  xform::client_internal::MirrorState state;
  xform::v1::CompactMovesReader compact;
  while (size >= 2) {
    const size_t length = std::min<size_t>(data[0] | (data[1] << 8), size - 2);
    xform::v1::FrameUpdate update;
    if (update.ParseFromArray(data + 2, static_cast<int>(length)) &&
        compact.Decode(update).ok()) {
      state.Apply(update);
      const auto& copy = state.copy();
      for (uint32_t i = 0; i < copy.size(); ++i) {
        if (copy.Find(copy.id(i)) != i) std::abort();
      }
    }
    data += 2 + length;
    size -= 2 + length;
  }
  bool resynced = false;
  state.TakeChanges(&resynced);
  return 0;
}
