// Copyright 2026 The xform Authors.
//
// The Replicator's costs under its lock, which is the world's: whatever one
// call holds it for, the world's publication and its other subscribers wait.
//
// BM_SnapshotBurst: a whole-world snapshot of a world that changes faster
// than the stream carries it (every entity moves between any two parts).
// The first pass goes a part at a time; what changed behind it then goes at
// once, as a burst the BurstBudget granted, so the snapshot ends at one
// frame. The reported time is the longest another caller waited for the
// world's lock meanwhile (a LockProbe's), which is the burst's hold;
// `longest_next_ms` the longest Next() call (the burst's, including work
// outside the lock), and `burst_entities` its size.
//
// BM_CompactFold: what a compact subscriber that is sent its own messages
// (here rate-limited to 10 a second, on a 60 Hz world) costs the server,
// and what its messages weigh.
//
// BM_StalledSubscriberCatchesUp: what a full-rate subscriber that stopped
// reading is sent, and what that costs, when it reads again.
// BM_StalledSubscriberOwedPastMaxPending: the same, owed more than
// max_pending entities: its view whole, or a snapshot that keeps it.
// BM_KeptViewSnapshotStart: the longest such a snapshot holds the lock.
// BM_SubtreeSnapshotStart: the longest a subtree view's start holds it.
// BM_StalledSubscribers: what such subscribers cost each frame meanwhile.
//
// BM_RateLimitedSubscribers, BM_FilteredSubscribers,
// BM_EchoFilteringSubscribers: what many subscribers of each kind cost
// each frame's publication, and the server in all.

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "benchmark/benchmark.h"
#include "server/replication/burst_budget.h"
#include "server/replication/published_state.h"
#include "server/replication/replicator.h"
#include "server/replication/spatial_index.h"
#include "tools/scenes.h"
#include "xform/v1/compact_moves.h"
#include "xform/world.h"

namespace xform::server {
namespace {

constexpr EntityId kChainLength = 100;

class NullSink : public UpdateSink {
 public:
  void Wake() override {}
  void Poll(absl::Time) override {}
  void End(const absl::Status&) override {}
};

Transform At(float x) {
  Transform t;
  t.position.x = x;
  return t;
}

// Times another caller's waits for the replicator's lock (Replicator::
// frame() takes it and does nothing else), only while allowed: so the
// longest wait it sees is the longest hold by what runs meanwhile.
class LockProbe {
 public:
  explicit LockProbe(const Replicator& replicator)
      : replicator_(replicator), thread_([this] { Run(); }) {}
  ~LockProbe() {
    stop_ = true;
    thread_.join();
  }
  // Probing on, or off once the probe is between calls.
  void Probe(bool on) {
    probing_ = on;
    if (!on) {
      while (in_call_) std::this_thread::yield();
    }
  }
  double longest_seconds() const { return longest_; }

 private:
  void Run() {
    while (!stop_) {
      if (!probing_) {
        std::this_thread::yield();
        continue;
      }
      in_call_ = true;
      if (!probing_) {  // Turned off meanwhile: Probe(false) may be waiting.
        in_call_ = false;
        continue;
      }
      const auto start = std::chrono::steady_clock::now();
      benchmark::DoNotOptimize(replicator_.frame());
      const std::chrono::duration<double> took =
          std::chrono::steady_clock::now() - start;
      in_call_ = false;
      longest_ = std::max(longest_.load(), took.count());
    }
  }

