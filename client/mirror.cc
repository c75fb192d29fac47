// Copyright 2026 The xform Authors.

#include "xform/mirror.h"

#include <algorithm>
#include <deque>
#include <memory>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/cleanup/cleanup.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/client_internal.h"
#include "client/mirror_state.h"
#include "grpcpp/support/proto_buffer_reader.h"
#include "xform/interpolator.h"
#include "xform/net_changes.h"
#include "xform/v1/frame_update.h"
#include "xform/v1/wire.h"

namespace xform {
namespace {

template <typename T>
absl::Span<const T> SpanOf(const google::protobuf::RepeatedField<T>& field) {
  return absl::MakeConstSpan(field.data(), field.size());
}

// A message's bytes as gRPC read them. grpc::ByteBuffer has no move: its
// copy makes a new buffer and takes a reference to each slice (a 10,000-move
// message comes in dozens of them), so here a move swaps.
struct WireBytes {
  WireBytes() = default;
  WireBytes(WireBytes&& other) noexcept { buffer.Swap(&other.buffer); }
  WireBytes& operator=(WireBytes&& other) noexcept {
    buffer.Swap(&other.buffer);
    return *this;
  }
  grpc::ByteBuffer buffer;
};

struct Arrival {
  WireBytes wire;  // As it came; parsed into `update` when taken.
  // What reads `wire`, kept as long as `worlds` points into what it read.
  std::unique_ptr<grpc::ProtoBufferReader> reader;
  v1::FrameUpdate update;  // A compact one is decoded when taken.
  // A raw one's moved_world, where it lies in `wire` (see Parse).
  v1::WireMovedWorlds worlds;
  // For on_update and the interpolator (only when there is one): a compact
  // one's moves, raw; a raw one's matrices, out of `worlds`.
  std::vector<EntityId> moved;
  std::vector<float> moved_world;
  absl::Time received;
  size_t bytes = 0;     // On the wire.
  uint64_t stream = 0;  // Which of the mirror's streams it came on.
};

}  // namespace

class Mirror::Impl {
 public:
  Impl(Client& client, MirrorOptions options)
      : options_(std::move(options)),
        client_(client),
        interpolator_(options_.interpolation ? std::make_unique<Interpolator>(
                                                   *options_.interpolation)
                                             : nullptr),
        state_(options_.max_entities) {
    request_.set_world(options_.world);
    request_.mutable_entity()->Add(options_.entities.begin(),
                                   options_.entities.end());
    request_.mutable_subtree()->Add(options_.subtrees.begin(),
                                    options_.subtrees.end());
    if (options_.region) {
      v1::RegionToWire(*options_.region, request_.mutable_region());
    }
    request_.set_max_rate_hz(options_.max_rate_hz);
    // MirrorState applies a snapshot to a copy of the view it swaps out.
    request_.set_accepts_kept_view_snapshots(true);
    if (options_.no_echo) {
      request_.set_no_echo_client_id(client.options().client_id);
    }
    if (options_.encoding == MirrorOptions::Encoding::kCompact) {
      request_.set_encoding(v1::ENCODING_COMPACT);
      request_.set_position_precision(options_.position_precision);
    }
    supervisor_ = std::thread([this] { Supervise(); });
    if (options_.driver == MirrorOptions::Driver::kBackground) {
      applier_ = std::thread([this] { ApplyLoop(); });
    }
  }

