// Copyright 2026 The xform Authors.

#include "server/outgoing.h"

#include <utility>

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

const v1::FrameUpdate& Outgoing::message() const {
  if (make_) std::call_once(message_once_, [this] { message_ = make_(); });
  return message_;
}

absl::string_view Outgoing::encoded() const {
  std::call_once(encode_once_, [this] {
    // One made later is made anew for the encoding alone: a megabyte for a
    // moment, rather than kept for as long as the part waits.
    const v1::FrameUpdate made = make_ ? make_() : v1::FrameUpdate();
    const v1::FrameUpdate& message = make_ ? made : message_;
    size_ = message.ByteSizeLong();
    encoded_ = std::make_unique_for_overwrite<char[]>(size_);
    message.SerializeWithCachedSizesToArray(
        reinterpret_cast<uint8_t*>(encoded_.get()));
  });
  return {encoded_.get(), size_};
}

}  // namespace xform::server
