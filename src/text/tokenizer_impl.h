// Internals of forge::Tokenizer shared by the files in src/text/: the loaded vocabulary, the
// merge table, the regex pre-tokenizer and the BPE merge loop.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "forge/error.h"
#include "forge/tokenizer.h"

namespace forge::text {

[[noreturn]] inline void fail(const std::string& where, const std::string& what) {
  throw Error(ErrorKind::Tokenizer, "tokenizer: " + where + ": " + what);
}

// ---- byte_level.cpp ---------------------------------------------------------------------------
/// GPT-2's bytes_to_unicode: byte b → the code point that stands for it in vocab strings
/// (printable bytes map to themselves, the other 68 to U+0100..U+0143).
uint32_t byte_to_codepoint(uint8_t b);
/// A vocab string (UTF-8 of byte-standing code points) → the bytes it stands for, or nullopt
/// if it holds a code point that stands for no byte.
std::optional<std::string> byte_level_decode(std::string_view token);
/// The inverse: bytes → vocab string.
std::string byte_level_encode(std::string_view bytes);

// ---- merges: (left id, right id) → (rank, merged id) ------------------------------------------
/// Open-addressing hash table keyed by the id pair; lookups sit in the innermost BPE loop, so
/// this avoids std::unordered_map's node chasing.
class MergeTable {
 public:
  struct Entry {
    uint64_t key = kEmpty;
    uint32_t rank = 0;
    uint32_t merged = 0;
  };
  static constexpr uint64_t kEmpty = ~uint64_t{0};

  /// Sizes the table for `n` entries (call once, before insert).
  void reserve(size_t n);
  /// Inserts or overwrites (a later duplicate merge wins, as in HF's loaders).
  void insert(uint32_t left, uint32_t right, uint32_t rank, uint32_t merged);
  /// The entry for (left, right), or nullptr when the pair never merges.
  const Entry* find(uint32_t left, uint32_t right) const {
    if (slots_.empty()) return nullptr;
    const uint64_t key = pack(left, right);
    for (size_t i = slot_of(key);; i = (i + 1) & mask_) {
      const Entry& e = slots_[i];
      if (e.key == key) return &e;
      if (e.key == kEmpty) return nullptr;
    }
  }
  size_t size() const { return size_; }
  /// Calls fn(left, right, rank, merged) for every entry, in slot order (not rank order).
  template <typename Fn>
  void for_each(Fn&& fn) const {
    for (const Entry& e : slots_)
      if (e.key != kEmpty)
        fn(static_cast<uint32_t>(e.key >> 32), static_cast<uint32_t>(e.key), e.rank, e.merged);
  }

 private:
  static uint64_t pack(uint32_t a, uint32_t b) { return (uint64_t{a} << 32) | b; }
  size_t slot_of(uint64_t key) const {
    return static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_) & mask_;
  }
  std::vector<Entry> slots_;
  size_t mask_ = 0;
  int shift_ = 64;
  size_t size_ = 0;
};

// ---- bpe.cpp ----------------------------------------------------------------------------------
/// Merges the bytes of one pre-tokenized piece (n >= 1) into token ids, appended to `out`:
/// repeatedly the adjacent pair with the lowest rank, leftmost first on ties (as HF
/// tokenizers and tiktoken do). O(n log n) via a heap of candidate pairs.
void bpe_merge(const MergeTable& merges, const std::array<uint32_t, 256>& byte_ids,
               std::string_view piece, std::vector<uint32_t>& out);
/// The two strategies bpe_merge picks between by length (exposed so tests can check that they
/// agree): a linear scan for short pieces (at most 64 bytes), a heap for long ones.
void bpe_merge_scan(const MergeTable& merges, const std::array<uint32_t, 256>& byte_ids,
                    std::string_view piece, std::vector<uint32_t>& out);
void bpe_merge_heap(const MergeTable& merges, const std::array<uint32_t, 256>& byte_ids,
                    std::string_view piece, std::vector<uint32_t>& out);

// ---- pretokenizer.cpp -------------------------------------------------------------------------
/// GPT-2's split regex compiled with PCRE2 (UTF + UCP, JIT when available).
class Pretokenizer {
 public:
  Pretokenizer();
  ~Pretokenizer();
  Pretokenizer(const Pretokenizer&) = delete;
  Pretokenizer& operator=(const Pretokenizer&) = delete;

