// Copyright 2026 The xform Authors.

#include "server/cluster/jetstream_log.h"

#include <nats/nats.h>

#include <algorithm>
#include <random>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "server/base/log.h"
#include "server/cluster/log_records.h"
#include "server/cluster/view/redirect.h"
#include "server/storage/snapshot_file.h"

namespace xform::server {
namespace {

// How long one window's acknowledgements are waited for before what is
// missing is sent again.
constexpr int64_t kAckWaitMs = 2000;

std::string RandomIncarnation() {
  std::random_device random;
  return absl::StrCat(absl::Hex(random(), absl::kZeroPad8),
                      absl::Hex(random(), absl::kZeroPad8));
}

}  // namespace

// One record as it waits for JetStream: a batch, and the parts it is sent
// in, from `first_seq` on.
struct JetStreamWorldLog::Record {
  uint64_t first_seq = 0;
  uint64_t frame = 0;
  // A frame end (frame being the one it closes), with its digest; else a
  // batch.
  bool end = false;
  std::optional<uint64_t> digest;
  absl::Time closed;
  std::string counts;  // A frame end's: what it changed (FrameCounts).
  size_t parts = 1;
  size_t chunk = 0;
  std::string batch;
  absl::Status status;
  absl::Notification done;
};

// JetStream's error for a publication whose Nats-Expected-Last-Msg-Id is
// not the stream's last message's (nats.c 3.4 names no constant for it).
constexpr int kWrongLastMsgIdErr = 10070;

struct JetStreamWorldLog::Part {
  std::shared_ptr<Record> record;
  uint64_t seq = 0;
  size_t index = 0;
};

// JetStream's answer to one asynchronous publication, on NATS's thread.
struct JetStreamAck {
  static void Handle(jsCtx*, natsMsg* msg, jsPubAck*, jsPubAckErr* error,
                     void* closure) {
    auto* log = static_cast<JetStreamWorldLog*>(closure);
    const uint64_t seq = HeaderNumber(msg, "Xform-Seq", 0);
    absl::Status status;
    if (error != nullptr && error->ErrCode == JSStreamWrongLastSequenceErr) {
      status = absl::FailedPreconditionError(
          "another writer appended to the world's log first (JetStream "
          "error 10071)");
    } else if (error != nullptr && error->ErrCode == kWrongLastMsgIdErr) {
      const absl::string_view text =
          error->ErrText != nullptr ? error->ErrText : "";
      // The last message's id unknown to its server (a stream leader
      // started again with it older than the stream's duplicate window):
      // not another writer's, as the sequence held. Sent again unchecked.
      status = absl::EndsWith(text, ": ") || absl::EndsWith(text, ":")
                   ? absl::AbortedError(
                         "the log's last record's id is not "
                         "known to its server")
                   : absl::FailedPreconditionError(absl::StrCat(
                         "another writer appended to the world's log in "
                         "this writer's window (JetStream error 10070: ",
                         text, ")"));
    } else if (error != nullptr) {
      status = absl::UnavailableError(absl::StrCat(
          "JetStream refused a record: ",
          error->ErrText != nullptr ? error->ErrText
                                    : natsStatus_GetText(error->Err)));
    }
    if (seq != 0) log->TakeAck(seq, std::move(status));
    natsMsg_Destroy(msg);  // Ours to destroy, with an AckHandler.
  }
};

JetStreamWorldLog::JetStreamWorldLog(std::shared_ptr<NatsLink> link,
                                     std::string name, std::string stored_world,
                                     uint64_t last_seq, std::string last_msg_id,
                                     const ClusterOptions& options,
                                     const Clock& clock)
    : link_(std::move(link)),
      name_(std::move(name)),
      key_(StreamKey(name_)),
      stored_world_(std::move(stored_world)),
      options_(options),
      clock_(clock),
      incarnation_(RandomIncarnation()),
      first_seq_(last_seq + 1),
      last_msg_id_(std::move(last_msg_id)),
      next_seq_(last_seq + 1),
      stored_seq_(last_seq) {
  jsOptions js_options;
  jsOptions_Init(&js_options);
  js_options.Wait = 5000;
  js_options.PublishAsync.MaxPending = static_cast<int64_t>(options_.window);
  js_options.PublishAsync.AckHandler = &JetStreamAck::Handle;
  js_options.PublishAsync.AckHandlerClosure = this;
  jsCtx* js = nullptr;
  if (natsConnection_JetStream(&js, link_->nc(), &js_options) != NATS_OK) {
    absl::MutexLock lock(&mu_);
    broken_ = absl::UnavailableError("no JetStream context for the world");
  }
  js_ = js;
  sender_ = std::thread([this] { SendLoop(); });
}

JetStreamWorldLog::~JetStreamWorldLog() {
  {
    absl::MutexLock lock(&mu_);
    stopping_ = true;
  }
  sender_.join();
  jsCtx_Destroy(static_cast<jsCtx*>(js_));
}

absl::StatusOr<WorldLog::Acknowledgement> JetStreamWorldLog::Append(
    uint64_t frame, absl::string_view batch) {
  auto record = std::make_shared<Record>();
  record->frame = frame;
  record->batch = std::string(batch);
  record->chunk = link_->chunk_bytes();
  record->parts =
      std::max<size_t>(1, (batch.size() + record->chunk - 1) / record->chunk);
  return Queue(std::move(record));
}

absl::StatusOr<WorldLog::Acknowledgement> JetStreamWorldLog::EndFrame(
    uint64_t frame, std::optional<uint64_t> digest, absl::Time closed,
    absl::string_view counts) {
  auto record = std::make_shared<Record>();
  record->frame = frame;
  record->closed = closed;
  record->counts = std::string(counts);
  record->end = true;
  record->digest = digest;
  record->chunk = link_->chunk_bytes();
  return Queue(std::move(record));
}

absl::StatusOr<WorldLog::Acknowledgement> JetStreamWorldLog::Queue(
    std::shared_ptr<Record> record) {
  {
    absl::MutexLock lock(&mu_);
    if (!broken_.ok()) return broken_;
    record->first_seq = next_seq_;
    next_seq_ += record->parts;
    bytes_since_snapshot_ += record->batch.size();
    queue_.push_back(record);
  }
  return Acknowledgement([record = std::move(record)]() mutable {
    record->done.WaitForNotification();
    return record->status;
  });
}

absl::Status JetStreamWorldLog::broken() const {
  absl::MutexLock lock(&mu_);
  return broken_;
}

absl::StatusOr<uint64_t> JetStreamWorldLog::WaitStored(absl::Duration timeout) {
  absl::MutexLock lock(&mu_);
  const auto stored = [this]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    return stored_seq_ + 1 == next_seq_ || !broken_.ok();
  };
  if (!mu_.AwaitWithTimeout(absl::Condition(&stored), timeout)) {
    return absl::DeadlineExceededError(absl::StrCat(
        "records up to ", next_seq_ - 1, " not acknowledged within ",
        absl::FormatDuration(timeout)));
  }
  if (!broken_.ok()) return broken_;
  return stored_seq_;
}

