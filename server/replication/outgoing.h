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
// A compact one (ENCODING_COMPACT) is made from a raw one, which it holds:
// its message() is the raw entries (what the replicator folds), its
// encoding the compact bytes, made once, outside the lock, like the raw.
//
// Thread-safe: const methods may be called from any thread.

#ifndef XFORM_SERVER_REPLICATION_OUTGOING_H_
#define XFORM_SERVER_REPLICATION_OUTGOING_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "absl/strings/string_view.h"
#include "xform/transform.h"
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

  // `raw` with its moved entities in the compact encoding at `precision`:
  // moved entity k coded against previous[k], the matrix its receivers
  // hold, or whole where that is none (or `previous` is empty).
  static std::shared_ptr<const Outgoing> Compact(
      std::shared_ptr<const Outgoing> raw, float precision,
      std::vector<std::optional<Matrix3x4>> previous = {});
  // The compact encoding's precision, or 0 for a raw message.
  float compact_precision() const { return precision_; }
  // A compact one's `previous`: what its receivers held of each moved
  // entity before it (by index in message().moved()).
  const std::vector<std::optional<Matrix3x4>>& previous() const {
    return previous_;
  }

  const Header& header() const { return header_; }
  // Whether it is made later: then reading or encoding it costs O(message).
  bool made_later() const;
  // The message; one made later is made (and kept) on the first call.
  const v1::FrameUpdate& message() const;
  // Into a buffer that is not zeroed first: a part is megabytes, and
  // std::string would clear them only to overwrite them.
  absl::string_view encoded() const;

 private:
  struct CompactTag {};
  Outgoing(CompactTag, std::shared_ptr<const Outgoing> raw, float precision,
           std::vector<std::optional<Matrix3x4>> previous);
  // The message for encoding: kept, or made for the moment.
  v1::FrameUpdate MakeForEncoding(const v1::FrameUpdate** kept) const;
  // A compact one's message: `raw`, its moves coded.
  v1::FrameUpdate CompactOf(const v1::FrameUpdate& raw) const;

  const Header header_;
  const Maker make_;
  const std::shared_ptr<const Outgoing> raw_;  // A compact one's.
  const float precision_ = 0;
  const std::vector<std::optional<Matrix3x4>> previous_;
  const std::shared_ptr<const void> hold_;
  mutable std::once_flag message_once_;
  mutable v1::FrameUpdate message_;
  mutable std::once_flag encode_once_;
  mutable std::unique_ptr<char[]> encoded_;
  mutable size_t size_ = 0;
};

}  // namespace xform::server

#endif  // XFORM_SERVER_REPLICATION_OUTGOING_H_
