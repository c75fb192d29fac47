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
#include "xform/net_changes.h"
#include "xform/v1/frame_update.h"
#include "xform/v1/wire.h"

namespace xform {
namespace {

// Each entity's parent and world matrix, structure-of-arrays, with removal by
// swapping the last entry in: the mirror has no order to keep, only lookups
// and whole-copy reads to serve.
class Copy {
 public:
  static constexpr uint32_t kAbsent = ~uint32_t{0};

  size_t size() const { return ids_.size(); }
  uint32_t Find(EntityId e) const {
    auto it = index_.find(e);
    return it == index_.end() ? kAbsent : it->second;
  }
  EntityId id(uint32_t i) const { return ids_[i]; }
  EntityId parent(uint32_t i) const { return parents_[i]; }
  const Matrix3x4& world(uint32_t i) const { return worlds_[i]; }
  const std::vector<EntityId>& ids() const { return ids_; }
  const std::vector<Matrix3x4>& worlds() const { return worlds_; }

  // Adds `e`, or re-parents it when present (a replayed create).
  uint32_t Add(EntityId e, EntityId parent) {
    auto [it, inserted] = index_.try_emplace(e, ids_.size());
    if (inserted) {
      ids_.push_back(e);
      parents_.push_back(parent);
      worlds_.emplace_back();
    } else {
      parents_[it->second] = parent;
    }
    return it->second;
  }
  void Remove(EntityId e) {
    auto it = index_.find(e);
    if (it == index_.end()) return;
    const uint32_t i = it->second;
    index_.erase(it);
    if (i + 1 != ids_.size()) {
      ids_[i] = ids_.back();
      parents_[i] = parents_.back();
      worlds_[i] = worlds_.back();
      index_[ids_[i]] = i;
    }
    ids_.pop_back();
    parents_.pop_back();
    worlds_.pop_back();
  }
  void SetParent(uint32_t i, EntityId parent) { parents_[i] = parent; }
  void SetWorld(uint32_t i, const float* m) {
    worlds_[i] = v1::MatrixFromWire(m);
  }
  void Clear() {
    index_.clear();
    ids_.clear();
    parents_.clear();
    worlds_.clear();
  }

 private:
  absl::flat_hash_map<EntityId, uint32_t> index_;
  std::vector<EntityId> ids_;
  std::vector<EntityId> parents_;
  std::vector<Matrix3x4> worlds_;
};

template <typename T>
absl::Span<const T> SpanOf(const google::protobuf::RepeatedField<T>& field) {
  return absl::MakeConstSpan(field.data(), field.size());
}

struct Arrival {
  v1::FrameUpdate update;
  absl::Time received;
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
        ApplyLocked(arrival.update);
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
      return have_snapshot_ && frame_ >= frame;
    };
    return mu_.AwaitWithTimeout(absl::Condition(&reached), timeout);
  }

