// Copyright 2026 The xform Authors.

#include "server/cluster/jetstream_log.h"

#include <nats/nats.h>
#include <openssl/sha.h>

#include <algorithm>
#include <random>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/notification.h"
#include "server/journal.h"
#include "server/log.h"
#include "server/snapshot_file.h"

namespace xform::server {
namespace {

constexpr absl::string_view kLogStreamPrefix = "XFORM_LOG_";
constexpr absl::string_view kSnapStreamPrefix = "XFORM_SNAP_";
// Room left in each message for its headers.
constexpr int64_t kHeaderRoom = 4096;
// How long one window's acknowledgements are waited for before what is
// missing is sent again.
constexpr int64_t kAckWaitMs = 2000;
constexpr absl::Duration kKeepEvery = absl::Milliseconds(250);

// The key a world's streams and subjects are named by: its name in hex, or
// for a name whose hex would not fit a stream's directory name (NATS keeps
// each stream in a directory named after it; world names are up to 128
// bytes), "h" and the SHA-256 of the name. Recovery reads the name from
// the snapshot, never from the key.
std::string StreamKey(absl::string_view name) {
  if (name.size() <= 96) return absl::BytesToHexString(name);
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(name.data()), name.size(),
         digest);
  return absl::StrCat(
      "h", absl::BytesToHexString(absl::string_view(
               reinterpret_cast<const char*>(digest), sizeof digest)));
}

std::string LogStream(absl::string_view hex) {
  return absl::StrCat(kLogStreamPrefix, hex);
}
std::string SnapStream(absl::string_view hex) {
  return absl::StrCat(kSnapStreamPrefix, hex);
}
std::string LogSubject(absl::string_view hex) {
  return absl::StrCat("xform.log.", hex);
}
std::string SnapSubject(absl::string_view hex) {
  return absl::StrCat("xform.snap.", hex);
}

// What NATS said, for a status: its text, the last error's detail and
// JetStream's code.
absl::Status NatsError(absl::string_view what, natsStatus status,
                       jsErrCode code = static_cast<jsErrCode>(0)) {
  natsStatus last = NATS_OK;
  const char* detail = nats_GetLastError(&last);
  return absl::UnavailableError(absl::StrCat(
      what, ": ", natsStatus_GetText(status),
      detail != nullptr && *detail != '\0' ? absl::StrCat(" (", detail, ")")
                                           : "",
      code != 0 ? absl::StrCat(" (JetStream error ", code, ")") : ""));
}

// A header's value, or "" when the message lacks it.
absl::string_view Header(natsMsg* msg, const char* key) {
  const char* value = nullptr;
  if (natsMsgHeader_Get(msg, key, &value) != NATS_OK || value == nullptr) {
    return "";
  }
  return value;
}

uint64_t HeaderNumber(natsMsg* msg, const char* key, uint64_t otherwise) {
  uint64_t value = 0;
  return absl::SimpleAtoi(Header(msg, key), &value) ? value : otherwise;
}

absl::string_view Data(natsMsg* msg) {
  return absl::string_view(natsMsg_GetData(msg),
                           static_cast<size_t>(natsMsg_GetDataLength(msg)));
}

// A message to `subject` holding `data`, with `headers`; null if NATS
// could not make one.
natsMsg* MakeMessage(
    const std::string& subject, absl::string_view data,
    std::initializer_list<std::pair<const char*, std::string>> headers) {
  natsMsg* msg = nullptr;
  if (natsMsg_Create(&msg, subject.c_str(), nullptr, data.data(),
                     static_cast<int>(data.size())) != NATS_OK) {
    return nullptr;
  }
  for (const auto& [key, value] : headers) {
    natsMsgHeader_Set(msg, key, value.c_str());
  }
  return msg;
}

std::string RandomIncarnation() {
  std::random_device random;
  return absl::StrCat(absl::Hex(random(), absl::kZeroPad8),
                      absl::Hex(random(), absl::kZeroPad8));
}

}  // namespace

