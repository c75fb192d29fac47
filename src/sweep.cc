// Copyright 2026 The xform Authors.

#include "src/sweep.h"

#include <algorithm>
#include <cstdlib>

#include "absl/base/config.h"
#include "xform/internal/math_kernels.h"

namespace xform::internal {

// Below this many instances one cursor sweeps alone: splitting costs more
// than the overlap saves.
constexpr size_t kTwoCursorMinimum = 4096;
// A sweep of at least this many ranges, covering at most 1/kScatteredSpread
// of the instances between its first and last, goes to SweepScattered.
constexpr size_t kScatteredMinimumRanges = 16;
constexpr size_t kScatteredSpread = 4;
constexpr int kScatteredCursors = 4;  // Two, six and eight measured slower.
static_assert(kScatteredMinimumRanges >= kScatteredCursors,
              "each cursor starts with a range");

// Bounds the roots swept ahead to split a deep subtree, and so its cost.
constexpr int kMaxSplitDescents = 32;

// One instance of the sweep: world = parent world * local, for an instance
// whose parent is already exact.
// It also notes whether every product was finite: finite inputs can still
// overflow (a parent scaled 1e30 over a child at 1e10).
class SweepStep {
 public:
  const Index* parent;
  const Matrix3x4* local;
  Matrix3x4* world;
  mutable internal::FiniteCheck check;

  void operator()(Index j) const {
    const Index p = parent[j];
    const Matrix3x4& parent_world = p == kNoIndex ? kIdentity : world[p];
    check.Multiply(parent_world.m.data(), local[j].m.data(), world[j].m.data());
  }

  // What sweeping from `j` reads and writes first, except the parent's world.
  void PrefetchStart(Index j) const {
    __builtin_prefetch(&parent[j]);
    __builtin_prefetch(&local[j]);
    __builtin_prefetch(&world[j], 1);
  }
  // The parent's world; parent[j] should be cached by now.
  void PrefetchParent(Index j) const {
    if (parent[j] != kNoIndex) __builtin_prefetch(&world[parent[j]]);
  }

  static const Matrix3x4 kIdentity;
};
const Matrix3x4 SweepStep::kIdentity;

namespace {

// Walks a list of independent ranges  one instance at a time.
class RangeCursor {
 public:
  explicit RangeCursor(const std::vector<SweepRange>& ranges)
      : next_(ranges.data()), end_(ranges.data() + ranges.size()) {}
  // Moves to the next unswept instance; false when every range is done.
  bool Ready() {
    while (at_ == last_) {
      if (next_ == end_) return false;
      at_ = next_->first;
      last_ = next_->last;
      ++next_;
    }
    return true;
  }
  Index at() const { return at_; }
  Index left() const { return last_ - at_; }
  void Advance(Index n) { at_ += n; }

