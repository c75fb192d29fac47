// Copyright 2026 The xform Authors.
//
// SlotBits is a set of published-state slots (see PublishedState) as one bit
// per slot: what a subscriber tracks per entity of its view costs slots / 8
// bytes, and a pass over it finds the next member a word at a time.
//
// Not thread-safe: it belongs to one subscription, under the Replicator's
// lock.

#ifndef XFORM_SERVER_REPLICATION_SLOT_BITS_H_
#define XFORM_SERVER_REPLICATION_SLOT_BITS_H_

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace xform::server {

class SlotBits {
 public:
  bool test(size_t slot) const {
    return slot < size_ && (words_[slot / 64] >> (slot % 64)) & 1;
  }
  // Both return whether the bit changed. set() grows the set as needed.
  bool set(size_t slot) {
    if (slot >= size_) {
      size_ = slot + 1;
      words_.resize((size_ + 63) / 64);
    }
    first_word_ = std::min(first_word_, slot / 64);
    uint64_t& word = words_[slot / 64];
    const uint64_t bit = uint64_t{1} << (slot % 64);
    const bool changed = !(word & bit);
    word |= bit;
    return changed;
  }
  bool reset(size_t slot) {
    if (slot >= size_) return false;
    uint64_t& word = words_[slot / 64];
    const uint64_t bit = uint64_t{1} << (slot % 64);
    const bool changed = word & bit;
    word &= ~bit;
    return changed;
  }
  // Every slot in [0, size) set.
  void SetAll(size_t size) {
    size_ = size;
    first_word_ = 0;
    words_.assign((size + 63) / 64, ~uint64_t{0});
    if (size % 64 != 0) words_.back() = (uint64_t{1} << (size % 64)) - 1;
  }
  void clear() {
    words_.clear();
    size_ = 0;
    first_word_ = kNoWord;
  }
  // The first set slot at or after `from`; size() if none.
  size_t Find(size_t from) const {
    for (size_t w = from / 64; w < words_.size(); ++w) {
      uint64_t word = words_[w];
      if (w == from / 64) word &= ~uint64_t{0} << (from % 64);
      if (word != 0) return w * 64 + std::countr_zero(word);
    }
    return size_;
  }
  // One past the highest slot ever set (or SetAll's size).
  size_t size() const { return size_; }
  // The 64-bit words from the lowest slot ever set to the highest: what
  // ForEachInBoth walks.
  size_t words() const {
    return first_word_ < words_.size() ? words_.size() - first_word_ : 0;
  }
  // Keeps the slots set here that are set in `other` (And) or are not
  // (AndNot): O(words) of both.
  void And(const SlotBits& other) {
    for (size_t w = 0; w < words_.size(); ++w) {
      words_[w] &= w < other.words_.size() ? other.words_[w] : 0;
    }
  }
  void AndNot(const SlotBits& other) {
    const size_t n = std::min(words_.size(), other.words_.size());
    for (size_t w = 0; w < n; ++w) words_[w] &= ~other.words_[w];
  }
  // How many are set: O(words).
  size_t Count() const {
    size_t count = 0;
    for (uint64_t word : words_) count += std::popcount(word);
    return count;
  }
  // Calls f(slot) for each slot set here and in `other`, in ascending
  // order: O(words()), plus one call a slot found.
  template <typename F>
  void ForEachInBoth(const SlotBits& other, F f) const {
    const size_t n = std::min(words_.size(), other.words_.size());
    for (size_t w = first_word_; w < n; ++w) {
      for (uint64_t both = words_[w] & other.words_[w]; both != 0;
           both &= both - 1) {
        f(w * 64 + std::countr_zero(both));
      }
    }
  }

 private:
  static constexpr size_t kNoWord = ~size_t{0};
  std::vector<uint64_t> words_;
  size_t size_ = 0;
  // The word of the lowest slot set since the last clear() (a slot reset
  // since may leave it lower than it need be).
  size_t first_word_ = kNoWord;
};

// A SlotBits that keeps how many are set, so that the count costs nothing:
// what a snapshot has still to send. Marking is inline (a view's search
// marks a slot a member, a million times for a million-entity view).
struct CountedSlotBits {
  SlotBits bits;
  size_t count = 0;

  void set(size_t slot) {
    if (bits.set(slot)) ++count;
  }
  void reset(size_t slot) {
    if (bits.reset(slot)) --count;
  }
  // `to`, counted: O(words).
  void Assign(SlotBits to) {
    bits = std::move(to);
    count = bits.Count();
  }
};

}  // namespace xform::server

#endif  // XFORM_SERVER_REPLICATION_SLOT_BITS_H_