// The NATS connection the store's logs share, reconnecting for as long as
// it lives, and a JetStream context for what is not a world's appends.
class JetStreamLink {
 public:
  static absl::StatusOr<std::shared_ptr<JetStreamLink>> Connect(
      const ClusterOptions& options) {
    natsOptions* opts = nullptr;
    if (natsOptions_Create(&opts) != NATS_OK) {
      return absl::InternalError("cannot make NATS options");
    }
    std::vector<const char*> servers;
    for (const std::string& server : options.servers) {
      servers.push_back(server.c_str());
    }
    natsOptions_SetServers(opts, servers.data(),
                           static_cast<int>(servers.size()));
    natsOptions_SetName(opts, options.node.c_str());
    if (!options.ca_file.empty() &&
        (natsOptions_SetSecure(opts, true) != NATS_OK ||
         natsOptions_LoadCATrustedCertificates(opts, options.ca_file.c_str()) !=
             NATS_OK)) {
      natsOptions_Destroy(opts);
      return NatsError(
          absl::StrCat("cannot use --cluster_ca_file ", options.ca_file),
          NATS_SSL_ERROR);
    }
    if (!options.token.empty()) {
      natsOptions_SetToken(opts, options.token.c_str());
    }
    // Once connected, for ever reconnected.
    natsOptions_SetMaxReconnect(opts, -1);
    natsOptions_SetReconnectWait(opts, 100);
    auto link = std::shared_ptr<JetStreamLink>(new JetStreamLink());
    // The first connection is tried until the deadline (servers starting),
    // so that what refuses it (a wrong token, a certificate) is told.
    natsStatus status = NATS_OK;
    const absl::Time deadline = absl::Now() + options.connect_timeout;
    absl::Status why;
    while ((status = natsConnection_Connect(&link->nc_, opts)) != NATS_OK) {
      why = NatsError("", status);
      if (absl::Now() >= deadline) break;
      absl::SleepFor(absl::Milliseconds(200));
    }
    natsOptions_Destroy(opts);
    if (status != NATS_OK) {
      return absl::UnavailableError(absl::StrCat(
          "cannot connect to the cluster's NATS servers within ",
          absl::FormatDuration(options.connect_timeout), why.message()));
    }
    jsOptions js_options;
    jsOptions_Init(&js_options);
    js_options.Wait = 5000;
    status = natsConnection_JetStream(&link->js_, link->nc_, &js_options);
    if (status != NATS_OK) return NatsError("no JetStream context", status);
    return link;
  }
  ~JetStreamLink() {
    jsCtx_Destroy(js_);
    natsConnection_Destroy(nc_);
  }

  natsConnection* nc() const { return nc_; }
  jsCtx* js() const { return js_; }
  // The most one message may carry of a record (the servers' max_payload,
  // less room for headers).
  size_t chunk_bytes() const {
    const int64_t max_payload = natsConnection_GetMaxPayload(nc_);
    return static_cast<size_t>(
        std::max<int64_t>(max_payload - kHeaderRoom, kHeaderRoom));
  }

  // Publishes `msg` (destroyed) and waits for JetStream's acknowledgement:
  // the sequence it was stored at.
  absl::StatusOr<uint64_t> PublishSync(natsMsg* msg, const std::string& id,
                                       absl::string_view what) {
    if (msg == nullptr) return absl::InternalError("cannot make a message");
    jsPubOptions options;
    jsPubOptions_Init(&options);
    options.MsgId = id.c_str();
    jsPubAck* ack = nullptr;
    jsErrCode code = static_cast<jsErrCode>(0);
    const natsStatus status = js_PublishMsg(&ack, js_, msg, &options, &code);
    natsMsg_Destroy(msg);
    if (status != NATS_OK) return NatsError(what, status, code);
    const uint64_t seq = ack->Sequence;
    jsPubAck_Destroy(ack);
    return seq;
  }

  // Removes the messages of `stream` before `seq`.
  absl::Status Purge(const std::string& stream, uint64_t seq) {
    jsOptions options;
    jsOptions_Init(&options);
    options.Stream.Purge.Sequence = seq;
    jsErrCode code = static_cast<jsErrCode>(0);
    const natsStatus status =
        js_PurgeStream(js_, stream.c_str(), &options, &code);
    return status == NATS_OK
               ? absl::OkStatus()
               : NatsError(absl::StrCat("cannot purge ", stream), status, code);
  }