 private:
  const SweepRange* next_;
  const SweepRange* end_;
  Index at_ = 0;
  Index last_ = 0;
};

// Sweeps independent ranges scattered over the world (a few percent of the
// roots moved), kCursors ranges at a time, one instance of each in turn.
// Each range starts cold and is one dependent sequence where a child follows
// its parent, so one range alone waits on memory and on the previous product;
// several in flight overlap both. Each cursor prefetches its own instances
// kAhead ahead; taking a range prefetches the start of the one 2 * kCursors
// later and its parent's world, because the hardware prefetcher only follows
// a range once it has seen it begin.
void SweepScattered(const SweepStep& step,
                    absl::Span<const SweepRange> ranges) {
  constexpr int kCursors = kScatteredCursors;
  constexpr Index kAhead = 6;
  Index at[kCursors];
  Index last[kCursors];
  size_t next = 0;
  auto take = [&](int c) {
    if (next + 2 * kCursors < ranges.size()) {
      step.PrefetchStart(ranges[next + 2 * kCursors].first);
    }
    if (next + kCursors < ranges.size()) {
      step.PrefetchParent(ranges[next + kCursors].first);
    }
    at[c] = ranges[next].first;
    last[c] = ranges[next].last;
    ++next;
  };
  for (int c = 0; c < kCursors; ++c) take(c);
  while (true) {
    Index n = last[0] - at[0];
    for (int c = 1; c < kCursors; ++c) n = std::min(n, last[c] - at[c]);
    for (Index k = 0; k < n; ++k) {
      for (int c = 0; c < kCursors; ++c) {
        const Index j = at[c] + k;
        if (j + kAhead < last[c]) step.PrefetchStart(j + kAhead);
        step(j);
      }
    }
    bool refilled = true;
    for (int c = 0; c < kCursors; ++c) {
      at[c] += n;
      if (at[c] != last[c]) continue;
      if (next == ranges.size()) {
        refilled = false;
      } else {
        take(c);
      }
    }
    if (!refilled) break;
  }
  // Every range is taken: the cursors left finish one after another.
  for (int c = 0; c < kCursors; ++c) {
    for (Index j = at[c]; j < last[c]; ++j) step(j);
  }
}

// Mostly single instances all over the world (a physics step moving
// leaves): each range starts with cache misses, so fetch the lines of a
// range ahead, and then its parent's world halfway to it (by when the
// parent index is cached).
void SweepSingles(const SweepStep& step, absl::Span<const SweepRange> ranges) {
  constexpr size_t kAhead = kPrefetchAhead, kParentAhead = kAhead / 2;
  for (size_t r = 0; r < ranges.size(); ++r) {
    if (r + kAhead < ranges.size())
      step.PrefetchStart(ranges[r + kAhead].first);
    if (r + kParentAhead < ranges.size()) {
      step.PrefetchParent(ranges[r + kParentAhead].first);
    }
    for (Index j = ranges[r].first; j < ranges[r].last; ++j) step(j);
  }
}

// Two cursors over independent halves, one instance of each in turn: where
// a child directly follows its parent, one cursor's product would wait on
// the one before it, and the other cursor's work fills that wait.
void SweepTwoCursors(const SweepStep& step,
                     const std::vector<SweepRange>& first_half,
                     const std::vector<SweepRange>& second_half) {
  RangeCursor a(first_half);
  RangeCursor b(second_half);
  while (a.Ready() && b.Ready()) {
    const Index n = std::min(a.left(), b.left());
    const Index i = a.at();
    const Index j = b.at();
    for (Index k = 0; k < n; ++k) {
      step(i + k);
      step(j + k);
    }
    a.Advance(n);
    b.Advance(n);
  }
  for (RangeCursor* rest : {&a, &b}) {
    while (rest->Ready()) {
      const Index i = rest->at();
      for (Index k = 0; k < rest->left(); ++k) step(i + k);
      rest->Advance(rest->left());
    }
  }
}

}  // namespace

bool SweepJob::Validate() const {
  const size_t n = parent.size();
  if (subtree_size.size() != n || local.size() != n || world.size() != n) {
    return false;
  }
  Index after = 0;  // Where the previous range ended.
  for (const SweepRange& range : ranges) {
    if (range.first < after || range.first >= range.last || range.last > n) {
      return false;
    }
    after = range.last;
  }
  return true;
}

bool SweepJob::Run() const {
#if !defined(NDEBUG) || defined(ABSL_HAVE_ADDRESS_SANITIZER)
  if (!Validate()) std::abort();  // World made a bad job: see sweep.h.
#endif
  if (ranges.empty()) return true;
  size_t covered_total = 0;
  for (const SweepRange& range : ranges)
    covered_total += range.last - range.first;
  const SweepStep step{parent.data(), local.data(), world.data()};
  if (covered_total < 4 * ranges.size()) {
    SweepSingles(step, ranges);
    return step.check.finite();
  }
  const size_t span = ranges.back().last - ranges.front().first;
  if (ranges.size() >= kScatteredMinimumRanges &&
      covered_total * kScatteredSpread <= span) {
    SweepScattered(step, ranges);
    return step.check.finite();
  }
  if (covered_total < kTwoCursorMinimum) {
    for (const SweepRange& range : ranges) {
      for (Index j = range.first; j < range.last; ++j) step(j);
    }
    return step.check.finite();
  }
  std::vector<SweepRange> first_half;
  std::vector<SweepRange> second_half;
  SplitInHalves(step, covered_total, &first_half, &second_half);
  SweepTwoCursors(step, first_half, second_half);
  return step.check.finite();
}
void SweepJob::SplitInHalves(const SweepStep& step, size_t total,
                             std::vector<SweepRange>* first_half,
                             std::vector<SweepRange>* second_half) const {
  // Halves within 1/16 of the total of each other overlap for most of the
  // sweep; closer is not worth descending further.
  const size_t tolerance = total / 16;
  size_t before = 0;
  size_t k = 0;
  while (before + (ranges[k].last - ranges[k].first) <= total / 2) {
    before += ranges[k].last - ranges[k].first;
    ++k;
  }
  first_half->assign(ranges.begin(), ranges.begin() + k);
  // `run` straddles the middle, instance `middle`. It is a run of sibling
  // subtrees whose common parent is exact, so any boundary between two
  // siblings splits it into independent parts.
  SweepRange run = ranges[k];
  const Index middle = run.first + static_cast<Index>(total / 2 - before);
  std::vector<SweepRange> inner;  // Right of the cut, innermost last.
  for (int descents = 0;; ++descents) {
    if (middle - run.first <= tolerance) {
      inner.push_back(run);
      break;
    }
    if (run.last - middle <= tolerance) {
      first_half->push_back(run);
      break;
    }
    const Index sibling = SiblingHolding(run, middle);
    if (sibling == kNoIndex || descents == kMaxSplitDescents) {
      // A long chain: no cut near the middle is cheap to find, so one cursor
      // sweeps more than the other.
      first_half->push_back(run);
      break;
    }
    const Index cut = middle - sibling <= end_of(sibling) - middle
                          ? sibling
                          : end_of(sibling);
    const size_t off_by = cut > middle ? cut - middle : middle - cut;
    if (cut > run.first && cut < run.last && off_by <= tolerance) {
      first_half->push_back({run.first, cut});
      inner.push_back({cut, run.last});
      break;
    }
    // Too far either way: sweep the sibling's root now and split its
    // children's run instead.
    if (sibling > run.first) first_half->push_back({run.first, sibling});
    if (end_of(sibling) < run.last)
      inner.push_back({end_of(sibling), run.last});
    step(sibling);
    run = {sibling + 1, end_of(sibling)};
  }
  second_half->assign(inner.rbegin(), inner.rend());
  second_half->insert(second_half->end(), ranges.begin() + k + 1, ranges.end());
}

Index SweepJob::SiblingHolding(SweepRange run, Index i) const {
  // Up from `i` when the run is shallow above it, along the siblings when
  // there are few before it; a deep chain has neither.
  constexpr int kBudget = 512;
  const Index run_parent = parent[run.first];
  Index up = i;
  for (int k = 0; k < kBudget && parent[up] != run_parent; ++k) {
    up = parent[up];
  }
  if (parent[up] == run_parent) return up;
  Index along = run.first;
  for (int k = 0; k < kBudget && end_of(along) <= i; ++k) {
    along = end_of(along);
  }
  return end_of(along) > i ? along : kNoIndex;
}

}  // namespace xform::internal
