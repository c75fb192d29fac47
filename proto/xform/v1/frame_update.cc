// Copyright 2026 The xform Authors.

#include "xform/v1/frame_update.h"

#include <algorithm>
#include <utility>

namespace xform::v1 {

FrameUpdateWriter::FrameUpdateWriter(uint64_t frame, absl::Time time,
                                     size_t max_bytes, bool snapshot,
                                     uint32_t first_part)
    : frame_(frame),
      time_nanos_(absl::ToUnixNanos(time)),
      max_bytes_(std::max<size_t>(max_bytes, kEntryBytes)),
      snapshot_(snapshot),
      first_part_(first_part) {}

void FrameUpdateWriter::Reserve(size_t n) {
  if (parts_.empty()) Start();
  n = std::min(n, room() / kEntryBytes);
  FrameUpdate& u = Part();
  const auto more = [](auto* field, size_t count) {
    field->Reserve(field->size() + static_cast<int>(count));
  };
  more(u.mutable_created(), n);
  more(u.mutable_created_parent(), n);
  more(u.mutable_moved(), n);
  more(u.mutable_moved_world(), 12 * n);
}

void FrameUpdateWriter::Destroyed(absl::Span<const EntityId> entities) {
  while (!entities.empty()) {
    const size_t n = Fit(kIdBytes, entities.size());
    Part().mutable_destroyed()->Add(entities.begin(), entities.begin() + n);
    entities.remove_prefix(n);
  }
}

void FrameUpdateWriter::Created(EntityId e, EntityId parent,
                                const Matrix3x4& world) {
  Fit(3 * kIdBytes + kMatrixBytes, 1);
  FrameUpdate& u = Part();
  u.add_created(e);
  u.add_created_parent(parent);
  u.add_moved(e);
  u.mutable_moved_world()->Add(world.m.begin(), world.m.end());
}

void FrameUpdateWriter::Reparented(EntityId e, EntityId parent) {
  Fit(2 * kIdBytes, 1);
  FrameUpdate& u = Part();
  u.add_reparented(e);
  u.add_reparented_parent(parent);
}

void FrameUpdateWriter::Moved(EntityId e, const Matrix3x4& world) {
  Moved({&e, 1}, world.m.data());
}

void FrameUpdateWriter::Moved(absl::Span<const EntityId> entities,
                              const float* worlds) {
  while (!entities.empty()) {
    const size_t n = Fit(kIdBytes + kMatrixBytes, entities.size());
    FrameUpdate& u = Part();
    u.mutable_moved()->Add(entities.begin(), entities.begin() + n);
    u.mutable_moved_world()->Add(worlds, worlds + 12 * n);
    entities.remove_prefix(n);
    worlds += 12 * n;
  }
}

std::vector<FrameUpdate> FrameUpdateWriter::Finish(uint64_t frames_skipped,
                                                   bool last) {
  if (parts_.empty()) Start();
  if (last) {
    parts_.back().set_last_part(true);
    parts_.back().set_frames_skipped(frames_skipped);
    if (snapshot_) parts_.back().set_snapshot_done(true);
  }
  std::vector<FrameUpdate> out;
  out.reserve(parts_.size());
  for (FrameUpdate& part : parts_) out.push_back(std::move(part));
  parts_.clear();
  return out;
}

size_t FrameUpdateWriter::Fit(size_t bytes, size_t count) {
  if (parts_.empty() || used_ + bytes > max_bytes_) Start();
  const size_t n = std::min(count, (max_bytes_ - used_) / bytes);
  used_ += n * bytes;
  return n;
}

void FrameUpdateWriter::Start() {
  FrameUpdate& u = parts_.emplace_back();
  u.set_frame(frame_);
  u.set_server_time_unix_nanos(time_nanos_);
  u.set_snapshot(snapshot_);
  u.set_part(first_part_ + static_cast<uint32_t>(parts_.size() - 1));
  used_ = 0;
}

Matrix3x4 FrameUpdateReader::moved_world(int k) const {
  Matrix3x4 m;
  std::copy_n(moved_world_data(k), 12, m.m.begin());
  return m;
}

}  // namespace xform::v1