  absl::Status SetRegion(const Region& region) {
    v1::UpdateSubscriptionRequest update;
    size_t node = 0;
    {
      absl::MutexLock lock(&mu_);
      if (!request_.has_region()) {
        return absl::FailedPreconditionError(
            "the mirror has no region to move (MirrorOptions::region)");
      }
      // A stream made from now subscribes with it.
      v1::RegionToWire(region, request_.mutable_region());
      // One open is named before its first message: waited for.
      const uint64_t stream = stream_id_;
      if (stream == 0) return absl::OkStatus();
      const auto named_or_gone = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return subscription_ != 0 || stream_id_ != stream || stream_done_ ||
               stopping_;
      };
      mu_.AwaitWithTimeout(absl::Condition(&named_or_gone),
                           client_.options().deadline);
      if (subscription_ == 0 || stream_id_ != stream) return absl::OkStatus();
      update.set_world(options_.world);
      update.set_subscription_id(subscription_);
      node = stream_node_;
    }
    v1::RegionToWire(region, update.mutable_region());
    grpc::ClientContext context;
    client_internal::Prepare(client_.options(), /*with_deadline=*/true,
                             &context);
    v1::UpdateSubscriptionResponse response;
    return client_internal::FromGrpc(
        client_.nodes_->At(node).stub->UpdateSubscription(&context, update,
                                                          &response));
  }