  const Replicator& replicator_;
  std::atomic<bool> stop_{false}, probing_{false}, in_call_{false};
  std::atomic<double> longest_{0};
  std::thread thread_;
};

void BM_SnapshotBurst(benchmark::State& state) {
  const auto entities = static_cast<EntityId>(state.range(0));
  std::vector<CreateOp> ops;
  for (EntityId e = 1; e <= entities; ++e) {
    ops.push_back({e, e % kChainLength == 1 ? 0 : e - 1, At(1)});
  }
  std::vector<SetLocalOp> roots;
  for (EntityId e = 1; e <= entities; e += kChainLength) {
    roots.push_back({e, At(1)});
  }
  float x = 1;
  size_t burst_entities = 0;
  double longest_call = 0;
  for (auto _ : state) {
    // Built anew each time: the replicator learns the world from its frames.
    World world;
    if (!world.CreateMany(ops).ok()) std::abort();
    // Room for any burst; no more than a part's worth made ahead otherwise.
    Replicator replicator(/*max_pending=*/100,
                          std::make_shared<BurstBudget>(size_t{1} << 40));
    FrameChanges changes;
    const auto publish = [&] {
      world.EndFrame(&changes);
      replicator.Publish(changes, absl::Now());
    };
    publish();
    const auto id = replicator.Subscribe({}, std::make_shared<NullSink>());
    LockProbe probe(replicator);
    longest_call = 0;
    for (bool done = false; !done;) {
      probe.Probe(true);
      const auto start = std::chrono::steady_clock::now();
      const auto part = replicator.Next(id, absl::Now());
      const std::chrono::duration<double> took =
          std::chrono::steady_clock::now() - start;
      probe.Probe(false);
      // The parts from the longest call to the end are that call's.
      if (took.count() > longest_call) {
        longest_call = took.count();
        burst_entities = 0;
      }
      burst_entities += part->message().moved_size();
      done = part->message().snapshot_done();
      x += 1;
      for (SetLocalOp& op : roots) op.local = At(x);
      if (!world.SetLocals(roots).ok()) std::abort();
      publish();
    }
    state.SetIterationTime(probe.longest_seconds());
  }
  state.counters["burst_entities"] = static_cast<double>(burst_entities);
  state.counters["longest_next_ms"] = longest_call * 1e3;
}
BENCHMARK(BM_SnapshotBurst)
    ->Arg(100'000)
    ->Arg(500'000)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3);

// What the published state costs a frame of 5,000 moves scattered over a
// world of arg entities (ids 1..n, as writers mostly hand them out): the
// lookup of each moved entity's slot that a shared compact frame makes
// (Replicator::CompactParts: what a caught-up subscriber holds), then the
// frame taken in, which finds each again. Frames alternate between two
// sets of moves, so both are scattered and neither stays cached.
// A frame creating entities 1 to n, roots, each at the same matrix.
FrameChanges Creating(EntityId n, uint64_t frame) {
  FrameChanges load;
  load.frame = frame;
  for (EntityId e = 1; e <= n; ++e) {
    load.created.push_back(e);
    load.created_parent.push_back(kNoEntity);
    load.moved.push_back(e);
    load.moved_world.insert(load.moved_world.end(), 12, 1.0f);
  }
  return load;
}

void BM_PublishedStateFrame(benchmark::State& state) {
  const auto n = static_cast<EntityId>(state.range(0));
  constexpr size_t kMoves = 5'000;
  PublishedState published;
  published.TakeIn(Creating(n, /*frame=*/0));
  FrameChanges frames[2];
  std::mt19937_64 rng(1);
  for (FrameChanges& f : frames) {
    for (size_t k = 0; k < kMoves; ++k) {
      f.moved.push_back(1 + rng() % n);
      f.moved_world.insert(f.moved_world.end(), 12, static_cast<float>(k));
    }
    std::sort(f.moved.begin(), f.moved.end());
    f.moved.erase(std::unique(f.moved.begin(), f.moved.end()), f.moved.end());
    f.moved_world.resize(12 * f.moved.size());
  }
  int k = 0;
  for (auto _ : state) {
    const FrameChanges& f = frames[k++ & 1];
    float held = 0;
    for (EntityId e : f.moved) {
      const PublishedState::Slot s = published.Find(e);
      if (s != PublishedState::kNoSlot) held += published.world(s).m[3];
    }
    benchmark::DoNotOptimize(held);
    published.TakeIn(f);
  }
  state.SetItemsProcessed(state.iterations() * kMoves);
}
BENCHMARK(BM_PublishedStateFrame)->Arg(100'000)->Arg(1'000'000);

// What a slow subscriber's catch-up pays to find what changed since its
// last message (Replicator::CatchUpFromState makes one such pass, under the
// lock): a world of arg entities loaded at frame 1, then a frame moving the
// second arg's number of them, scattered; timed, the walk of what changed
// after frame 1.
void BM_PublishedStateChangedSince(benchmark::State& state) {
  const auto n = static_cast<EntityId>(state.range(0));
  const auto moves = static_cast<size_t>(state.range(1));
  PublishedState published;
  published.TakeIn(Creating(n, /*frame=*/1));
  FrameChanges frame;
  frame.frame = 2;
  std::mt19937_64 rng(1);
  for (size_t k = 0; k < moves; ++k) {
    frame.moved.push_back(1 + rng() % n);
    frame.moved_world.insert(frame.moved_world.end(), 12, 2.0f);
  }
  published.TakeIn(frame);
  size_t found = 0;
  for (auto _ : state) {
    found = 0;
    published.ForEachChangedSince(1, [&](PublishedState::Slot) {
      ++found;
      return true;
    });
    benchmark::DoNotOptimize(found);
  }
  state.counters["found"] = static_cast<double>(found);
}
BENCHMARK(BM_PublishedStateChangedSince)
    ->ArgsProduct({{100'000, 1'000'000}, {0, 100, 10'000}})
    ->Unit(benchmark::kMicrosecond);

// xform-load's scene workload (a 100k scene, 5,000 leaves stepped a frame):
// the scene (`ops`) published as its first frame, and `count` frames after it
// made beforehand, stepping leaves back and forth. The frames' numbers are
// renumbered as they are published again and again.
struct SteppedScene {
  explicit SteppedScene(size_t count) {
    constexpr size_t kMoves = 5'000;
    ok = world.CreateMany(ops).ok();
    world.EndFrame(&first);
    std::vector<EntityId> leaves = Leaves(ops);
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> u(-1, 1);
    frames.resize(count);
    for (FrameChanges& made : frames) {
      std::shuffle(leaves.begin(), leaves.end(), rng);
      std::vector<SetLocalOp> step;
      for (size_t k = 0; k < kMoves; ++k) {
        Transform t = *world.Local(leaves[k]);
        t.position += glm::vec3(u(rng), u(rng), u(rng)) / 60.0f;
        step.push_back({leaves[k], t});
      }
      ok = ok && world.SetLocals(step).ok();
      world.EndFrame(&made);
    }
  }
  // The next frame, numbered after the last.
  FrameChanges& Next() {
    FrameChanges& c = frames[next++ % frames.size()];
    c.frame = ++frame;
    return c;
  }

  const std::vector<CreateOp> ops = MakeScene(SceneShape::kScene, 100'000);
  bool ok = true;
  World world;
  FrameChanges first;
  std::vector<FrameChanges> frames;
  size_t next = 0;
  uint64_t frame = 1;
};

// A compact subscriber rate-limited to a sixth of the frames, in the scene
// workload: six frames published, then its message taken and encoded,
// folding them. First argument: 0, the subscriber filters echoes, so it is
// sent its folds whole (as every compact subscriber was until 2026-11-25);
// 1, as deltas against what it holds. Timed: the six publications and the
// message. `bytes_per_entity` is the message's, over its entities.
void BM_CompactFold(benchmark::State& state) {
  const bool deltas = state.range(0) == 1;
  constexpr int kFramesPerMessage = 6;
  SteppedScene scene(2 * kFramesPerMessage);
  if (!scene.ok) state.SkipWithError("scene");
  Replicator replicator;
  replicator.Publish(scene.first, absl::Now());
  SubscriptionOptions options;
  options.compact_precision = 0x1p-10f;
  options.max_rate_hz = 10;
  if (!deltas) options.no_echo_client_id = "nobody writing";
  const auto id = replicator.Subscribe(options, std::make_shared<NullSink>());
  while (replicator.Next(id, absl::InfiniteFuture()) != nullptr) {
  }
  size_t sent = 0, bytes = 0, taken = 0;
  for (auto _ : state) {
    for (int f = 0; f < kFramesPerMessage; ++f) {
      replicator.Publish(scene.Next(), absl::Now());
    }
    while (auto out = replicator.Next(id, absl::InfiniteFuture())) {
      bytes += out->encoded().size();
      sent += static_cast<size_t>(out->message().moved_size());
    }
    ++taken;
  }
  state.SetItemsProcessed(static_cast<int64_t>(sent));
  state.counters["bytes_per_entity"] =
      sent > 0 ? static_cast<double>(bytes) / static_cast<double>(sent) : 0;
  state.counters["entities_per_message"] =
      taken > 0 ? static_cast<double>(sent) / static_cast<double>(taken) : 0;
}
BENCHMARK(BM_CompactFold)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

// The scene workload published frame by frame to subscribers that each
// take what is due after every publication (as the server's poller has them
// do within 5 ms), on a simulated clock that steps 1/60 s a frame.
class FrameLoop {
 public:
  explicit FrameLoop(size_t max_pending = 65'536)
      : scene_(12), replicator_(max_pending) {
    replicator_.Publish(scene_.first, now_);
  }
  bool ok() const { return scene_.ok; }
  const SteppedScene& scene() const { return scene_; }

  void Subscribe(const SubscriptionOptions& options) {
    ids_.push_back(
        replicator_.Subscribe(options, std::make_shared<NullSink>()));
  }
  // Who writes each of the scene's frames, by its index.
  void SetWriters(std::vector<FrameWriters> writers) {
    writers_ = std::move(writers);
  }
  // Publishes the next frame; returns the seconds that took.
  double PublishNext() {
    static const FrameWriters kNoWriters;
    const FrameWriters& writers =
        writers_.empty() ? kNoWriters : writers_[scene_.next % writers_.size()];
    now_ += absl::Nanoseconds(16'666'667);
    const auto start = std::chrono::steady_clock::now();
    replicator_.Publish(scene_.Next(), now_, writers);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                         start)
        .count();
  }
  // The subscribers from the `from`th on take what is due; returns how many
  // messages they took.
  size_t TakeDue(size_t from = 0) {
    size_t messages = 0;
    for (size_t k = from; k < ids_.size(); ++k) {
      while (replicator_.Next(ids_[k], now_) != nullptr) ++messages;
    }
    return messages;
  }
  // What the `k`th subscriber has been sent, all of it taken now.
  struct Sent {
    size_t messages = 0;
    size_t entities = 0;  // Matrices: moved, raw or compact.
    size_t bytes = 0;
  };
  Sent Drain(size_t k) {
    Sent sent;
    while (auto out = replicator_.Next(ids_[k], now_)) {
      const v1::FrameUpdate& u = out->message();
      ++sent.messages;
      sent.bytes += out->encoded().size();
      sent.entities += static_cast<size_t>(u.moved_size());
      if (!u.compact_moved().empty()) {
        v1::CompactMovesParser parser(u);
        if (parser.Start().ok()) sent.entities += parser.count();
      }
    }
    return sent;
  }
  // Times a frame an iteration: its publication and the messages then due.
  // `publish_ms`: the publication alone, which holds the replicator's lock
  // for whatever it does, so every subscriber's Next() waits for it;
  // `messages_per_frame`, what was sent.
  void Time(benchmark::State& state) {
    double publish_seconds = 0;
    size_t messages = 0;
    for (auto _ : state) {
      publish_seconds += PublishNext();
      messages += TakeDue();
    }
    const auto frames = static_cast<double>(state.iterations());
    state.counters["publish_ms"] = 1e3 * publish_seconds / frames;
    state.counters["messages_per_frame"] =
        static_cast<double>(messages) / frames;
  }

 private:
  SteppedScene scene_;
  Replicator replicator_;
  absl::Time now_ = absl::UnixEpoch();
  std::vector<Replicator::SubscriptionId> ids_;
  std::vector<FrameWriters> writers_;
};

// Many subscribers rate-limited to 10 messages a second (dashboards, a
// browser's view) or to 1 (a status page, a tool polling for an overview):
// arg subscribers, raw (second argument 0) or compact at 1 mm (1), at the
// third argument's rate in Hz, their phases spread over the frames between
// two of one's messages.
void BM_RateLimitedSubscribers(benchmark::State& state) {
  const auto subscribers = static_cast<size_t>(state.range(0));
  const auto hz = static_cast<size_t>(state.range(2));
  const size_t frames_per_message = 60 / hz;
  FrameLoop loop;
  if (!loop.ok()) state.SkipWithError("scene");
  SubscriptionOptions options;
  options.max_rate_hz = static_cast<double>(hz);
  if (state.range(1) == 1) options.compact_precision = 1e-3f;
  for (size_t k = 0; k < subscribers; ++k) loop.Subscribe(options);
  // Subscriber k's first message (its snapshot) at frame k % frames: so
  // each frame, that share of them are due.
  for (size_t f = 0; f < frames_per_message; ++f) {
    loop.PublishNext();
    loop.TakeDue(subscribers - subscribers * (f + 1) / frames_per_message);
  }
  loop.Time(state);
}
BENCHMARK(BM_RateLimitedSubscribers)
    ->ArgsProduct({{1, 16, 64, 256}, {0, 1}, {10, 1}})
    ->Unit(benchmark::kMillisecond);

// The scene published `stall_frames` frames while a subscriber with
// `options` takes nothing, then all it is sent taken at once (timed), each
// iteration; its last catch-up's messages, matrices and MB as counters.
void StallThenRead(benchmark::State& state, size_t max_pending,
                   const SubscriptionOptions& options, int stall_frames) {
  FrameLoop loop(max_pending);
  if (!loop.ok()) state.SkipWithError("scene");
  loop.Subscribe(options);
  loop.Drain(0);
  FrameLoop::Sent sent;
  for (auto _ : state) {
    state.PauseTiming();
    for (int f = 0; f < stall_frames; ++f) loop.PublishNext();
    state.ResumeTiming();
    sent = loop.Drain(0);
  }
  state.counters["messages"] = static_cast<double>(sent.messages);
  state.counters["entities"] = static_cast<double>(sent.entities);
  state.counters["MB"] = static_cast<double>(sent.bytes) / 1e6;
}

// A subscriber at full rate that stops reading for arg frames, then reads:
// what it is sent to be current again (its bytes, and the matrices in them:
// `entities`), and what making that costs (the reported time, all of it
// made at once, though a snapshot's parts are made as its stream asks).
// Raw (second argument 0) or compact at 1 mm (1).
void BM_StalledSubscriberCatchesUp(benchmark::State& state) {
  SubscriptionOptions options;
  if (state.range(1) == 1) options.compact_precision = 1e-3f;
  StallThenRead(state, /*max_pending=*/65'536, options,
                static_cast<int>(state.range(0)));
}
BENCHMARK(BM_StalledSubscriberCatchesUp)
    ->ArgsProduct({{30, 120}, {0, 1}})
    ->Unit(benchmark::kMillisecond);

// As BM_StalledSubscriberCatchesUp (30 frames), with max_pending 16,384:
// what the 30,614 entities those frames changed are more than. Raw (first
// argument 0) or compact at 1 mm (1); a subscriber that is resent its view
// whole (second argument 0) or one that accepts a snapshot keeping it (1).
void BM_StalledSubscriberOwedPastMaxPending(benchmark::State& state) {
  SubscriptionOptions options;
  if (state.range(0) == 1) options.compact_precision = 1e-3f;
  options.accepts_kept_view_snapshots = state.range(1) == 1;
  StallThenRead(state, /*max_pending=*/16'384, options, /*stall_frames=*/30);
}
BENCHMARK(BM_StalledSubscriberOwedPastMaxPending)
    ->ArgsProduct({{0, 1}, {0, 1}})
    ->Unit(benchmark::kMillisecond);

// The start of a snapshot that keeps the view: the first Next() of a 1 Hz
// subscriber owed more than max_pending entities, which finds what it holds
// and what changed (a chunk at a time, the lock released between), and
// makes the first part. A flat world of arg0 entities, arg1 of them moved
// since its last message. `longest_hold_ms`: the longest another caller
// waited for the replicator's lock meanwhile (LockProbe), over all
// iterations. Against them, `whole_first_ms` and `whole_longest_hold_ms`:
// the first Next() of one resent its view whole (which finds nothing, and
// makes a part).
void BM_KeptViewSnapshotStart(benchmark::State& state) {
  const auto entities = static_cast<EntityId>(state.range(0));
  const auto moved = static_cast<EntityId>(state.range(1));
  World world;
  FrameChanges changes;
  Replicator replicator(/*max_pending=*/1000);
  std::vector<CreateOp> roots;
  for (EntityId e = 1; e <= entities; ++e) roots.push_back({e, 0, At(0)});
  if (!world.CreateMany(roots).ok()) state.SkipWithError("world");
  absl::Time now = absl::Now();
  world.EndFrame(&changes);
  replicator.Publish(changes, now);
  SubscriptionOptions kept;
  kept.max_rate_hz = 1;
  kept.accepts_kept_view_snapshots = true;
  SubscriptionOptions whole = kept;
  whole.accepts_kept_view_snapshots = false;
  const auto kept_id = replicator.Subscribe(kept, std::make_shared<NullSink>());
  const auto whole_id =
      replicator.Subscribe(whole, std::make_shared<NullSink>());
  const auto drain = [&](Replicator::SubscriptionId id) {
    while (replicator.Next(id, now) != nullptr) {
    }
  };
  const auto first_ms = [&](Replicator::SubscriptionId id) {
    const auto start = std::chrono::steady_clock::now();
    replicator.Next(id, now);
    return std::chrono::duration<double, std::milli>(
               std::chrono::steady_clock::now() - start)
        .count();
  };
  drain(kept_id);
  drain(whole_id);
  LockProbe probe(replicator), whole_probe(replicator);
  double whole_first = 0;
  float x = 0;
  for (auto _ : state) {
    state.PauseTiming();
    // Every (entities / moved)th entity, over two frames.
    for (int f = 0; f < 2; ++f) {
      std::vector<SetLocalOp> step;
      x += 1;
      for (EntityId e = 1 + f; e <= entities; e += 2 * (entities / moved)) {
        step.push_back({e, At(x)});
      }
      if (!world.SetLocals(step).ok()) state.SkipWithError("moves");
      world.EndFrame(&changes);
      now += absl::Seconds(1);
      replicator.Publish(changes, now);
    }
    probe.Probe(true);
    state.ResumeTiming();
    first_ms(kept_id);
    state.PauseTiming();
    probe.Probe(false);
    drain(kept_id);
    whole_probe.Probe(true);
    whole_first += first_ms(whole_id);
    whole_probe.Probe(false);
    drain(whole_id);
    state.ResumeTiming();
  }
  state.counters["whole_first_ms"] =
      whole_first / static_cast<double>(state.iterations());
  state.counters["longest_hold_ms"] = probe.longest_seconds() * 1e3;
  state.counters["whole_longest_hold_ms"] = whole_probe.longest_seconds() * 1e3;
}
BENCHMARK(BM_KeptViewSnapshotStart)
    ->Args({100'000, 30'000})
    ->Args({1'000'000, 10'000})
    ->Args({1'000'000, 300'000})
    ->Args({1'000'000, 1'000'000})
    ->Unit(benchmark::kMillisecond);

// The longest a subtree subscription's start holds the replicator's lock:
// Subscribe and the first Next() of a view of one root's subtree of
// `entities`, a chain (shape 0) or a root with every other entity its
// child (1). `first_ms`: Subscribe and the first Next(), wall time.
void BM_SubtreeSnapshotStart(benchmark::State& state) {
  const auto entities = static_cast<EntityId>(state.range(0));
  World world;
  FrameChanges changes;
  Replicator replicator(/*max_pending=*/1000);
  std::vector<CreateOp> ops;
  for (EntityId e = 1; e <= entities; ++e) {
    ops.push_back({e, e == 1 ? 0 : (state.range(1) == 0 ? e - 1 : 1), At(0)});
  }
  if (!world.CreateMany(ops).ok()) state.SkipWithError("world");
  world.EndFrame(&changes);
  replicator.Publish(changes, absl::Now());
  SubscriptionOptions view;
  view.subtrees = {1};
  LockProbe probe(replicator);
  double first = 0;
  for (auto _ : state) {
    probe.Probe(true);
    const auto start = std::chrono::steady_clock::now();
    const auto id = replicator.Subscribe(view, std::make_shared<NullSink>());
    replicator.Next(id, absl::Now());
    first += std::chrono::duration<double, std::milli>(
                 std::chrono::steady_clock::now() - start)
                 .count();
    probe.Probe(false);
    state.PauseTiming();
    replicator.Unsubscribe(id);
    state.ResumeTiming();
  }
  state.counters["first_ms"] = first / static_cast<double>(state.iterations());
  state.counters["longest_hold_ms"] = probe.longest_seconds() * 1e3;
}
BENCHMARK(BM_SubtreeSnapshotStart)
    ->Args({1'000'000, 0})
    ->Args({1'000'000, 1})
    ->Unit(benchmark::kMillisecond);

// What subscribers at full rate that stopped reading cost each frame's
// publication while they stall: arg of them beside one that reads; with
// max_pending the second argument (a world smaller than max_pending, as the
// scene's 100,000 entities are than 2^17, is where they once noted every
// frame); raw (third argument 0) or compact at 1 mm (1).
void BM_StalledSubscribers(benchmark::State& state) {
  FrameLoop loop(static_cast<size_t>(state.range(1)));
  if (!loop.ok()) state.SkipWithError("scene");
  SubscriptionOptions stalled;
  if (state.range(2) == 1) stalled.compact_precision = 1e-3f;
  loop.Subscribe({});
  for (int k = 0; k < state.range(0); ++k) loop.Subscribe(stalled);
  loop.TakeDue();
  // Long enough for their kept frames to pass the world and max_pending.
  for (int f = 0; f < 60; ++f) {
    loop.PublishNext();
    loop.Drain(0);
  }
  double publish_seconds = 0;
  for (auto _ : state) {
    publish_seconds += loop.PublishNext();
    loop.Drain(0);
  }
  state.counters["publish_ms"] =
      1e3 * publish_seconds / static_cast<double>(state.iterations());
}
BENCHMARK(BM_StalledSubscribers)
    ->ArgsProduct({{1, 16, 64}, {65'536, 1 << 17}, {0, 1}})
    ->Unit(benchmark::kMillisecond);

// Many subscribers with small filtered views (a tool watching one arm, a
// list of a few entities): arg subscribers, each listing 16 random entities
// (second argument 0) or watching one root's subtree (1).
void BM_FilteredSubscribers(benchmark::State& state) {
  FrameLoop loop;
  if (!loop.ok()) state.SkipWithError("scene");
  const std::vector<EntityId> roots = Roots(loop.scene().ops);
  std::mt19937 rng(9);
  for (int k = 0; k < state.range(0); ++k) {
    SubscriptionOptions options;
    if (state.range(1) == 1) {
      options.subtrees = {roots[rng() % roots.size()]};
    } else {
      for (int e = 0; e < 16; ++e) {
        options.entities.push_back(1 + rng() % loop.scene().ops.size());
      }
    }
    loop.Subscribe(options);
  }
  loop.TakeDue();
  loop.Time(state);
}
BENCHMARK(BM_FilteredSubscribers)
    ->ArgsProduct({{1, 16, 64, 256}, {0, 1}})
    ->Unit(benchmark::kMillisecond);

// Many subscribers that filter their own writer's echoes (editors, each
// mirroring the world it sometimes writes to), while another writer
// (physics) moves the leaves: arg subscribers, each its own client id, none
// writing; raw (second argument 0) or compact at 1 mm (1).
void BM_EchoFilteringSubscribers(benchmark::State& state) {
  FrameLoop loop;
  if (!loop.ok()) state.SkipWithError("scene");
  for (int k = 0; k < state.range(0); ++k) {
    SubscriptionOptions options;
    options.no_echo_client_id = "editor " + std::to_string(k);
    if (state.range(1) == 1) options.compact_precision = 0.001f;
    loop.Subscribe(options);
  }
  std::vector<FrameWriters> writers;
  for (const FrameChanges& frame : loop.scene().frames) {
    FrameWriters& written = writers.emplace_back();
    for (EntityId e : frame.moved) written[e] = "physics";
  }
  loop.SetWriters(std::move(writers));
  loop.TakeDue();
  loop.Time(state);
}
BENCHMARK(BM_EchoFilteringSubscribers)
    ->ArgsProduct({{1, 16, 64}, {0, 1}})
    ->Unit(benchmark::kMillisecond);

// ListSubscribers' page (Replicator::Subscribers): arg subscriptions, one
// page of 1,000 of them (the service's most), the first page (second
// argument 0) or the last (1). The lock is held to choose the page from
// every subscription, O(subscriptions), and to copy it, O(page).
void BM_ListSubscribersPage(benchmark::State& state) {
  Replicator replicator;
  const auto subscriptions = static_cast<uint64_t>(state.range(0));
  std::vector<Replicator::SubscriptionId> ids;
  for (uint64_t k = 0; k < subscriptions; ++k) {
    ids.push_back(replicator.Subscribe({}, std::make_shared<NullSink>()));
  }
  const uint64_t after =
      state.range(1) == 0 || ids.size() <= 1000 ? 0 : ids[ids.size() - 1001];
  for (auto _ : state) {
    benchmark::DoNotOptimize(replicator.Subscribers(after, 1000));
  }
}
BENCHMARK(BM_ListSubscribersPage)
    ->ArgsProduct({{1'001, 10'000, 100'000}, {0, 1}})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace xform::server

// The spatial index's upkeep per moved entity, the region views' share of
// a frame (issue 64's target: <= 20 ns on one core): a 1M-entity world
// spread over 1 km x 1 km (and 20 m up), 10,000 moves a frame of things
// going 10 m/s at 60 Hz, in cells of `cell` m. Each frame's moved slots
// and their new positions are given as the frame's taking-in leaves them
// (its moved list, the matrices just written): what is timed is the
// index's own work. The time is a frame's; items are moves
// (items_per_second's inverse is ns a move).
void BM_SpatialIndexUpkeep(benchmark::State& state) {
  using Slot = xform::server::SpatialIndex::Slot;
  constexpr int kEntities = 1'000'000;
  constexpr int kMoves = 10'000;
  constexpr int kFrames = 256;
  constexpr float kStep = 10.0f / 60;
  xform::server::SpatialIndex index(static_cast<float>(state.range(0)));
  std::mt19937 random(64);
  std::uniform_real_distribution<float> ground(0, 1000);
  std::uniform_real_distribution<float> height(0, 20);
  std::uniform_real_distribution<float> angle(0, 6.2831853f);
  std::vector<glm::vec3> position(kEntities);
  std::vector<glm::vec3> velocity(kEntities);
  for (int i = 0; i < kEntities; ++i) {
    position[i] = {ground(random), ground(random), height(random)};
    const float a = angle(random);
    velocity[i] = {kStep * std::cos(a), kStep * std::sin(a), 0};
    index.Place(static_cast<Slot>(i), position[i]);
  }
  struct Moves {
    std::vector<Slot> slots;
    std::vector<glm::vec3> positions;
  };
  // kFrames frames' moves, in slot order as a frame's are, gone through in
  // turn (a slot moved twice in a frame counts once, as it would).
  std::vector<Moves> frames(kFrames);
  for (auto& frame : frames) {
    for (int k = 0; k < kMoves; ++k) {
      frame.slots.push_back(random() % kEntities);
    }
    std::sort(frame.slots.begin(), frame.slots.end());
    frame.slots.erase(std::unique(frame.slots.begin(), frame.slots.end()),
                      frame.slots.end());
    for (Slot slot : frame.slots) {
      position[slot] += velocity[slot];
      frame.positions.push_back(position[slot]);
    }
  }
  size_t frame = 0;
  size_t moves = 0;
  for (auto _ : state) {
    const Moves& moved = frames[frame++ % kFrames];
    for (size_t k = 0; k < moved.slots.size(); ++k) {
      index.Place(moved.slots[k], moved.positions[k]);
    }
    moves += moved.slots.size();
  }
  state.SetItemsProcessed(static_cast<int64_t>(moves));
  state.counters["cells"] = static_cast<double>(index.occupied_cells());
}
BENCHMARK(BM_SpatialIndexUpkeep)
    ->Arg(8)
    ->Arg(16)
    ->Arg(32)
    ->Unit(benchmark::kMicrosecond);

namespace xform::server {
namespace {

// Region subscribers (SubscribeRequest.region), the city: 1M
// entities spread over 1 km x 1 km (z in [0, 20]), 10,000 of them moving a
// frame at 10 m/s; arg 0 cameras, each a sphere of 50 m radius (margin
// 2 m) moving at arg 1 m/s, its region moved every frame (MoveRegion),
// and one whole-world subscriber to compare with; arg 2 the index's cell
// edge in metres (--region_cell_size). Reported per frame:
// `publish_ms`, the publication (with the index's upkeep and every region
// view's judging, under the lock); `move_region_us`, all cameras' moves;
// `take_ms`, the messages made; per camera `camera_bytes` and
// `camera_entities` (created, moved and destroyed entries it was sent);
// `whole_bytes`, the whole-world subscriber's; `bytes_per_entry_ratio`,
// a camera's bytes over its entries at the whole-world subscriber's bytes
// an entry (1: no overhead); `first_subscribe_ms`, the first camera's
// Subscribe, which builds the index (O(world) once, in parts of 32,768
// slots under the lock, frames going on between).
void BM_RegionSubscribers(benchmark::State& state) {
  constexpr EntityId kEntities = 1'000'000;
  constexpr int kMoves = 10'000;
  constexpr float kFrameSeconds = 1.0f / 60;
  const auto cameras = static_cast<int>(state.range(0));
  const float camera_speed = static_cast<float>(state.range(1));
  std::mt19937 random(64);
  std::uniform_real_distribution<float> ground(0, 1000), height(0, 20),
      angle(0, 6.2831853f);
  std::vector<glm::vec3> position(kEntities + 1), velocity(kEntities + 1);
  FrameChanges changes;
  changes.frame = 1;
  const auto moved = [&](EntityId e) {
    changes.moved.push_back(e);
    const glm::vec3 p = position[e];
    for (float v :
         {1.f, 0.f, 0.f, p.x, 0.f, 1.f, 0.f, p.y, 0.f, 0.f, 1.f, p.z}) {
      changes.moved_world.push_back(v);
    }
  };
  for (EntityId e = 1; e <= kEntities; ++e) {
    position[e] = {ground(random), ground(random), height(random)};
    const float a = angle(random);
    velocity[e] = 10.0f * glm::vec3(std::cos(a), std::sin(a), 0);
    changes.created.push_back(e);
    changes.created_parent.push_back(kNoEntity);
    moved(e);
  }
  Replicator replicator(1 << 20);
  replicator.set_region_cell_size(static_cast<float>(state.range(2)));
  absl::Time now = absl::UnixEpoch();
  replicator.Publish(changes, now);
  // The cameras, and the one whole-world subscriber.
  std::vector<glm::vec3> eye(static_cast<size_t>(cameras)),
      heading(static_cast<size_t>(cameras));
  std::vector<Replicator::SubscriptionId> ids;
  const auto sphere = [](glm::vec3 at) { return *Region::Sphere(at, 50, 2); };
  double first_subscribe = 0;  // It builds the index: O(world), once.
  for (int c = 0; c < cameras; ++c) {
    eye[c] = {100 + 800 * ground(random) / 1000,
              100 + 800 * ground(random) / 1000, 10};
    const float a = angle(random);
    heading[c] = glm::vec3(std::cos(a), std::sin(a), 0);
    SubscriptionOptions options;
    options.region = sphere(eye[c]);
    const auto start = std::chrono::steady_clock::now();
    ids.push_back(replicator.Subscribe(options, std::make_shared<NullSink>()));
    if (c == 0) {
      first_subscribe = std::chrono::duration<double>(
                            std::chrono::steady_clock::now() - start)
                            .count();
    }
  }
  const Replicator::SubscriptionId whole =
      replicator.Subscribe({}, std::make_shared<NullSink>());
  struct Sent {
    size_t bytes = 0, entries = 0;
  };
  const auto drain = [&](Replicator::SubscriptionId id) {
    Sent sent;
    while (auto out = replicator.Next(id, now)) {
      const v1::FrameUpdate& u = out->message();
      sent.bytes += out->encoded().size();
      sent.entries += static_cast<size_t>(u.moved_size() + u.created_size() +
                                          u.destroyed_size());
    }
    return sent;
  };
  for (auto id : ids) drain(id);
  drain(whole);
  uint64_t frame = 1;
  double publish = 0, move = 0, take = 0;
  Sent camera_sent, whole_sent;
  for (auto _ : state) {
    state.PauseTiming();
    changes.Clear();
    changes.frame = ++frame;
    std::vector<EntityId> chosen;
    for (int k = 0; k < kMoves; ++k) chosen.push_back(1 + random() % kEntities);
    std::sort(chosen.begin(), chosen.end());
    chosen.erase(std::unique(chosen.begin(), chosen.end()), chosen.end());
    for (EntityId e : chosen) {
      position[e] += velocity[e] * kFrameSeconds;
      moved(e);
    }
    now += absl::Nanoseconds(16'666'667);
    state.ResumeTiming();
    auto start = std::chrono::steady_clock::now();
    replicator.Publish(changes, now);
    auto end = std::chrono::steady_clock::now();
    publish += std::chrono::duration<double>(end - start).count();
    start = end;
    for (int c = 0; c < cameras; ++c) {
      eye[c] += heading[c] * camera_speed * kFrameSeconds;
      // Back and forth across the city.
      if (eye[c].x < 60 || eye[c].x > 940 || eye[c].y < 60 || eye[c].y > 940) {
        heading[c] = -heading[c];
      }
      if (!replicator
               .MoveRegion(ids[c], "", sphere(eye[c]), 0, now,
                           [](size_t) { return absl::OkStatus(); })
               .ok()) {
        state.SkipWithError("MoveRegion");
      }
    }
    end = std::chrono::steady_clock::now();
    move += std::chrono::duration<double>(end - start).count();
    start = end;
    for (auto id : ids) {
      const Sent sent = drain(id);
      camera_sent.bytes += sent.bytes;
      camera_sent.entries += sent.entries;
    }
    end = std::chrono::steady_clock::now();
    take += std::chrono::duration<double>(end - start).count();
    const Sent sent = drain(whole);
    whole_sent.bytes += sent.bytes;
    whole_sent.entries += sent.entries;
  }
  const auto frames = static_cast<double>(state.iterations());
  const double per_camera = frames * std::max(cameras, 1);
  state.counters["publish_ms"] = 1e3 * publish / frames;
  state.counters["move_region_us"] = 1e6 * move / frames;
  state.counters["take_ms"] = 1e3 * take / frames;
  state.counters["first_subscribe_ms"] = 1e3 * first_subscribe;
  state.counters["camera_bytes"] =
      static_cast<double>(camera_sent.bytes) / per_camera;
  state.counters["camera_entities"] =
      static_cast<double>(camera_sent.entries) / per_camera;
  state.counters["whole_bytes"] =
      static_cast<double>(whole_sent.bytes) / frames;
  if (camera_sent.entries > 0 && whole_sent.entries > 0) {
    state.counters["bytes_per_entry_ratio"] =
        (static_cast<double>(camera_sent.bytes) /
         static_cast<double>(camera_sent.entries)) /
        (static_cast<double>(whole_sent.bytes) /
         static_cast<double>(whole_sent.entries));
  }
}
BENCHMARK(BM_RegionSubscribers)
    ->Args({0, 10, 32})
    ->ArgsProduct({{64}, {0, 10, 100, 1000}, {4, 8, 16, 32, 64}})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(120);

}  // namespace
}  // namespace xform::server

BENCHMARK_MAIN();
