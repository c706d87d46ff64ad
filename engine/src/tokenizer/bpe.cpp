// BPE by merge rank (bpe.h). Two paths with the same result: words of up to kShortWord symbols scan an array of
// pair ranks (no allocation beyond the caller's vector: most words of prose are 1-10 symbols); longer ones (a whole
// SentencePiece segment is one word) use a min-heap of (rank, position) over a linked list of symbols, O(n log n).
// Both merge the lowest rank first and, among equal ranks, the leftmost pair: the order of Hugging Face's heap.
#include "engine/src/tokenizer/bpe.h"

#include <algorithm>
#include <queue>

namespace sqrtdk::tok {

namespace {
constexpr size_t kShortWord = 64;
}

MergeTable::MergeTable(const std::vector<std::pair<uint32_t, uint32_t>>& merges, const std::vector<uint32_t>& merged)
    : n_(merges.size()) {
  size_t cap = 16;
  while (cap < merges.size() * 2) cap *= 2;
  slots_.assign(cap, Slot{kEmpty, 0, 0});
  mask_ = cap - 1;
  shift_ = 64;
  for (size_t c = cap; c > 1; c >>= 1) --shift_;
  for (size_t r = 0; r < merges.size(); ++r) {
    const uint64_t key = uint64_t{merges[r].first} << 32 | merges[r].second;
    size_t i = hash(key);
    while (slots_[i].key != kEmpty && slots_[i].key != key) i = (i + 1) & mask_;
    slots_[i] = Slot{key, static_cast<uint32_t>(r), merged[r]};
  }
}

void MergeTable::merge(std::vector<uint32_t>& ids) const {
  if (ids.size() < 2) return;
  if (ids.size() <= kShortWord) {
    merge_short(ids);
  } else {
    merge_long(ids);
  }
}

void MergeTable::merge_short(std::vector<uint32_t>& ids) const {
  // rank[i]: the rank of the pair (ids[i], ids[i + 1]), kNone when it has no rule.
  uint32_t rank[kShortWord], merged[kShortWord];
  size_t n = ids.size();
  auto look = [&](size_t i) {
    const Slot* s = find(ids[i], ids[i + 1]);
    rank[i] = s ? s->rank : kNone;
    merged[i] = s ? s->merged : 0;
  };
  for (size_t i = 0; i + 1 < n; ++i) look(i);
  for (;;) {
    size_t best = 0;
    uint32_t best_rank = kNone;
    for (size_t i = 0; i + 1 < n; ++i)
      if (rank[i] < best_rank) best_rank = rank[i], best = i;
    if (best_rank == kNone) break;
    ids[best] = merged[best];
    // Remove symbol best + 1 and pair best + 1 (its ranks shift down by one).
    for (size_t i = best + 1; i + 1 < n; ++i) {
      ids[i] = ids[i + 1];
      rank[i] = rank[i + 1];
      merged[i] = merged[i + 1];
    }
    --n;
    if (best > 0) look(best - 1);
    if (best + 1 < n) look(best);
  }
  ids.resize(n);
}

void MergeTable::merge_long(std::vector<uint32_t>& ids) const {
  const size_t n = ids.size();
  std::vector<uint32_t> prev(n), next(n);  // kNone at the ends; a merged-away symbol gets prev = next = its own index
  for (size_t i = 0; i < n; ++i) {
    prev[i] = i == 0 ? kNone : static_cast<uint32_t>(i - 1);
    next[i] = i + 1 == n ? kNone : static_cast<uint32_t>(i + 1);
  }
  // Entries are (rank << 32 | left position): the smallest is the lowest rank, then the leftmost.
  std::priority_queue<uint64_t, std::vector<uint64_t>, std::greater<>> heap;
  auto push = [&](uint32_t left) {
    if (left == kNone || next[left] == kNone) return;
    if (const Slot* s = find(ids[left], ids[next[left]])) heap.push(uint64_t{s->rank} << 32 | left);
  };
  for (size_t i = 0; i + 1 < n; ++i) push(static_cast<uint32_t>(i));
  std::vector<bool> gone(n, false);
  while (!heap.empty()) {
    const uint64_t top = heap.top();
    heap.pop();
    const uint32_t left = static_cast<uint32_t>(top), r = static_cast<uint32_t>(top >> 32);
    if (gone[left] || next[left] == kNone) continue;
    const uint32_t right = next[left];
    const Slot* s = find(ids[left], ids[right]);
    if (!s || s->rank != r) continue;  // stale: a neighbour changed since this entry was pushed
    ids[left] = s->merged;
    gone[right] = true;
    next[left] = next[right];
    if (next[right] != kNone) prev[next[right]] = left;
    push(prev[left]);
    push(left);
  }
  size_t out = 0;
  for (size_t i = 0; i < n; ++i)
    if (!gone[i]) ids[out++] = ids[i];
  ids.resize(out);
}

}  // namespace sqrtdk::tok