  ~Impl() {
    Stream* resume = nullptr;
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;  // The supervisor cancels the stream.
      std::swap(resume, paused_);
    }
    if (resume != nullptr) resume->Resume();  // Its read fails: it ends.
    supervisor_.join();
    if (applier_.joinable()) applier_.join();
  }

  // kCaller: applies what has arrived, on the caller's thread.
  Interpolator* interpolator() const { return interpolator_.get(); }

  int Update() {
    // kBackground: the mirror's thread takes every message.
    if (options_.driver == MirrorOptions::Driver::kBackground) return 0;
    int applied = 0;
    while (TakeAndApply(/*wait=*/false)) ++applied;
    return applied;
  }

  bool WaitFor(bool (Impl::*ready)() const, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    return mu_.AwaitWithTimeout(absl::Condition(this, ready), timeout);
  }

  bool WaitForFrame(uint64_t frame, absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    auto reached = [this, frame]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return state_.have_snapshot() && state_.frame() >= frame;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&reached), timeout);
  }

  bool SyncedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return state_.have_snapshot() && !state_.in_snapshot() && stream_up_;
  }

  absl::StatusOr<Matrix3x4> WorldMatrix(EntityId e) const {
    absl::MutexLock lock(&mu_);
    const client_internal::Copy& copy = state_.copy();
    const uint32_t i = copy.Find(e);
    if (i == client_internal::Copy::kAbsent) return NotInMirror(e);
    return copy.world(i);
  }
  absl::StatusOr<EntityId> Parent(EntityId e) const {
    absl::MutexLock lock(&mu_);
    const client_internal::Copy& copy = state_.copy();
    const uint32_t i = copy.Find(e);
    if (i == client_internal::Copy::kAbsent) return NotInMirror(e);
    return copy.parent(i);
  }
  bool Has(EntityId e) const {
    absl::MutexLock lock(&mu_);
    return state_.copy().Find(e) != client_internal::Copy::kAbsent;
  }
  size_t size() const {
    absl::MutexLock lock(&mu_);
    return state_.copy().size();
  }
  uint64_t frame() const {
    absl::MutexLock lock(&mu_);
    return state_.frame();
  }
  void CopyAll(std::vector<EntityId>* entities,
               std::vector<Matrix3x4>* worlds) const {
    absl::MutexLock lock(&mu_);
    const client_internal::Copy& copy = state_.copy();
    entities->clear();
    worlds->clear();
    entities->reserve(copy.size());
    worlds->reserve(copy.size());
    copy.ForEachRow([&](uint32_t i) {
      entities->push_back(copy.id(i));
      worlds->push_back(copy.world(i));
    });
  }

  MirrorChanges TakeChanges() {
    MirrorChanges changes;
    NetChanges::Map pending;
    {
      absl::MutexLock lock(&mu_);
      pending = state_.TakeChanges(&changes.resynced);
      changes.frame = state_.frame();
    }
    for (const auto& [e, flags] : pending) {
      if (flags & kDestroyed) changes.destroyed.push_back(e);
      if (flags & kCreated) changes.created.push_back(e);
      if (flags & kMoved) changes.moved.push_back(e);
      if (flags & kReparented) changes.reparented.push_back(e);
    }
    return changes;
  }

  MirrorChangedState TakeChangedState(bool with_parent_worlds, bool whole) {
    MirrorChangedState state;
    absl::MutexLock lock(&mu_);
    const NetChanges::Map pending = state_.TakeChanges(&state.resynced, whole);
    state.frame = state_.frame();
    state.stamp = state_.stamp();
    const client_internal::Copy& copy = state_.copy();
    state.entities.reserve(pending.size());
    state.parents.reserve(pending.size());
    state.worlds.reserve(pending.size());
    for (const auto& [e, flags] : pending) {
      const uint32_t i = copy.Find(e);
      if (i == client_internal::Copy::kAbsent) {
        if (flags & kDestroyed) state.destroyed.push_back(e);
        continue;
      }
      state.entities.push_back(e);
      state.parents.push_back(copy.parent(i));
      state.worlds.push_back(copy.world(i));
      if (with_parent_worlds) {
        const uint32_t p = copy.parent(i) == kNoEntity
                               ? client_internal::Copy::kAbsent
                               : copy.Find(copy.parent(i));
        state.parent_worlds.push_back(
            p == client_internal::Copy::kAbsent ? Matrix3x4{} : copy.world(p));
      }
    }
    return state;
  }

  bool synced() const {
    absl::MutexLock lock(&mu_);
    return SyncedLocked();
  }
  int resumes() const {
    absl::MutexLock lock(&mu_);
    return resumes_;
  }
  int resyncs() const {
    absl::MutexLock lock(&mu_);
    return state_.resyncs();
  }
  absl::Status status() const {
    absl::MutexLock lock(&mu_);
    return status_;
  }

 private:
  static absl::Status NotInMirror(EntityId e) {
    return absl::NotFoundError(absl::StrCat("entity ", e, " is not mirrored"));
  }

  // One stream: gRPC's callback API reads it, and each message is handed
  // to the mirror's queue as its bytes (a move, on gRPC's thread: nothing
  // else runs there, not even the parse; see Parse). When the queue is
  // full, the next read waits (a hold keeps the stream alive meanwhile)
  // until a message is taken: the stream stops, and the server folds
  // frames, as it does for any slow reader.
  enum class Next { kRead, kPause, kStop };  // What a stream does next.
  class Stream final
      : public grpc::ClientBidiReactor<v1::SubscribeRequest, grpc::ByteBuffer> {
   public:
    // Subscribes through `channel` with `request`, which outlives it.
    Stream(Impl& impl, uint64_t id, client_internal::Channel& channel,
           const v1::SubscribeRequest& request)
        : impl_(impl), id_(id) {
      client_internal::Prepare(impl.client_.options(), /*with_deadline=*/false,
                               &context_);
      channel.subscribe_bytes->PrepareBidiStreamingCall(
          &context_, client_internal::SubscribeMethod(), grpc::StubOptions(),
          this);
      StartWriteLast(&request, grpc::WriteOptions());
      StartRead(&wire_);
      StartCall();
    }
    uint64_t id() const { return id_; }
    void Cancel() { context_.TryCancel(); }
    // The server names the subscription (for SetRegion) before its first
    // message.
    void OnReadInitialMetadataDone(bool ok) override {
      if (!ok) return;
      const auto& metadata = context_.GetServerInitialMetadata();
      const auto it = metadata.find(v1::kSubscriptionIdMetadata);
      uint64_t subscription = 0;
      if (it != metadata.end() &&
          absl::SimpleAtoi(
              absl::string_view(it->second.data(), it->second.size()),
              &subscription)) {
        impl_.Named(id_, subscription);
      }
    }
    // Reads on after a pause.
    void Resume() {
      StartRead(&wire_);
      RemoveHold();
    }

    void OnReadDone(bool ok) override {
      if (!ok) return;  // The stream is over: OnDone follows.
      Arrival arrival{.received = absl::Now(), .stream = id_};
      arrival.bytes = wire_.Length();
      arrival.wire.buffer.Swap(&wire_);
      // Held before the queue can hand the message to a taker who might
      // resume this stream, so that OnDone cannot come in between.
      AddHold();
      switch (impl_.Arrived(this, std::move(arrival))) {
        case Next::kRead:
          StartRead(&wire_);
          RemoveHold();
          break;
        case Next::kPause:
          break;  // Resume() reads on, and lets go of the hold.
        case Next::kStop:
          RemoveHold();
          break;
      }
    }
    void OnDone(const grpc::Status& status) override {
      impl_.Ended(id_, client_internal::FromGrpc(status));  // The last act.
    }

   private:
    Impl& impl_;
    const uint64_t id_;
    grpc::ClientContext context_;
    grpc::ByteBuffer wire_;
  };
  // gRPC's thread: queues the message, and says whether to read on.
  Next Arrived(Stream* stream, Arrival arrival) {
    absl::MutexLock lock(&mu_);
    if (stopping_ || stream->id() == broken_stream_) return Next::kStop;
    received_on_stream_ = true;
    queue_.push_back(std::move(arrival));
    if (queue_.size() < static_cast<size_t>(options_.max_queued)) {
      return Next::kRead;
    }
    paused_ = stream;
    return Next::kPause;
  }

  void Named(uint64_t stream, uint64_t subscription) {
    absl::MutexLock lock(&mu_);
    if (stream == stream_id_) subscription_ = subscription;
  }

  void Ended(uint64_t id, absl::Status status) {
    absl::MutexLock lock(&mu_);
    if (id == broken_stream_) status = broken_;
    ended_status_ = status;
    stream_done_ = true;
  }

  // Takes the next message (waiting for one, for the mirror's thread),
  // decodes and applies it, and tells the caller's callbacks; false when
  // there was none, or the mirror is stopping.
  bool TakeAndApply(bool wait) {
    // One taker at a time, from the queue to the copy: messages decode and
    // apply in order.
    absl::ReleasableMutexLock take(&take_mu_);
    Arrival arrival;
    bool dropped = false;
    if (!TakeNext(wait, arrival, dropped)) return false;
    // However this ends, the message is then spare (after Notify, its last
    // reader).
    absl::Cleanup recycle = [&] { Recycle(arrival.update); };
    if (dropped) return true;
    const bool first_of_stream = arrival.stream != applied_stream_;
    if (first_of_stream) {
      // What the last stream left unfinished goes; the copy stays, for the
      // new one to resume.
      applied_stream_ = arrival.stream;
      absl::MutexLock lock(&mu_);
      state_.NewStream();
    }
    // Only this thread (or Update()'s caller) decodes: in order.
    absl::Status decoded = Parse(arrival);
    if (decoded.ok()) decoded = Decode(arrival);
    if (!decoded.ok()) {
      // The supervisor cancels it (never under a lock: gRPC may run the
      // stream's reactions inline), and resynchronises on a new stream.
      absl::MutexLock lock(&mu_);
      broken_stream_ = arrival.stream;
      broken_ = decoded;
      return true;
    }
    std::optional<MirrorUpdate> update;
    if (options_.on_update || interpolator_ != nullptr) {
      update = UpdateOf(arrival);
    }
    // The interpolator has the frame before a caller waiting for the frame
    // (WaitForFrame) wakes to ask it.
    if (interpolator_ != nullptr) interpolator_->OnUpdate(*update);
    Commit(arrival, first_of_stream);
    take.Release();
    Notify(arrival, update);
    return true;
  }

  // The queue's next message into `arrival` (waiting for one if `wait`),
  // with a spare message for Parse to fill; `dropped` if the rest of its
  // stream is dropped. False when there was none, or the mirror stops.
  bool TakeNext(bool wait, Arrival& arrival, bool& dropped)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(take_mu_) {
    Stream* resume = nullptr;
    {
      absl::MutexLock lock(&mu_);
      auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_ || !queue_.empty();
      };
      if (wait) mu_.Await(absl::Condition(&ready));
      if (stopping_ || queue_.empty()) return false;
      arrival = std::move(queue_.front());
      queue_.pop_front();
      // What Parse fills: a spare message, if there is one.
      if (!spare_.empty()) {
        arrival.update.Swap(&spare_.back());
        spare_.pop_back();
      }
      std::swap(resume, paused_);
      // The rest of a stream that would not decode is dropped. (Only a
      // taker marks one, so this cannot change before the decode.)
      dropped = arrival.stream == broken_stream_;
    }
    if (resume != nullptr) resume->Resume();
    return true;
  }

  // A decoded message into the copy.
  void Commit(Arrival& arrival, bool first_of_stream)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(take_mu_) {
    absl::MutexLock lock(&mu_);
    // A stream that asked to resume and was not sent its view afresh
    // resumed.
    if (first_of_stream && arrival.stream == resuming_stream_ &&
        !(arrival.update.snapshot() && !arrival.update.keeps_view())) {
      ++resumes_;
    }
    state_.Commit(arrival.update, &arrival.worlds);
    // Up once its messages reach the copy, not merely the queue.
    if (arrival.stream == stream_id_) {
      stream_up_ = true;
      status_ = absl::OkStatus();
    }
  }

  // Keeps a message that has been applied for a later parse to fill:
  // cleared, its fields keep their memory, so parsing the next one neither
  // allocates nor regrows them. A fresh 10,000-move message regrew its
  // matrices' field by doubling, copying it about once more as it parsed.
  // Not a snapshot's part, nor one bigger than kMaxSpareBytes: what they
  // hold is rarely needed again, and would stay with the mirror.
  void Recycle(v1::FrameUpdate& spent) {
    if (spent.snapshot() || spent.SpaceUsedLong() > kMaxSpareBytes) return;
    spent.Clear();
    absl::MutexLock lock(&mu_);
    if (spare_.size() < kMaxSpare) spare_.push_back(std::move(spent));
  }

  // Parses the message's bytes into its `update` (a spare message, when
  // TakeAndApply found one), on the taker's thread. DATA_LOSS for bytes
  // that do not parse (the stream is then dropped and resynced, as gRPC's
  // own parse failing would end it). Figures for 16 Mirrors of a 1M world,
  // from docs/benchmarks.md:
  // - Not on gRPC's threads: their few read every stream of the process,
  //   and while one parsed a message (85 us for 10,000 moves) the others'
  //   messages waited to be read (p99 5.82 -> 5.48 ms).
  // - A raw message's matrices are not parsed at all: they stay in gRPC's
  //   buffers (v1::ParseLeavingMovedWorld), and the copy's rows are written
  //   from there (p99 5.49 -> 5.14 ms). A compact stream's are in
  //   compact_moved, so its messages are parsed whole: the scan would only
  //   copy the rest aside.
  absl::Status Parse(Arrival& arrival) {
    arrival.reader =
        std::make_unique<grpc::ProtoBufferReader>(&arrival.wire.buffer);
    if (options_.encoding == MirrorOptions::Encoding::kCompact) {
      return v1::ParseFrameUpdate(*arrival.reader, arrival.update);
    }
    return v1::ParseLeavingMovedWorld(*arrival.reader, arrival.update,
                                      arrival.worlds);
  }

  // Decoding, most of a message's work, reads the copy without mu_ so that
  // readers do not wait for it: only a holder of take_mu_ changes the copy
  // (holding mu_ as well), and the decoder's scratch is the taker's alone,
  // as are the poses held for decoding, which it writes back (no reader
  // looks at them).
  absl::Status Decode(Arrival& arrival)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(take_mu_) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    const v1::FrameUpdate& u = arrival.update;
    absl::Status decoded = state_.Decode(u, &arrival.worlds);
    if (!decoded.ok() || (!options_.on_update && interpolator_ == nullptr)) {
      return decoded;
    }
    // The interpolator needs every message's matrices, whatever
    // on_update_matrices says.
    std::vector<float>* matrices =
        options_.on_update_matrices || interpolator_ != nullptr
            ? &arrival.moved_world
            : nullptr;
    const bool compact = !u.compact_moved().empty();
    if (matrices != nullptr && !arrival.worlds.empty()) {
      matrices->resize(arrival.worlds.floats());
      arrival.worlds.CopyTo(matrices->data());
    } else if (matrices != nullptr && compact) {
      matrices->assign(u.moved_world().begin(), u.moved_world().end());
    }
    if (compact) {  // Its raw moves (a peer may send both), then the rest.
      arrival.moved.assign(u.moved().begin(), u.moved().end());
      state_.AppendDecoded(arrival.moved, matrices);
    }
    return decoded;
  }

  // The mirror's thread (kBackground): applies each message as it comes.
  void ApplyLoop() {
    while (true) {
      if (!TakeAndApply(/*wait=*/true)) {
        absl::MutexLock lock(&mu_);
        if (stopping_) return;
      }
    }
  }

  // One subscription after another until the mirror stops: a stream that
  // ends for any reason but our own cancel is re-established after a backoff
  // that doubles while the server stays away. This thread does nothing per
  // message.
  void Supervise() {
    absl::Duration backoff = options_.reconnect_min;
    for (uint64_t id = 1;; ++id) {
      const size_t node = client_.nodes_->current();
      std::optional<v1::SubscribeRequest> request = NextRequest(id, node);
      if (!request) return;  // Stopping.
      RunStream(std::make_unique<Stream>(*this, id, client_.nodes_->At(node),
                                         *request),
                id);
      absl::MutexLock lock(&mu_);
      stream_id_ = 0;
      stream_up_ = false;
      if (stopping_) return;
      status_ = ended_status_.ok()
                    ? absl::UnavailableError("the server ended the stream")
                    : ended_status_;
      // A node lost or leaving: the next of a cluster's, at once.
      if (absl::IsUnavailable(status_) && client_.nodes_->several()) {
        client_.nodes_->FailOver(node);
        if (received_on_stream_) {
          backoff = options_.reconnect_min;
          continue;
        }
      }
      if (received_on_stream_) backoff = options_.reconnect_min;
      auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_;
      };
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping), backoff)) return;
      backoff = std::min(2 * backoff, options_.reconnect_max);
    }
  }

  // Stream `id`'s request, to `node`, with the state reset for it; nullopt
  // when the mirror stops.
  std::optional<v1::SubscribeRequest> NextRequest(uint64_t id, size_t node) {
    absl::MutexLock lock(&mu_);
    if (stopping_) return std::nullopt;
    v1::SubscribeRequest request = request_;  // SetRegion changes it.
    subscription_ = 0;
    stream_node_ = node;
    stream_done_ = false;
    received_on_stream_ = false;
    stream_id_ = id;  // Before its first message can be applied.
    // A whole copy of a known history resumes from its frame: sent what
    // changed since, by this node or another of its cluster.
    if (Resumable()) {
      request.set_resume_from_frame(state_.frame());
      request.set_resume_history(state_.history());
      resuming_stream_ = id;
    }
    return request;
  }

  // Waits until stream `id` is done; cancels it, outside the lock, when
  // the mirror stops or a message of it does not decode.
  void RunStream(std::unique_ptr<Stream> stream, uint64_t id) {
    mu_.Lock();
    bool cancelled = false;
    auto due = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stream_done_ ||
             (!cancelled && (stopping_ || broken_stream_ == id));
    };
    while (true) {
      mu_.Await(absl::Condition(&due));
      if (stream_done_) break;
      cancelled = true;
      mu_.Unlock();
      stream->Cancel();
      mu_.Lock();
    }
    mu_.Unlock();
    stream.reset();
  }

  bool Resumable() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return options_.entities.empty() && options_.subtrees.empty() &&
           !options_.region && !options_.no_echo && state_.have_snapshot() &&
           !state_.in_snapshot() && state_.history() != 0;
  }

  // After the copy took `arrival`: the callbacks.
  void Notify(const Arrival& arrival, std::optional<MirrorUpdate> update) {
    const v1::FrameUpdate& u = arrival.update;
    if (options_.on_frame &&
        (u.snapshot() ? u.snapshot_done() : u.last_part())) {
      options_.on_frame(u.frame());
    }
    if (!options_.on_update || !update) return;
    if (!options_.on_update_matrices) update->moved_world = {};
    options_.on_update(*update);
  }

  // `arrival` as the callbacks and the interpolator see it: spans over the
  // message, valid until it is recycled.
  MirrorUpdate UpdateOf(const Arrival& arrival) {
    const v1::FrameUpdate& u = arrival.update;
    MirrorUpdate update;
    update.frame = u.frame();
    update.snapshot = u.snapshot();
    update.snapshot_done = u.snapshot_done();
    update.keeps_view = u.keeps_view();
    update.part = u.part();
    update.last_part = u.last_part();
    update.frames_skipped = u.frames_skipped();
    update.published = absl::FromUnixNanos(u.server_time_unix_nanos());
    update.stamp = u.stamp_nanos();
    update.received = arrival.received;
    update.bytes = arrival.bytes;
    if (u.compact_moved().empty()) {
      update.moved = SpanOf(u.moved());
      update.moved_world = arrival.worlds.empty() ? SpanOf(u.moved_world())
                                                  : arrival.moved_world;
    } else {
      update.moved = arrival.moved;
      update.moved_world = arrival.moved_world;
    }
    update.created = SpanOf(u.created());
    update.created_parent = SpanOf(u.created_parent());
    update.destroyed = SpanOf(u.destroyed());
    update.reparented = SpanOf(u.reparented());
    update.reparented_parent = SpanOf(u.reparented_parent());
    return update;
  }

  const MirrorOptions options_;
  Client& client_;
  // MirrorOptions::interpolation's, or null. Fed on the taker's thread,
  // after the copy (Notify); thread-safe itself.
  const std::unique_ptr<Interpolator> interpolator_;
  v1::SubscribeRequest request_ ABSL_GUARDED_BY(mu_);
  std::thread supervisor_;
  std::thread applier_;  // kBackground's.

  // The taker's (the mirror's thread, or Update()'s caller).
  absl::Mutex take_mu_;
  uint64_t applied_stream_ ABSL_GUARDED_BY(take_mu_) = 0;

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t stream_id_ ABSL_GUARDED_BY(mu_) = 0;  // The supervisor's stream.
  // Its subscription as the server names it (0: not yet), at this node.
  uint64_t subscription_ ABSL_GUARDED_BY(mu_) = 0;
  size_t stream_node_ ABSL_GUARDED_BY(mu_) = 0;
  bool stream_done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status ended_status_ ABSL_GUARDED_BY(mu_);
  bool received_on_stream_ ABSL_GUARDED_BY(mu_) = false;
  // The stream whose read waits for room in the queue.
  Stream* paused_ ABSL_GUARDED_BY(mu_) = nullptr;
  // A stream whose message would not decode: the rest of it is dropped.
  uint64_t broken_stream_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status broken_ ABSL_GUARDED_BY(mu_);
  bool stream_up_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t resuming_stream_ ABSL_GUARDED_BY(mu_) = 0;  // Asked to resume.
  int resumes_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status status_ ABSL_GUARDED_BY(mu_) =
      absl::UnavailableError("not connected yet");
  std::deque<Arrival> queue_ ABSL_GUARDED_BY(mu_);  // At most max_queued.
  // Applied messages, cleared, for parses to fill (Recycle, TakeAndApply).
  // A taker gives its message back only after its callbacks, having let go
  // of take_mu_; two, so that a second taker (Update() callers) parsing
  // meanwhile finds one too. Each at most 4 MB: a 1M world's 10,000-move
  // frame is 560 KB raw.
  static constexpr size_t kMaxSpare = 2;
  static constexpr size_t kMaxSpareBytes = size_t{4} << 20;
  std::vector<v1::FrameUpdate> spare_ ABSL_GUARDED_BY(mu_);

  client_internal::MirrorState state_ ABSL_GUARDED_BY(mu_);
};