void JetStreamWorldLog::TakeAck(uint64_t seq, absl::Status status) {
  absl::MutexLock lock(&ack_mu_);
  acks_[seq] = std::move(status);
}

void JetStreamWorldLog::Break(const absl::Status& why) {
  if (!broken_.ok()) return;
  // Its writes are another node's in a moment (or this one's, reloaded):
  // its clients are told to send them again, as in a failover.
  broken_ = TryAgainShortly(absl::StrCat(
      "world '", EscapeForLog(name_), "': its log in JetStream is broken (",
      why.message(), "); its writes are refused until xformd recovers it"));
  Log('E', broken_.message());
}

void JetStreamWorldLog::SendLoop() {
  for (;;) {
    std::vector<std::shared_ptr<Record>> records;
    absl::Status broken;
    {
      absl::MutexLock lock(&mu_);
      mu_.Await(absl::Condition(
          +[](JetStreamWorldLog* log) ABSL_NO_THREAD_SAFETY_ANALYSIS {
            return log->stopping_ || !log->queue_.empty();
          },
          this));
      if (queue_.empty()) return;  // Stopping, with nothing left.
      for (size_t parts = 0; !queue_.empty() &&
                             (records.empty() ||
                              parts + queue_.front()->parts <= options_.window);
           queue_.pop_front()) {
        parts += queue_.front()->parts;
        records.push_back(std::move(queue_.front()));
      }
      broken = broken_;
    }
    std::vector<Part> parts;
    for (const std::shared_ptr<Record>& record : records) {
      for (size_t i = 0; i < record->parts; ++i) {
        parts.push_back({record, record->first_seq + i, i});
      }
    }
    if (broken.ok()) broken = SendWindow(parts);
    if (!broken.ok()) {
      absl::MutexLock lock(&mu_);
      Break(broken);
      broken = broken_;
    }
    for (const std::shared_ptr<Record>& record : records) {
      if (record->done.HasBeenNotified()) continue;
      record->status = broken;
      record->done.Notify();
    }
  }
}