  /// Calls fn(piece, valid) for consecutive pieces covering `text`: valid pieces are regex
  /// matches; invalid ones are runs of bytes that are not valid UTF-8 (no regex item matches
  /// them). Thread-safe.
  template <typename Fn>
  void split(std::string_view text, Fn&& fn) const;

 private:
  struct Matcher;  // per-call PCRE2 match data
  // Finds the next match at or after `offset`; returns false at the end. [begin, end) out.
  bool next_match(Matcher& m, std::string_view text, size_t offset, size_t& begin,
                  size_t& end) const;
  Matcher* new_matcher() const;
  static void free_matcher(Matcher* m);

  [[maybe_unused]] void* code_ = nullptr;  // pcre2_code_8* (builds with PCRE2)
  [[maybe_unused]] bool jit_ = false;
};

template <typename Fn>
void Pretokenizer::split(std::string_view text, Fn&& fn) const {
  std::unique_ptr<Matcher, void (*)(Matcher*)> m(new_matcher(), &free_matcher);
  size_t offset = 0;
  while (offset < text.size()) {
    size_t begin = 0, end = 0;
    if (!next_match(*m, text, offset, begin, end)) {
      fn(text.substr(offset), false);
      return;
    }
    if (begin > offset) fn(text.substr(offset, begin - offset), false);
    fn(text.substr(begin, end - begin), true);
    offset = end;
  }
}

/// A special (added) token: split out of the text before the regex, never merged by BPE.
struct SpecialToken {
  std::string text;
  uint32_t id;
};

// ---- char_tokenizer.cpp -----------------------------------------------------------------------
/// Length (1..4) of the valid UTF-8 character that `s` starts with (RFC 3629: no overlong
/// forms, no surrogates, at most U+10FFFF), or 0 when s[0] starts none (an invalid byte).
/// s must not be empty.
size_t utf8_char_length(std::string_view s);
/// The character-level symbol at the start of `s`: the valid character, or the one byte.
inline std::string_view char_symbol_at(std::string_view s) {
  const size_t n = utf8_char_length(s);
  return s.substr(0, n == 0 ? 1 : n);
}

/// One merge rule as read from a file, with where it came from (for error messages).
struct MergeRule {
  std::string left, right;  // byte-level vocab strings
  size_t line;              // 1-based line of merges.txt, or index in tokenizer.json's list
};

}  // namespace forge::text

namespace forge {

struct Tokenizer::Impl {
  Tokenizer::Kind kind = Tokenizer::Kind::Bpe;
  std::vector<std::string> token_bytes;  // [vocab_size] id → the bytes it decodes to
  std::array<uint32_t, 256> byte_ids{};  // byte → id of its single-byte token
  text::MergeTable merges;
  std::vector<text::SpecialToken> specials;  // longest first, so ties pick the longest
  text::Pretokenizer pretokenizer;
  uint64_t serial = 0;  // unique per loaded tokenizer: keys the per-thread piece caches

  /// Builds a char-level tokenizer whose id i is symbols[i] (validated: one character each,
  /// no duplicates, at least one); `where` names the source in error messages.
  static std::shared_ptr<const Impl> build_char(std::vector<std::string> symbols,
                                                const std::string& where);

  // Char level only: the id of each one-byte symbol (an ASCII character or an invalid byte),
  // -1 when it is not in the vocab; multi-byte characters by their bytes (packed into a
  // uint32, at most 4 bytes) → id.
  std::array<int32_t, 256> char_byte_ids{};
  std::unordered_map<uint32_t, uint32_t> char_ids;
  /// Char-level encode: appends the ids of `text`'s characters to `out`.
  void char_encode(std::string_view text, std::vector<uint32_t>& out) const;

  /// Validates parsed files and builds the tokenizer. vocab: (byte-level token string, id);
  /// merges: rules in rank order; added: special tokens (raw text, id), which may also be in
  /// the vocab. vocab_where / merges_where name the files in error messages.
  static std::shared_ptr<const Impl> build(
      const std::string& vocab_where, const std::vector<std::pair<std::string, int64_t>>& vocab,
      const std::string& merges_where, const std::vector<text::MergeRule>& merges,
      const std::vector<std::pair<std::string, int64_t>>& added);
};

}  // namespace forge