  // Calls `visit` with each message of `stream` from `start` (or its
  // first) to its last as of the call, in order, through an ordered
  // consumer. Its last sequence (0: none ever stored).
  absl::StatusOr<uint64_t> Read(
      const std::string& stream, const std::string& subject, uint64_t start,
      absl::FunctionRef<absl::Status(natsMsg* msg)> visit) {
    jsStreamInfo* info = nullptr;
    jsErrCode code = static_cast<jsErrCode>(0);
    natsStatus status =
        js_GetStreamInfo(&info, js_, stream.c_str(), nullptr, &code);
    if (status != NATS_OK) {
      return NatsError(absl::StrCat("cannot read ", stream), status, code);
    }
    const uint64_t first = info->State.FirstSeq;
    const uint64_t last = info->State.LastSeq;
    const uint64_t messages = info->State.Msgs;
    jsStreamInfo_Destroy(info);
    if (messages == 0 || last < start) return last;
    jsSubOptions options;
    jsSubOptions_Init(&options);
    options.Stream = stream.c_str();
    options.Ordered = true;
    options.Config.DeliverPolicy = js_DeliverByStartSequence;
    options.Config.OptStartSeq = std::max(start, first);
    natsSubscription* sub = nullptr;
    status =
        js_SubscribeSync(&sub, js_, subject.c_str(), nullptr, &options, &code);
    if (status != NATS_OK) {
      return NatsError(absl::StrCat("cannot follow ", stream), status, code);
    }
    absl::Status read;
    for (uint64_t seq = 0; seq < last && read.ok();) {
      natsMsg* msg = nullptr;
      status = natsSubscription_NextMsg(&msg, sub, 10000);
      if (status != NATS_OK) {
        read = NatsError(absl::StrCat("reading ", stream), status);
        break;
      }
      jsMsgMetaData* meta = nullptr;
      if (natsMsg_GetMetaData(&meta, msg) == NATS_OK) {
        seq = meta->Sequence.Stream;
        jsMsgMetaData_Destroy(meta);
      }
      read = visit(msg);
      natsMsg_Destroy(msg);
    }
    natsSubscription_Unsubscribe(sub);
    natsSubscription_Destroy(sub);
    if (!read.ok()) return read;
    return last;
  }

  // Makes `stream` of file storage on `replicas` servers, holding
  // `subject`.
  absl::Status AddStream(const std::string& stream, const std::string& subject,
                         int replicas) {
    jsStreamConfig config;
    jsStreamConfig_Init(&config);
    const char* subjects[] = {subject.c_str()};
    config.Name = stream.c_str();
    config.Subjects = subjects;
    config.SubjectsLen = 1;
    config.Storage = js_FileStorage;
    config.Replicas = replicas;
    jsErrCode code = static_cast<jsErrCode>(0);
    const natsStatus status =
        js_AddStream(nullptr, js_, &config, nullptr, &code);
    if (code == JSStreamNameExistErr) {
      return absl::AlreadyExistsError(
          absl::StrCat(stream, " already exists in the cluster"));
    }
    return status == NATS_OK
               ? absl::OkStatus()
               : NatsError(absl::StrCat("cannot make ", stream), status, code);
  }

  // Removes `stream`; none there is no error.
  absl::Status DeleteStream(const std::string& stream) {
    jsErrCode code = static_cast<jsErrCode>(0);
    const natsStatus status =
        js_DeleteStream(js_, stream.c_str(), nullptr, &code);
    if (status == NATS_OK || code == JSStreamNotFoundErr ||
        status == NATS_NOT_FOUND) {
      return absl::OkStatus();
    }
    return NatsError(absl::StrCat("cannot delete ", stream), status, code);
  }

 private:
  JetStreamLink() = default;
  natsConnection* nc_ = nullptr;
  jsCtx* js_ = nullptr;
};

// One record as it waits for JetStream: a batch, and the parts it is sent
// in, from `first_seq` on.
struct JetStreamWorldLog::Record {
  uint64_t first_seq = 0;
  uint64_t frame = 0;
  size_t parts = 1;
  size_t chunk = 0;
  std::string batch;
  absl::Status status;
  absl::Notification done;
};

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