absl::Status JetStreamWorldLog::PublishPart(const Part& part) {
  const Record& record = *part.record;
  natsMsg* msg = nullptr;
  if (record.end) {
    msg = MakeMessage(
        LogSubject(key_), "",
        {{kClusterHeader, link_->cluster()},
         {"Xform-Seq", absl::StrCat(part.seq)},
         {"Xform-Node", options_.node},
         {"Xform-End", absl::StrCat(record.frame)},
         {"Xform-Time", absl::StrCat(absl::ToUnixNanos(record.closed))},
         {"Xform-Digest",
          record.digest ? absl::StrCat(absl::Hex(*record.digest)) : ""},
         {"Xform-Counts", record.counts}});
  } else {
    const absl::string_view data =
        absl::string_view(record.batch)
            .substr(part.index * record.chunk, record.chunk);
    msg = MakeMessage(LogSubject(key_), data,
                      {{kClusterHeader, link_->cluster()},
                       {"Xform-Seq", absl::StrCat(part.seq)},
                       {"Xform-Node", options_.node},
                       {"Xform-Frame", absl::StrCat(record.frame)},
                       {"Xform-Part", absl::StrCat(part.index)},
                       {"Xform-Parts", absl::StrCat(record.parts)}});
  }
  if (msg == nullptr) return absl::InternalError("cannot make a message");
  const std::string id = absl::StrCat(incarnation_, ":", part.seq);
  // Expects the record before it by its id as well as its sequence: a
  // part sent in the same window as one another writer fenced would
  // otherwise land whenever that writer appended as many records as this
  // one had in flight (the crash loop saw a deposed writer's frame end
  // land after its successor's epoch: a replica whose frame differed).
  std::string before;
  if (part.seq != first_seq_) {
    before = absl::StrCat(incarnation_, ":", part.seq - 1);
  } else {
    before = last_msg_id_;
  }
  jsPubOptions options;
  jsPubOptions_Init(&options);
  options.MsgId = id.c_str();
  options.ExpectLastSeq = part.seq - 1;
  if (!before.empty() && !unchecked_.contains(part.seq)) {
    options.ExpectLastMsgId = before.c_str();
  }
  const natsStatus status =
      js_PublishMsgAsync(static_cast<jsCtx*>(js_), &msg, &options);
  if (status != NATS_OK) {
    natsMsg_Destroy(msg);
    return NatsError("cannot publish a record", status);
  }
  return absl::OkStatus();
}

absl::Status JetStreamWorldLog::SendOnce(const std::vector<Part>& parts,
                                         size_t& start) {
  auto* js = static_cast<jsCtx*>(js_);
  absl::Status published;
  for (size_t i = start; i < parts.size() && published.ok(); ++i) {
    published = PublishPart(parts[i]);
  }
  jsPubOptions wait;
  jsPubOptions_Init(&wait);
  wait.MaxWait = kAckWaitMs;
  if (js_PublishAsyncComplete(js, &wait) != NATS_OK) {
    // What is still unanswered is sent again: its answers, if they come,
    // are dropped.
    natsMsgList pending;
    if (js_PublishAsyncGetPendingList(&pending, js) == NATS_OK) {
      natsMsgList_Destroy(&pending);
    }
  }
  absl::flat_hash_map<uint64_t, absl::Status> acks;
  {
    absl::MutexLock lock(&ack_mu_);
    acks.swap(acks_);
  }
  // Acknowledged in order, each record once its last part is.
  for (; start < parts.size(); ++start) {
    const Part& part = parts[start];
    const auto it = acks.find(part.seq);
    if (it != acks.end() && !it->second.ok()) return it->second;
    if (it == acks.end()) {
      return published.ok()
                 ? absl::UnavailableError(absl::StrCat(
                       "no acknowledgement within ", kAckWaitMs, " ms"))
                 : published;
    }
    if (part.index + 1 == part.record->parts) {
      {
        absl::MutexLock lock(&mu_);
        stored_seq_ = part.seq;
      }
      part.record->done.Notify();
    }
  }
  return absl::OkStatus();
}