absl::StatusOr<std::unique_ptr<Mirror>> Mirror::Start(Client& client,
                                                      MirrorOptions options) {
  if (options.world.empty()) {
    return absl::InvalidArgumentError("MirrorOptions.world is empty");
  }
  if (options.max_queued < 1) {
    return absl::InvalidArgumentError("MirrorOptions.max_queued must be >= 1");
  }
  if (options.max_entities < 1) {
    return absl::InvalidArgumentError(
        "MirrorOptions.max_entities must be >= 1");
  }
  if (options.no_echo && client.options().client_id.empty()) {
    return absl::InvalidArgumentError(
        "no_echo needs the client's ClientOptions.client_id");
  }
  if (options.reconnect_min <= absl::ZeroDuration() ||
      options.reconnect_max < options.reconnect_min) {
    return absl::InvalidArgumentError(
        "reconnect backoff must be positive, min <= max");
  }
  return std::unique_ptr<Mirror>(
      new Mirror(std::make_unique<Impl>(client, std::move(options))));
}

Mirror::Mirror(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Mirror::~Mirror() = default;

int Mirror::Update() { return impl_->Update(); }
bool Mirror::WaitForSync(absl::Duration timeout) {
  return impl_->WaitFor(&Impl::SyncedLocked, timeout);
}
bool Mirror::WaitForFrame(uint64_t frame, absl::Duration timeout) {
  return impl_->WaitForFrame(frame, timeout);
}
absl::StatusOr<Matrix3x4> Mirror::WorldMatrix(EntityId entity) const {
  return impl_->WorldMatrix(entity);
}
absl::StatusOr<EntityId> Mirror::Parent(EntityId entity) const {
  return impl_->Parent(entity);
}
bool Mirror::Has(EntityId entity) const { return impl_->Has(entity); }
size_t Mirror::size() const { return impl_->size(); }
uint64_t Mirror::frame() const { return impl_->frame(); }
void Mirror::CopyAll(std::vector<EntityId>* entities,
                     std::vector<Matrix3x4>* worlds) const {
  impl_->CopyAll(entities, worlds);
}
MirrorChanges Mirror::TakeChanges() { return impl_->TakeChanges(); }
MirrorChangedState Mirror::TakeChangedState(bool with_parent_worlds) {
  return impl_->TakeChangedState(with_parent_worlds, /*whole=*/false);
}
MirrorChangedState Mirror::TakeWholeState(bool with_parent_worlds) {
  return impl_->TakeChangedState(with_parent_worlds, /*whole=*/true);
}
bool Mirror::synced() const { return impl_->synced(); }
int Mirror::resyncs() const { return impl_->resyncs(); }
int Mirror::resumes() const { return impl_->resumes(); }
absl::Status Mirror::status() const { return impl_->status(); }
absl::Status Mirror::SetRegion(const Region& region) {
  return impl_->SetRegion(region);
}

namespace {

absl::Status NoInterpolation() {
  return absl::FailedPreconditionError(
      "the mirror keeps no history: set MirrorOptions::interpolation");
}

}  // namespace

absl::StatusOr<Stamp> Mirror::RenderStamp(absl::Time now) {
  if (impl_->interpolator() == nullptr) return NoInterpolation();
  return impl_->interpolator()->RenderStamp(now);
}
absl::StatusOr<absl::Duration> Mirror::InterpolationDelay() const {
  if (impl_->interpolator() == nullptr) return NoInterpolation();
  return impl_->interpolator()->delay();
}
absl::StatusOr<Matrix3x4> Mirror::WorldMatrixAt(EntityId entity,
                                                Stamp stamp) const {
  if (impl_->interpolator() == nullptr) return NoInterpolation();
  return impl_->interpolator()->WorldMatrixAt(entity, stamp);
}
absl::StatusOr<TimedPose> Mirror::LookupTransform(EntityId target,
                                                  EntityId source,
                                                  Stamp stamp) const {
  if (impl_->interpolator() == nullptr) return NoInterpolation();
  return impl_->interpolator()->LookupTransform(target, source, stamp);
}

}  // namespace xform
