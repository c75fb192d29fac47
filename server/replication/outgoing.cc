// Copyright 2026 The xform Authors.

#include "server/replication/outgoing.h"

#include <utility>

#include "xform/v1/compact_moves.h"

namespace xform::server {
namespace {

Outgoing::Header HeaderOf(const v1::FrameUpdate& message) {
  return {.frame = message.frame(),
          .frames_skipped = message.frames_skipped(),
          .last_part = message.last_part()};
}

}  // namespace

Outgoing::Outgoing(v1::FrameUpdate message, std::shared_ptr<const void> hold)
    : header_(HeaderOf(message)),
      hold_(std::move(hold)),
      message_(std::move(message)) {}

Outgoing::Outgoing(Header header, Maker make)
    : header_(header), make_(std::move(make)) {}

Outgoing::Outgoing(CompactTag, std::shared_ptr<const Outgoing> raw,
                   float precision,
                   std::vector<std::optional<Matrix3x4>> previous)
    : header_(raw->header()),
      raw_(std::move(raw)),
      precision_(precision),
      previous_(std::move(previous)) {}

std::shared_ptr<const Outgoing> Outgoing::Compact(
    std::shared_ptr<const Outgoing> raw, float precision,
    std::vector<std::optional<Matrix3x4>> previous) {
  return std::shared_ptr<const Outgoing>(new Outgoing(
      CompactTag{}, std::move(raw), precision, std::move(previous)));
}

bool Outgoing::made_later() const {
  return raw_ != nullptr ? raw_->made_later() : make_ != nullptr;
}

const v1::FrameUpdate& Outgoing::message() const {
  if (raw_) return raw_->message();
  if (make_) std::call_once(message_once_, [this] { message_ = make_(); });
  return message_;
}

v1::FrameUpdate Outgoing::MakeForEncoding(const v1::FrameUpdate** kept) const {
  // One made later is made anew for the encoding alone: a megabyte for a
  // moment, rather than kept for as long as the part waits.
  if (make_) {
    *kept = nullptr;
    return make_();
  }
  *kept = &message_;
  return v1::FrameUpdate();
}

v1::FrameUpdate Outgoing::CompactOf(const v1::FrameUpdate& raw) const {
  // Every field but the moves, which go compact. (Copied whole, then
  // cleared: a field added to FrameUpdate later is not dropped here.)
  v1::FrameUpdate c = raw;
  c.clear_moved();
  c.clear_moved_world();
  v1::CompactMovesWriter writer(precision_, raw.moved_size());
  for (int k = 0; k < raw.moved_size(); ++k) {
    const size_t at = static_cast<size_t>(k);
    writer.Add(
        raw.moved(k), raw.moved_world().data() + 12 * k,
        at < previous_.size() && previous_[at] ? &*previous_[at] : nullptr);
  }
  c.set_compact_moved(writer.Finish());
  c.set_position_precision(precision_);
  return c;
}

absl::string_view Outgoing::encoded() const {
  std::call_once(encode_once_, [this] {
    const v1::FrameUpdate* kept = nullptr;
    v1::FrameUpdate made;
    if (raw_ == nullptr) {
      made = MakeForEncoding(&kept);
    } else {
      const v1::FrameUpdate* raw_kept = nullptr;
      const v1::FrameUpdate raw_made = raw_->MakeForEncoding(&raw_kept);
      made = CompactOf(raw_kept != nullptr ? *raw_kept : raw_made);
    }
    const v1::FrameUpdate& message = kept != nullptr ? *kept : made;
    size_ = message.ByteSizeLong();
    encoded_ = std::make_unique_for_overwrite<char[]>(size_);
    message.SerializeWithCachedSizesToArray(
        reinterpret_cast<uint8_t*>(encoded_.get()));
  });
  return {encoded_.get(), size_};
}

}  // namespace xform::server