absl::Status JetStreamWorldLog::SendWindow(const std::vector<Part>& parts) {
  const absl::Time deadline = clock_.Now() + options_.write_timeout;
  absl::Duration backoff = absl::Milliseconds(50);
  size_t start = 0;  // The first part not acknowledged.
  bool warned = false;
  for (;;) {
    absl::Status missing = SendOnce(parts, start);
    if (missing.ok()) break;
    // The oldest refused because another wrote first: never retried.
    if (absl::IsFailedPrecondition(missing)) return missing;
    if (absl::IsAborted(missing)) {
      // Its predecessor's id unknown to the server (its sequence held):
      // sent again expecting the sequence alone.
      unchecked_.insert(parts[start].seq);
      continue;
    }
    if (clock_.Now() + backoff > deadline) {
      return absl::UnavailableError(absl::StrCat(
          "JetStream did not acknowledge record ", parts[start].seq, " within ",
          absl::FormatDuration(options_.write_timeout), ": ",
          missing.message()));
    }
    if (!warned) {
      Log('W', "world '", EscapeForLog(name_), "': record ", parts[start].seq,
          " not acknowledged (", missing.message(), "); sending it again");
      warned = true;
    }
    absl::SleepFor(backoff);
    backoff = std::min(backoff * 2, absl::Seconds(1));
  }
  if (warned) {
    Log('I', "world '", EscapeForLog(name_),
        "': its log is acknowledged again");
  }
  return absl::OkStatus();
}

absl::Status JetStreamWorldLog::Snapshot(SnapshotSource& world) {
  WorldImage image;
  uint64_t after = 0;
  uint64_t bytes = 0;
  config::StoredWorld record;
  record.ParseFromString(stored_world_);
  world.WithWorldLocked([&](const World& locked) {
    locked.CopyImage(&image);
    world.ForEachRecentWriteLocked([&](absl::string_view id, uint64_t frame) {
      config::RecentWrite& write = *record.add_recent_writes();
      write.set_id(std::string(id));
      write.set_frame(frame);
    });
    PutNames(world, record);
    absl::MutexLock lock(&mu_);
    after = next_seq_ - 1;
    bytes = std::exchange(bytes_since_snapshot_, 0);
  });
  absl::Status status;
  {
    absl::MutexLock lock(&mu_);
    const auto stored = [this, after]() ABSL_NO_THREAD_SAFETY_ANALYSIS {
      return stored_seq_ >= after || !broken_.ok();
    };
    if (!mu_.AwaitWithTimeout(absl::Condition(&stored),
                              options_.write_timeout + absl::Seconds(5))) {
      status = absl::UnavailableError("the log it holds was not acknowledged");
    } else if (!broken_.ok()) {
      status = broken_;
    }
  }
  if (status.ok()) {
    status = PublishSnapshot(after,
                             EncodeSnapshot(record.SerializeAsString(), image));
  }
  if (!status.ok()) {
    absl::MutexLock lock(&mu_);
    bytes_since_snapshot_ += bytes;  // Due again.
  }
  return status;
}

absl::Status JetStreamWorldLog::FenceSnapshots() {
  absl::Status fenced;
  for (int tries = 0; tries < 5; ++tries) {
    absl::StatusOr<StreamExtent> extent = link_->Extent(SnapStream(key_));
    if (!extent.ok()) return extent.status();
    fenced = link_
                 ->PublishSync(
                     MakeMessage(SnapSubject(key_), "",
                                 {{kClusterHeader, link_->cluster()},
                                  {"Xform-Marker", "1"},
                                  {"Xform-Writer", incarnation_}}),
                     absl::StrCat("fence:", incarnation_, ":", extent->last),
                     "cannot mark the snapshots as this writer's", extent->last)
                 .status();
    // Another marked it, or stored a snapshot, since it was read: again.
    if (!absl::IsFailedPrecondition(fenced)) return fenced;
  }
  return fenced;
}

