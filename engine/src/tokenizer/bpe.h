// BPE by merge rank, as Hugging Face's Word::merge_all: repeatedly merge the adjacent pair of lowest rank (the
// leftmost of equal ranks) until no adjacent pair has a merge rule. Immutable after construction; merge() keeps its
// state on the caller's stack, so one MergeTable serves any number of threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace sqrtdk::tok {

class MergeTable {
 public:
  // merges[rank] = (left id, right id); merged[rank] = the id of the merged piece. A pair listed twice keeps its
  // last rank (Hugging Face builds a map from the list, so a later entry overwrites an earlier one).
  MergeTable(const std::vector<std::pair<uint32_t, uint32_t>>& merges, const std::vector<uint32_t>& merged);

  // Merges `ids` (the symbols of one word, left to right) in place.
  void merge(std::vector<uint32_t>& ids) const;

  size_t size() const { return n_; }

 private:
  struct Slot {
    uint64_t key;  // left << 32 | right; kEmpty when free
    uint32_t rank;
    uint32_t merged;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  static constexpr uint32_t kNone = ~uint32_t{0};
  // The slot of (left, right), or nullptr when the pair has no rule.
  const Slot* find(uint32_t left, uint32_t right) const {
    const uint64_t key = uint64_t{left} << 32 | right;
    size_t i = hash(key);
    for (;;) {
      const Slot& s = slots_[i];
      if (s.key == key) return &s;
      if (s.key == kEmpty) return nullptr;
      i = (i + 1) & mask_;
    }
  }
  size_t hash(uint64_t key) const { return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_); }
  void merge_short(std::vector<uint32_t>& ids) const;
  void merge_long(std::vector<uint32_t>& ids) const;

  std::vector<Slot> slots_;  // open addressing, linear probing, at most half full
  size_t mask_ = 0;
  int shift_ = 64;
  size_t n_ = 0;
};

}  // namespace sqrtdk::tok
