// Copyright 2026 The xform Authors.
//
// Outgoing is one message a subscriber's stream sends. Streams that send the
// same frame share one, and so its encoding: made once, on first use, then
// only referenced (gRPC's slice holds the Outgoing until the bytes are sent).
//
// Most are made whole where they are decided on, under the world's lock. A
// snapshot's burst (replicator_snapshot.cc) is not: under the lock its
// entries are only copied out, and each part is made from the copy by
// whoever first reads or encodes it, outside the lock. Encoding such a part
// makes its message only for as long as that takes, so a burst waits as its
// copy (about 65 bytes an entity), not as messages and encodings both.
//
// Thread-safe: const methods may be called from any thread.

#ifndef XFORM_SERVER_OUTGOING_H_
#define XFORM_SERVER_OUTGOING_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>

#include "absl/strings/string_view.h"
#include "xform/v1/xform.pb.h"

namespace xform::server {

class Outgoing {
 public:
  // What a stream reads of a message before sending it.
  struct Header {
    uint64_t frame = 0;
    uint64_t frames_skipped = 0;
    bool last_part = false;
  };
  using Maker = std::function<v1::FrameUpdate()>;

  // A message made now. `hold` is kept as long as the message is (a
  // BurstBudget claim, say).
  explicit Outgoing(v1::FrameUpdate message,
                    std::shared_ptr<const void> hold = nullptr);
  // A message `make` makes later, thread-safely, with this header; `make`
  // holds what it reads.
  Outgoing(Header header, Maker make);

  const Header& header() const { return header_; }
  // Whether it is made later: then reading or encoding it costs O(message).
  bool made_later() const { return make_ != nullptr; }
  // The message; one made later is made (and kept) on the first call.
  const v1::FrameUpdate& message() const;
  // Into a buffer that is not zeroed first: a part is megabytes, and
  // std::string would clear them only to overwrite them.
  absl::string_view encoded() const;

 private:
  const Header header_;
  const Maker make_;
  const std::shared_ptr<const void> hold_;
  mutable std::once_flag message_once_;
  mutable v1::FrameUpdate message_;
  mutable std::once_flag encode_once_;
  mutable std::unique_ptr<char[]> encoded_;
  mutable size_t size_ = 0;
};

}  // namespace xform::server

#endif  // XFORM_SERVER_OUTGOING_H_