  bool SyncedLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return have_snapshot_ && !in_snapshot_ && stream_up_;
  }

  absl::StatusOr<Matrix3x4> WorldMatrix(EntityId e) const {
    absl::MutexLock lock(&mu_);
    const uint32_t i = copy_.Find(e);
    if (i == Copy::kAbsent) return NotInMirror(e);
    return copy_.world(i);
  }
  absl::StatusOr<EntityId> Parent(EntityId e) const {
    absl::MutexLock lock(&mu_);
    const uint32_t i = copy_.Find(e);
    if (i == Copy::kAbsent) return NotInMirror(e);
    return copy_.parent(i);
  }
  bool Has(EntityId e) const {
    absl::MutexLock lock(&mu_);
    return copy_.Find(e) != Copy::kAbsent;
  }
  size_t size() const {
    absl::MutexLock lock(&mu_);
    return copy_.size();
  }
  uint64_t frame() const {
    absl::MutexLock lock(&mu_);
    return frame_;
  }
  void CopyAll(std::vector<EntityId>* entities,
               std::vector<Matrix3x4>* worlds) const {
    absl::MutexLock lock(&mu_);
    *entities = copy_.ids();
    *worlds = copy_.worlds();
  }

  MirrorChanges TakeChanges() {
    MirrorChanges changes;
    NetChanges::Map pending;
    {
      absl::MutexLock lock(&mu_);
      pending = pending_.Take();
      changes.frame = frame_;
      changes.resynced = resynced_since_asked_;
      resynced_since_asked_ = false;
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
    return resyncs_;
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
      Arrival arrival;
      while (reader->Read(&arrival.update)) {
        arrival.received = absl::Now();
        backoff = options_.reconnect_min;
        if (!Receive(arrival)) break;
      }
      const absl::Status ended = client_internal::FromGrpc(reader->Finish());
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
        ApplyLocked(arrival.update);
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
    update.bytes = u.ByteSizeLong();
    update.moved = SpanOf(u.moved());
    update.moved_world = SpanOf(u.moved_world());
    update.created = SpanOf(u.created());
    update.created_parent = SpanOf(u.created_parent());
    update.destroyed = SpanOf(u.destroyed());
    update.reparented = SpanOf(u.reparented());
    update.reparented_parent = SpanOf(u.reparented_parent());
    options_.on_update(update);
  }

  void Note(EntityId e, NetChange change) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    pending_.Note(e, change);
  }

  void ApplyLocked(const v1::FrameUpdate& u)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (u.snapshot()) {
      ApplySnapshotPart(u);
      return;
    }
    // The parts of a frame are taken in together, so the copy never shows
    // half a frame. Parts come in order, with no other message between.
    if (!u.last_part()) {
      frame_parts_.push_back(u);
      return;
    }
    for (const v1::FrameUpdate& part : frame_parts_) ApplyDelta(part);
    frame_parts_.clear();
    ApplyDelta(u);
  }

  void ApplyDelta(const v1::FrameUpdate& u) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const v1::FrameUpdateReader r(u);
    for (EntityId e : r.destroyed()) {
      if (copy_.Find(e) == Copy::kAbsent) continue;
      copy_.Remove(e);
      Note(e, kDestroyed);
    }
    for (int k = 0; k < r.created_size(); ++k) {
      copy_.Add(r.created(k), r.created_parent(k));
      Note(r.created(k), kCreated);
    }
    for (int k = 0; k < r.reparented_size(); ++k) {
      const uint32_t i = copy_.Find(r.reparented(k));
      if (i == Copy::kAbsent) continue;
      copy_.SetParent(i, r.reparented_parent(k));
      Note(r.reparented(k), kReparented);
    }
    ApplyMoved(r, copy_, /*note=*/true);
    frame_ = u.frame();
  }

  void ApplyMoved(const v1::FrameUpdateReader& r, Copy& copy, bool note)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (int k = 0; k < r.moved_size(); ++k) {
      const uint32_t i = copy.Find(r.moved(k));
      if (i == Copy::kAbsent) continue;
      copy.SetWorld(i, r.moved_world_data(k));
      if (note) Note(r.moved(k), kMoved);
    }
  }

  // Snapshot messages build a fresh copy aside; the last one swaps it in and
  // notes the difference from the copy it replaces, so a resync tells the
  // caller exactly what changed while the stream was down.
  void ApplySnapshotPart(const v1::FrameUpdate& u)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!in_snapshot_ || u.part() == 0) {
      staging_.Clear();
      frame_parts_.clear();  // Of a stream that broke mid-frame.
      in_snapshot_ = true;
    }
    // A snapshot streamed while the world changes: later parts may destroy,
    // re-parent or move what earlier ones created.
    const v1::FrameUpdateReader r(u);
    for (EntityId e : r.destroyed()) {
      if (staging_.Find(e) != Copy::kAbsent) staging_.Remove(e);
    }
    for (int k = 0; k < r.created_size(); ++k) {
      staging_.Add(r.created(k), r.created_parent(k));
    }
    for (int k = 0; k < r.reparented_size(); ++k) {
      const uint32_t i = staging_.Find(r.reparented(k));
      if (i == Copy::kAbsent) continue;
      staging_.SetParent(i, r.reparented_parent(k));
    }
    ApplyMoved(r, staging_, /*note=*/false);
    if (!u.snapshot_done()) return;

    for (EntityId e : copy_.ids()) {
      if (staging_.Find(e) == Copy::kAbsent) Note(e, kDestroyed);
    }
    for (uint32_t i = 0; i < staging_.size(); ++i) {
      const EntityId e = staging_.id(i);
      const uint32_t old = copy_.Find(e);
      if (old == Copy::kAbsent) {
        Note(e, kCreated);
        Note(e, kMoved);
        continue;
      }
      if (copy_.parent(old) != staging_.parent(i)) Note(e, kReparented);
      if (!(copy_.world(old) == staging_.world(i))) Note(e, kMoved);
    }
    std::swap(copy_, staging_);
    staging_.Clear();
    in_snapshot_ = false;
    if (have_snapshot_) {
      ++resyncs_;
      resynced_since_asked_ = true;
    }
    have_snapshot_ = true;
    frame_ = u.frame();
  }

  const MirrorOptions options_;
  Client& client_;
  v1::SubscribeRequest request_;
  std::thread thread_;

  mutable absl::Mutex mu_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  grpc::ClientContext* context_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool stream_up_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_) =
      absl::UnavailableError("not connected yet");
  std::deque<Arrival> queue_ ABSL_GUARDED_BY(mu_);  // kCaller only.

  Copy copy_ ABSL_GUARDED_BY(mu_);
  Copy staging_ ABSL_GUARDED_BY(mu_);
  bool in_snapshot_ ABSL_GUARDED_BY(mu_) = false;
  // The parts so far of a frame that comes in several.
  std::vector<v1::FrameUpdate> frame_parts_ ABSL_GUARDED_BY(mu_);
  bool have_snapshot_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t frame_ ABSL_GUARDED_BY(mu_) = 0;
  int resyncs_ ABSL_GUARDED_BY(mu_) = 0;
  NetChanges pending_ ABSL_GUARDED_BY(mu_);  // Since the caller last asked.
  bool resynced_since_asked_ ABSL_GUARDED_BY(mu_) = false;
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