absl::StatusOr<uint64_t> JetStreamWorldLog::OwnSnapshotsEnd() {
  natsMsg* last = nullptr;
  jsErrCode code = static_cast<jsErrCode>(0);
  const std::string stream = SnapStream(key_);
  const std::string subject = SnapSubject(key_);
  const natsStatus status = js_GetLastMsg(&last, link_->js(), stream.c_str(),
                                          subject.c_str(), nullptr, &code);
  if (status != NATS_OK) {
    return NatsError(absl::StrCat("cannot read ", stream), status, code);
  }
  const bool ours = Header(last, "Xform-Writer") == incarnation_;
  const uint64_t seq = natsMsg_GetSequence(last);
  natsMsg_Destroy(last);
  if (!ours) {
    return absl::FailedPreconditionError(
        "another writer stored the world's snapshots since this one took it");
  }
  return seq;
}

absl::Status JetStreamWorldLog::PublishSnapshot(uint64_t after,
                                                const std::string& bytes) {
  const size_t chunk = link_->chunk_bytes();
  const size_t chunks = std::max<size_t>(1, (bytes.size() + chunk - 1) / chunk);
  const std::string id = absl::StrCat(incarnation_, ":", after);
  // Fenced as the log is: each chunk expects the message before it, the
  // first the last this writer stored there (its marker, or a snapshot of
  // its own), so that a writer deposed stores no snapshot (and purges
  // nothing) after its successor.
  absl::StatusOr<uint64_t> previous = OwnSnapshotsEnd();
  if (absl::IsFailedPrecondition(previous.status())) {
    absl::MutexLock lock(&mu_);
    Break(previous.status());
    return previous.status();
  }
  if (!previous.ok()) return previous.status();
  uint64_t first = 0;
  for (size_t i = 0; i < chunks; ++i) {
    natsMsg* msg = MakeMessage(
        SnapSubject(key_), absl::string_view(bytes).substr(i * chunk, chunk),
        {{kClusterHeader, link_->cluster()},
         {"Xform-Writer", incarnation_},
         {"Xform-Snapshot", id},
         {"Xform-Chunk", absl::StrCat(i)},
         {"Xform-Chunks", absl::StrCat(chunks)},
         {"Xform-After", absl::StrCat(after)}});
    absl::StatusOr<uint64_t> seq =
        link_->PublishSync(msg, absl::StrCat("snap:", id, ":", i),
                           "cannot store a snapshot", *previous);
    if (absl::IsFailedPrecondition(seq.status())) {
      absl::MutexLock lock(&mu_);
      Break(seq.status());
      return seq.status();
    }
    if (!seq.ok()) return seq.status();
    if (i == 0) first = *seq;
    previous = *seq;
  }
  // The snapshot is whole: what the one before it replaced goes (kept a
  // snapshot behind: should this one not be read whole, the one before
  // and the log since it still make the world).
  if (previous_snapshot_) {
    if (absl::Status s =
            link_->DeleteBefore(LogStream(key_), previous_snapshot_->after + 1);
        !s.ok()) {
      return s;
    }
    if (absl::Status s =
            link_->DeleteBefore(SnapStream(key_), previous_snapshot_->first);
        !s.ok()) {
      return s;
    }
  }
  previous_snapshot_ = StoredSnapshot{.first = first, .after = after};
  Log('I', "world '", EscapeForLog(name_), "': snapshot at log ", after, " (",
      bytes.size(), " bytes in ", chunks, " message(s))");
  return absl::OkStatus();
}

bool JetStreamWorldLog::SnapshotDue() const {
  absl::MutexLock lock(&mu_);
  return options_.snapshot_every_bytes > 0 &&
         bytes_since_snapshot_ >= options_.snapshot_every_bytes && broken_.ok();
}

bool JetStreamWorldLog::Logged() const {
  absl::MutexLock lock(&mu_);
  return bytes_since_snapshot_ > 0 && broken_.ok();
}

}  // namespace xform::server