JetStreamWorldLog::JetStreamWorldLog(std::shared_ptr<JetStreamLink> link,
                                     std::string name, std::string stored_world,
                                     uint64_t last_seq,
                                     const ClusterOptions& options,
                                     const Clock& clock)
    : link_(std::move(link)),
      name_(std::move(name)),
      hex_(StreamKey(name_)),
      stored_world_(std::move(stored_world)),
      options_(options),
      clock_(clock),
      incarnation_(RandomIncarnation()),
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
  {
    absl::MutexLock lock(&mu_);
    if (!broken_.ok()) return broken_;
    record->first_seq = next_seq_;
    next_seq_ += record->parts;
    bytes_since_snapshot_ += batch.size();
    queue_.push_back(record);
  }
  return Acknowledgement([record]() mutable {
    record->done.WaitForNotification();
    return record->status;
  });
}

void JetStreamWorldLog::TakeAck(uint64_t seq, absl::Status status) {
  absl::MutexLock lock(&ack_mu_);
  acks_[seq] = std::move(status);
}

void JetStreamWorldLog::Break(const absl::Status& why) {
  if (!broken_.ok()) return;
  broken_ = absl::UnavailableError(absl::StrCat(
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
  const absl::string_view data =
      absl::string_view(record.batch)
          .substr(part.index * record.chunk, record.chunk);
  natsMsg* msg = MakeMessage(LogSubject(hex_), data,
                             {{"Xform-Seq", absl::StrCat(part.seq)},
                              {"Xform-Frame", absl::StrCat(record.frame)},
                              {"Xform-Part", absl::StrCat(part.index)},
                              {"Xform-Parts", absl::StrCat(record.parts)}});
  if (msg == nullptr) return absl::InternalError("cannot make a message");
  const std::string id = absl::StrCat(incarnation_, ":", part.seq);
  jsPubOptions options;
  jsPubOptions_Init(&options);
  options.MsgId = id.c_str();
  options.ExpectLastSeq = part.seq - 1;
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
    const absl::Status missing = SendOnce(parts, start);
    if (missing.ok()) break;
    // The oldest refused because another wrote first: never retried.
    if (absl::IsFailedPrecondition(missing)) return missing;
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
  world.WithWorldLocked([&](const World& locked) {
    locked.CopyImage(&image);
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
    status = PublishSnapshot(after, EncodeSnapshot(stored_world_, image));
  }
  if (!status.ok()) {
    absl::MutexLock lock(&mu_);
    bytes_since_snapshot_ += bytes;  // Due again.
  }
  return status;
}

absl::Status JetStreamWorldLog::PublishSnapshot(uint64_t after,
                                                const std::string& bytes) {
  const size_t chunk = link_->chunk_bytes();
  const size_t chunks = std::max<size_t>(1, (bytes.size() + chunk - 1) / chunk);
  const std::string id = absl::StrCat(incarnation_, ":", after);
  uint64_t first = 0;
  for (size_t i = 0; i < chunks; ++i) {
    natsMsg* msg = MakeMessage(
        SnapSubject(hex_), absl::string_view(bytes).substr(i * chunk, chunk),
        {{"Xform-Snapshot", id},
         {"Xform-Chunk", absl::StrCat(i)},
         {"Xform-Chunks", absl::StrCat(chunks)},
         {"Xform-After", absl::StrCat(after)}});
    absl::StatusOr<uint64_t> seq = link_->PublishSync(
        msg, absl::StrCat("snap:", id, ":", i), "cannot store a snapshot");
    if (!seq.ok()) return seq.status();
    if (i == 0) first = *seq;
  }
  // The snapshot is whole: what it replaces goes.
  if (absl::Status s = link_->Purge(LogStream(hex_), after + 1); !s.ok()) {
    return s;
  }
  if (absl::Status s = link_->Purge(SnapStream(hex_), first); !s.ok()) {
    return s;
  }
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

absl::StatusOr<std::unique_ptr<JetStreamLogStore>> JetStreamLogStore::Connect(
    ClusterOptions options, const Clock& clock) {
  if (options.servers.empty()) {
    return absl::InvalidArgumentError("--cluster names no NATS server");
  }
  absl::StatusOr<std::shared_ptr<JetStreamLink>> link =
      JetStreamLink::Connect(options);
  if (!link.ok()) return link.status();
  return std::unique_ptr<JetStreamLogStore>(
      new JetStreamLogStore(std::move(options), clock, *std::move(link)));
}

JetStreamLogStore::JetStreamLogStore(ClusterOptions options, const Clock& clock,
                                     std::shared_ptr<JetStreamLink> link)
    : options_(std::move(options)), clock_(clock), link_(std::move(link)) {}

JetStreamLogStore::~JetStreamLogStore() { keeper_.reset(); }

std::shared_ptr<JetStreamWorldLog> JetStreamLogStore::MakeLog(
    const std::string& name, std::string stored_world, uint64_t last_seq) {
  auto log = std::make_shared<JetStreamWorldLog>(
      link_, name, std::move(stored_world), last_seq, options_, clock_);
  absl::MutexLock lock(&keep_mu_);
  logs_[name] = log;
  return log;
}

namespace {

// A snapshot as its chunks come in.
struct SnapshotChunks {
  std::string id;
  uint64_t after = 0;
  uint64_t chunks = 0;
  uint64_t got = 0;
  std::string bytes;
};

// The newest whole snapshot of a world: chunks in order under one id.
absl::StatusOr<SnapshotChunks> ReadNewestSnapshot(JetStreamLink& link,
                                                  const std::string& hex) {
  SnapshotChunks partial;
  SnapshotChunks whole;
  absl::StatusOr<uint64_t> read =
      link.Read(SnapStream(hex), SnapSubject(hex), 1, [&](natsMsg* msg) {
        const uint64_t chunk = HeaderNumber(msg, "Xform-Chunk", ~uint64_t{0});
        const std::string id(Header(msg, "Xform-Snapshot"));
        if (chunk == 0) {
          partial = {.id = id,
                     .after = HeaderNumber(msg, "Xform-After", 0),
                     .chunks = HeaderNumber(msg, "Xform-Chunks", 1)};
        } else if (id != partial.id || chunk != partial.got) {
          partial = {};  // Torn: a snapshot whose store was cut short.
          return absl::OkStatus();
        }
        const absl::string_view data = Data(msg);
        partial.bytes.append(data.data(), data.size());
        if (++partial.got == partial.chunks) whole = std::move(partial);
        return absl::OkStatus();
      });
  if (!read.ok()) return read.status();
  if (whole.chunks == 0) {
    return absl::NotFoundError(
        "no whole snapshot: a create never acknowledged");
  }
  return whole;
}

// `snapshot` made the world of `recovered`, and its StoredWorld's bytes.
absl::StatusOr<std::string> FromSnapshot(const std::string& hex,
                                         const SnapshotChunks& snapshot,
                                         RecoveredWorld& recovered) {
  std::string stored_bytes;
  WorldImage image;
  if (absl::Status s = DecodeSnapshot(snapshot.bytes, SnapStream(hex),
                                      &stored_bytes, &image);
      !s.ok()) {
    return s;
  }
  recovered.last_frame = image.frame;
  absl::StatusOr<World> world = World::FromImage(std::move(image));
  if (!world.ok()) {
    return absl::DataLossError(
        absl::StrCat(SnapStream(hex), ": ", world.status().message()));
  }
  recovered.world = *std::move(world);
  if (!recovered.stored.ParseFromString(stored_bytes)) {
    return absl::DataLossError(
        absl::StrCat(SnapStream(hex), ": its world record does not parse"));
  }
  return stored_bytes;
}

// The log after `after` replayed into `recovered`, each record's parts put
// together: the log's last sequence.
absl::StatusOr<uint64_t> ReplayLog(JetStreamLink& link, const std::string& hex,
                                   uint64_t after, RecoveredWorld& recovered) {
  std::string batch;
  return link.Read(
      LogStream(hex), LogSubject(hex), after + 1, [&](natsMsg* msg) {
        if (Header(msg, "Xform-Frame").empty()) return absl::OkStatus();
        const uint64_t part = HeaderNumber(msg, "Xform-Part", 0);
        if (part == 0) batch.clear();
        const absl::string_view data = Data(msg);
        batch.append(data.data(), data.size());
        if (part + 1 < HeaderNumber(msg, "Xform-Parts", 1)) {
          return absl::OkStatus();
        }
        if (absl::Status s = ReplayBatch(batch, recovered.world); !s.ok()) {
          return absl::DataLossError(
              absl::StrCat(LogStream(hex), ": ", s.message()));
        }
        recovered.last_frame =
            std::max(recovered.last_frame, HeaderNumber(msg, "Xform-Frame", 0));
        ++recovered.replayed;
        return absl::OkStatus();
      });
}

}  // namespace

absl::StatusOr<RecoveredWorld> JetStreamLogStore::RecoverWorld(
    const std::string& hex) {
  RecoveredWorld recovered;
  absl::Time phase = clock_.Now();
  absl::StatusOr<SnapshotChunks> snapshot = ReadNewestSnapshot(*link_, hex);
  if (!snapshot.ok()) return snapshot.status();
  absl::StatusOr<std::string> stored_bytes =
      FromSnapshot(hex, *snapshot, recovered);
  if (!stored_bytes.ok()) return stored_bytes.status();
  recovered.snapshot_time = clock_.Now() - phase;
  phase = clock_.Now();
  absl::StatusOr<uint64_t> last =
      ReplayLog(*link_, hex, snapshot->after, recovered);
  if (!last.ok()) return last.status();
  recovered.replay_time = clock_.Now() - phase;
  recovered.log = MakeLog(recovered.stored.create().name(),
                          *std::move(stored_bytes), *last);
  recovered.world.RestartFrames(recovered.last_frame + 1);
  return recovered;
}

absl::Status JetStreamLogStore::Recover(
    absl::FunctionRef<absl::Status(RecoveredWorld)> take) {
  // The cluster may still be starting: JetStream is asked until it answers.
  std::vector<std::string> hexes;
  const absl::Time deadline = clock_.Now() + options_.connect_timeout;
  for (bool warned = false;; absl::SleepFor(absl::Milliseconds(200))) {
    jsStreamNamesList* names = nullptr;
    jsErrCode code = static_cast<jsErrCode>(0);
    const natsStatus status =
        js_StreamNames(&names, link_->js(), nullptr, &code);
    if (status == NATS_OK || status == NATS_NOT_FOUND) {
      for (int i = 0; names != nullptr && i < names->Count; ++i) {
        absl::string_view name = names->List[i];
        if (absl::ConsumePrefix(&name, kSnapStreamPrefix)) {
          hexes.emplace_back(name);
        }
      }
      jsStreamNamesList_Destroy(names);
      break;
    }
    if (clock_.Now() >= deadline) {
      return NatsError(
          absl::StrCat("JetStream did not answer within ",
                       absl::FormatDuration(options_.connect_timeout)),
          status, code);
    }
    if (!warned) {
      Log('W', "waiting for JetStream: ", natsStatus_GetText(status));
      warned = true;
    }
  }
  for (const std::string& hex : hexes) {
    // A stream whose leader is being elected answers late: its world is
    // read again, whole, until the deadline.
    absl::StatusOr<RecoveredWorld> recovered = RecoverWorld(hex);
    while (absl::IsUnavailable(recovered.status()) && clock_.Now() < deadline) {
      Log('W', "recovery: ", SnapStream(hex), ": ",
          recovered.status().message(), "; reading it again");
      absl::SleepFor(absl::Milliseconds(200));
      recovered = RecoverWorld(hex);
    }
    if (absl::IsNotFound(recovered.status())) {
      Log('W', "recovery: ", SnapStream(hex),
          " removed: ", recovered.status().message());
      link_->DeleteStream(LogStream(hex)).IgnoreError();
      link_->DeleteStream(SnapStream(hex)).IgnoreError();
      continue;
    }
    if (!recovered.ok()) return recovered.status();
    if (absl::Status s = take(*std::move(recovered)); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<WorldLog>> JetStreamLogStore::CreateWorld(
    const config::StoredWorld& stored) {
  const std::string& name = stored.create().name();
  const std::string hex = StreamKey(name);
  if (absl::Status s =
          link_->AddStream(LogStream(hex), LogSubject(hex), options_.replicas);
      !s.ok()) {
    return s;
  }
  const auto undo = [&](absl::Status why) {
    link_->DeleteStream(LogStream(hex)).IgnoreError();
    link_->DeleteStream(SnapStream(hex)).IgnoreError();
    return why;
  };
  if (absl::Status s = link_->AddStream(SnapStream(hex), SnapSubject(hex),
                                        options_.replicas);
      !s.ok()) {
    return undo(s);
  }
  // The log's first message marks the world's creation, so that every
  // record has one before it to expect.
  absl::StatusOr<uint64_t> created = link_->PublishSync(
      MakeMessage(LogSubject(hex), "", {{"Xform-World", "created"}}),
      absl::StrCat("created:", hex), "cannot log the world's creation");
  if (!created.ok()) return undo(created.status());
  std::string stored_bytes = stored.SerializeAsString();
  std::shared_ptr<JetStreamWorldLog> log =
      MakeLog(name, stored_bytes, *created);
  // Created means durable: the empty world's snapshot, which recovery
  // requires, is stored last.
  WorldImage empty;
  if (absl::Status s =
          link_
              ->PublishSync(
                  MakeMessage(SnapSubject(hex),
                              EncodeSnapshot(stored_bytes, empty),
                              {{"Xform-Snapshot", "created"},
                               {"Xform-Chunk", "0"},
                               {"Xform-Chunks", "1"},
                               {"Xform-After", absl::StrCat(*created)}}),
                  absl::StrCat("created-snap:", hex),
                  "cannot store the world's first snapshot")
              .status();
      !s.ok()) {
    {
      absl::MutexLock lock(&keep_mu_);
      logs_.erase(name);
    }
    return undo(s);
  }
  return log;
}

absl::Status JetStreamLogStore::DeleteWorld(absl::string_view name) {
  const std::string hex = StreamKey(name);
  {
    absl::MutexLock lock(&keep_mu_);
    logs_.erase(std::string(name));
  }
  if (absl::Status s = link_->DeleteStream(LogStream(hex)); !s.ok()) return s;
  return link_->DeleteStream(SnapStream(hex));
}

std::vector<std::pair<std::string, std::shared_ptr<JetStreamWorldLog>>>
JetStreamLogStore::Logs() {
  return LiveLogs(logs_);
}

void JetStreamLogStore::SnapshotOf(const std::string& name,
                                   JetStreamWorldLog& log) {
  std::shared_ptr<SnapshotSource> source = world_of_(name);
  if (source == nullptr) return;  // The world is gone.
  if (absl::Status s = log.Snapshot(*source); !s.ok()) {
    Log('E', "world '", EscapeForLog(name),
        "': snapshot failed: ", s.message());
  }
}

absl::Time JetStreamLogStore::Keep() {
  absl::MutexLock lock(&keep_mu_);
  for (auto& [name, log] : Logs()) {
    if (log->SnapshotDue()) SnapshotOf(name, *log);
  }
  return clock_.Now() + kKeepEvery;
}

void JetStreamLogStore::StartKeeping(WorldOf world_of) {
  {
    absl::MutexLock lock(&keep_mu_);
    world_of_ = std::move(world_of);
  }
  keeper_ = std::make_unique<PeriodicThread>("xform-jskeep", clock_.Now(),
                                             [this] { return Keep(); });
}

void JetStreamLogStore::SnapshotAll() {
  keeper_.reset();
  absl::MutexLock lock(&keep_mu_);
  if (!world_of_) return;
  for (auto& [name, log] : Logs()) {
    if (log->Logged()) SnapshotOf(name, *log);
  }
}

std::string DescribeCluster(const ClusterOptions& options) {
  return absl::StrCat(options.replicas, " NATS replica(s) a stream via ",
                      absl::StrJoin(options.servers, ","), " as node '",
                      options.node, "', records acknowledged within ",
                      absl::FormatDuration(options.write_timeout));
}

}  // namespace xform::server
