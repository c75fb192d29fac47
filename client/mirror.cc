// Copyright 2026 The xform Authors.

#include "xform/mirror.h"

#include <algorithm>
#include <deque>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "client/client_internal.h"
#include "client/mirror_state.h"
#include "xform/net_changes.h"
#include "xform/v1/compact_moves.h"
#include "xform/v1/frame_update.h"
#include "xform/v1/wire.h"

namespace xform {
namespace {

template <typename T>
absl::Span<const T> SpanOf(const google::protobuf::RepeatedField<T>& field) {
  return absl::MakeConstSpan(field.data(), field.size());
}

struct Arrival {
  v1::FrameUpdate update;  // Raw: a compact one is decoded on arrival.
  absl::Time received;
  size_t bytes = 0;  // On the wire.
};

}  // namespace

class Mirror::Impl {
 public:
  Impl(Client& client, MirrorOptions options)
      : options_(std::move(options)), client_(client) {
    request_.set_world(options_.world);
    request_.mutable_entity()->Add(options_.entities.begin(),
                                   options_.entities.end());
    request_.mutable_subtree()->Add(options_.subtrees.begin(),
                                    options_.subtrees.end());
    request_.set_max_rate_hz(options_.max_rate_hz);
    if (options_.no_echo) {
      request_.set_no_echo_client_id(client.options().client_id);
    }
    if (options_.encoding == MirrorOptions::Encoding::kCompact) {
      request_.set_encoding(v1::ENCODING_COMPACT);
      request_.set_position_precision(options_.position_precision);
    }
    thread_ = std::thread([this] { ReceiveLoop(); });
  }

  ~Impl() {
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
      if (context_ != nullptr) context_->TryCancel();
    }
    thread_.join();
  }

  int Update() {
    int applied = 0;
    while (true) {
      Arrival arrival;
      {
        absl::MutexLock lock(&mu_);
        if (queue_.empty()) break;
        arrival = std::move(queue_.front());
        queue_.pop_front();
        state_.Apply(arrival.update);
      }
      Notify(arrival);
      ++applied;
    }
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
    *entities = state_.copy().ids();
    *worlds = state_.copy().worlds();
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

  bool synced() const {
    absl::MutexLock lock(&mu_);
    return SyncedLocked();
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

  // One subscription after another until the mirror stops: a stream that
  // ends for any reason but our own cancel is re-established after a backoff
  // that doubles while the server stays away.
  void ReceiveLoop() {
    absl::Duration backoff = options_.reconnect_min;
    while (true) {
      grpc::ClientContext context;
      client_internal::Prepare(client_.options(), /*with_deadline=*/false,
                               &context);
      {
        absl::MutexLock lock(&mu_);
        if (stopping_) return;
        context_ = &context;
      }
      std::unique_ptr<grpc::ClientReader<v1::FrameUpdate>> reader =
          client_.channel_->stub->Subscribe(&context, request_);
      // Compact deltas are against what this stream sent: a new stream
      // starts afresh, with a snapshot.
      compact_.Reset();
      absl::Status broken;
      Arrival arrival;
      while (reader->Read(&arrival.update)) {
        if (!broken.ok()) continue;  // Cancelled: Read() fails soon.
        arrival.received = absl::Now();
        arrival.bytes = arrival.update.ByteSizeLong();
        if (broken = compact_.Decode(arrival.update); !broken.ok()) {
          context.TryCancel();  // Resynchronised on a new stream.
          continue;
        }
        backoff = options_.reconnect_min;
        if (!Receive(arrival)) break;
      }
      absl::Status ended = client_internal::FromGrpc(reader->Finish());
      if (!broken.ok()) ended = broken;
      absl::MutexLock lock(&mu_);
      context_ = nullptr;
      stream_up_ = false;
      if (stopping_) return;
      status_ = ended.ok()
                    ? absl::UnavailableError("the server ended the stream")
                    : ended;
      auto stopping = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return stopping_;
      };
      if (mu_.AwaitWithTimeout(absl::Condition(&stopping), backoff)) return;
      backoff = std::min(2 * backoff, options_.reconnect_max);
    }
  }

  // Applies or queues one message; false when the mirror is stopping.
  bool Receive(Arrival& arrival) {
    if (options_.driver == MirrorOptions::Driver::kBackground) {
      {
        absl::MutexLock lock(&mu_);
        if (stopping_) return false;
        stream_up_ = true;
        status_ = absl::OkStatus();
        state_.Apply(arrival.update);
      }
      Notify(arrival);
      return true;
    }
    absl::MutexLock lock(&mu_);
    auto room = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return stopping_ ||
             queue_.size() < static_cast<size_t>(options_.max_queued);
    };
    mu_.Await(absl::Condition(&room));
    if (stopping_) return false;
    stream_up_ = true;
    status_ = absl::OkStatus();
    queue_.push_back(std::move(arrival));
    return true;
  }

  void Notify(const Arrival& arrival) {
    if (!options_.on_update) return;
    const v1::FrameUpdate& u = arrival.update;
    MirrorUpdate update;
    update.frame = u.frame();
    update.snapshot = u.snapshot();
    update.snapshot_done = u.snapshot_done();
    update.part = u.part();
    update.last_part = u.last_part();
    update.frames_skipped = u.frames_skipped();
    update.published = absl::FromUnixNanos(u.server_time_unix_nanos());
    update.received = arrival.received;
    update.bytes = arrival.bytes;
    update.moved = SpanOf(u.moved());
    update.moved_world = SpanOf(u.moved_world());
    update.created = SpanOf(u.created());
    update.created_parent = SpanOf(u.created_parent());
    update.destroyed = SpanOf(u.destroyed());
    update.reparented = SpanOf(u.reparented());
    update.reparented_parent = SpanOf(u.reparented_parent());
    options_.on_update(update);
  }

  const MirrorOptions options_;
  Client& client_;
  v1::SubscribeRequest request_;
  std::thread thread_;
  v1::CompactMovesReader compact_;  // The receiving thread's.

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool stream_up_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_) =
      absl::UnavailableError("not connected yet");
  std::deque<Arrival> queue_ ABSL_GUARDED_BY(mu_);  // kCaller only.

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
bool Mirror::synced() const { return impl_->synced(); }
int Mirror::resyncs() const { return impl_->resyncs(); }
absl::Status Mirror::status() const { return impl_->status(); }

}  // namespace xform
