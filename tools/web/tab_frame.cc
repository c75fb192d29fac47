// Copyright 2026 The xform Authors.

#include "tools/web/tab_frame.h"

#include <bit>
#include <cstring>

namespace xform::web {
namespace {

static_assert(std::endian::native == std::endian::little,
              "the tab frame is little-endian, as the machine's memory");

template <typename T>
char* Put(char* at, T value) {
  std::memcpy(at, &value, sizeof(value));
  return at + sizeof(value);
}

double UnixMillis(absl::Time t) {
  return absl::ToDoubleMilliseconds(t - absl::UnixEpoch());
}

}  // namespace

void EncodeTabFrame(const MirrorChangedState& state, absl::Time published,
                    absl::Time sent, std::string* out) {
  const size_t n = state.entities.size();
  const size_t d = state.destroyed.size();
  out->resize(kTabFrameHeaderBytes + n * (8 + 8 + 48) + d * 8);
  char* at = out->data();
  at = Put<uint32_t>(at, kTabFrameMagic);
  at = Put<uint32_t>(at, state.resynced ? kTabFrameResynced : 0);
  at = Put<uint32_t>(at, static_cast<uint32_t>(n));
  at = Put<uint32_t>(at, static_cast<uint32_t>(d));
  at = Put<double>(at, static_cast<double>(state.frame));
  at = Put<double>(at, UnixMillis(published));
  at = Put<double>(at, UnixMillis(sent));
  // Stamps are nanoseconds on any clock; milliseconds in a double keep a
  // microsecond's precision for 280 years of Unix time.
  at = Put<double>(at, static_cast<double>(state.stamp) / 1e6);
  for (EntityId e : state.entities)
    at = Put<double>(at, static_cast<double>(e));
  for (EntityId p : state.parents) at = Put<double>(at, static_cast<double>(p));
  for (const Matrix3x4& m : state.worlds) {
    std::memcpy(at, m.m.data(), 48);
    at += 48;
  }
  for (EntityId e : state.destroyed)
    at = Put<double>(at, static_cast<double>(e));
}

}  // namespace xform::web
