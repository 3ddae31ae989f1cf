// The BPE merge loop: a piece's bytes start as single-byte tokens; the adjacent pair with the
// lowest merge rank is merged (leftmost on ties) until no pair merges. This is the order HF
// tokenizers and tiktoken use, which gives the same ids as GPT-2's original encoder.py.
#include <algorithm>
#include <bit>
#include <queue>

#include "text/tokenizer_impl.h"

namespace forge::text {

void MergeTable::reserve(size_t n) {
  size_t cap = 16;
  while (cap < 2 * n) cap *= 2;  // load factor <= 1/2 keeps probe runs short
  slots_.assign(cap, Entry{});
  mask_ = cap - 1;
  shift_ = 64 - std::countr_zero(cap);
  size_ = 0;
}

void MergeTable::insert(uint32_t left, uint32_t right, uint32_t rank, uint32_t merged) {
  const uint64_t key = pack(left, right);
  for (size_t i = slot_of(key);; i = (i + 1) & mask_) {
    Entry& e = slots_[i];
    if (e.key == kEmpty) {
      if (2 * (size_ + 1) > slots_.size()) fail("merges", "MergeTable::insert beyond reserve()");
      ++size_;
    } else if (e.key != key) {
      continue;
    }
    e = Entry{key, rank, merged};
    return;
  }
}

namespace {

constexpr uint32_t kNoRank = ~uint32_t{0};

uint32_t rank_of(const MergeTable& merges, uint32_t a, uint32_t b) {
  const MergeTable::Entry* e = merges.find(a, b);
  return e ? e->rank : kNoRank;
}

}  // namespace

// Short pieces (almost all of them in real text): keep the ids and the rank of each adjacent
// pair in small arrays, find the minimum by a linear scan, and after a merge re-rank only the
// two pairs that touch the merged symbol. O(n^2) but with tiny n and no allocation.
void bpe_merge_scan(const MergeTable& merges, const std::array<uint32_t, 256>& byte_ids,
                    std::string_view piece, std::vector<uint32_t>& out) {
  constexpr size_t kMax = 64;
  uint32_t ids[kMax];
  uint32_t ranks[kMax];  // ranks[i]: rank of the pair (ids[i], ids[i + 1])
  size_t n = piece.size();
  if (n > kMax) fail("bpe", "bpe_merge_scan: piece longer than 64 bytes");
  for (size_t i = 0; i < n; ++i) ids[i] = byte_ids[static_cast<uint8_t>(piece[i])];
  for (size_t i = 0; i + 1 < n; ++i) ranks[i] = rank_of(merges, ids[i], ids[i + 1]);
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i)
      if (ranks[i] < ranks[best]) best = i;  // strict '<': leftmost wins ties
    if (ranks[best] == kNoRank) break;
    ids[best] = merges.find(ids[best], ids[best + 1])->merged;
    // Drop symbol best + 1 and the pair rank that started at it.
    std::copy(ids + best + 2, ids + n, ids + best + 1);
    if (best + 2 < n) std::copy(ranks + best + 2, ranks + n - 1, ranks + best + 1);
    --n;
    if (best + 1 < n) ranks[best] = rank_of(merges, ids[best], ids[best + 1]);
    if (best > 0) ranks[best - 1] = rank_of(merges, ids[best - 1], ids[best]);
  }
  out.insert(out.end(), ids, ids + n);
}

// Long pieces (long words, runs of symbols or digits-free junk): a doubly linked list of
// symbols plus a min-heap of candidate pairs ordered by (rank, position). Entries go stale when
// a neighbour merges; they are recognised on pop by their recorded ids and skipped.
// O(n log n) overall.
void bpe_merge_heap(const MergeTable& merges, const std::array<uint32_t, 256>& byte_ids,
                    std::string_view piece, std::vector<uint32_t>& out) {
  const size_t n = piece.size();
  if (n == 0) return;
  constexpr uint32_t kDead = ~uint32_t{0};
  constexpr uint32_t kNone = ~uint32_t{0};
  struct Symbol {
    uint32_t id, prev, next;
  };
  std::vector<Symbol> sym(n);
  for (size_t i = 0; i < n; ++i)
    sym[i] = {byte_ids[static_cast<uint8_t>(piece[i])], i == 0 ? kNone : uint32_t(i - 1),
              i + 1 == n ? kNone : uint32_t(i + 1)};

  struct Candidate {
    uint32_t rank, pos, left, right;  // pos: index of the left symbol; left/right: their ids
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> heap;
  auto consider = [&](uint32_t pos) {
    if (pos == kNone || sym[pos].next == kNone) return;
    const uint32_t a = sym[pos].id, b = sym[sym[pos].next].id;
    if (const MergeTable::Entry* e = merges.find(a, b)) heap.push({e->rank, pos, a, b});
  };
  for (size_t i = 0; i + 1 < n; ++i) consider(static_cast<uint32_t>(i));

  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Symbol& s = sym[c.pos];
    // Stale if the left symbol changed (merged, or absorbed: then its id is kDead) or its
    // right neighbour changed; ids only ever grow longer, so equal ids mean "unchanged".
    if (s.id != c.left || s.next == kNone || sym[s.next].id != c.right) continue;
    const uint32_t gone = s.next;
    s.id = merges.find(c.left, c.right)->merged;
    s.next = sym[gone].next;
    if (s.next != kNone) sym[s.next].prev = c.pos;
    sym[gone].id = kDead;
    consider(s.prev);
    consider(c.pos);
  }
  for (uint32_t i = 0; i != kNone; i = sym[i].next) out.push_back(sym[i].id);
}

void bpe_merge(const MergeTable& merges, const std::array<uint32_t, 256>& byte_ids,
               std::string_view piece, std::vector<uint32_t>& out) {
  if (piece.size() <= 16) {
    bpe_merge_scan(merges, byte_ids, piece, out);
  } else {
    bpe_merge_heap(merges, byte_ids, piece, out);
  }
}

}  // namespace forge::text
