// GPT-2's byte-level BPE tokenizer (identical ids to HF transformers / tiktoken), a
// character-level tokenizer, and a streaming decoder for printing generated tokens as they
// come.
//
// Encoding: special tokens (`<|endoftext|>` = 50256 for GPT-2) are split out of the text
// first; the rest is cut into pieces by GPT-2's regex, each piece's UTF-8 bytes become byte
// symbols that are merged by lowest merge rank. Text that is not valid UTF-8 still encodes:
// each invalid byte becomes its own byte token, so decode(encode(b)) == b for any bytes b.
//
// Character level (build_char): the vocabulary is the distinct characters of a text — each
// Unicode code point of valid UTF-8, and each byte of invalid UTF-8 as a symbol of its own —
// sorted by their bytes, ids 0..n-1. Encoding maps each character to its id; a character
// outside the vocabulary is an error. There are no special tokens (eot_id() is -1).
//
// A Tokenizer is an immutable, cheaply copyable handle (shared data); encode/decode may be
// called from several threads at once.
//
// Errors: every function but save() throws forge::Error of kind ErrorKind::Tokenizer:
// loading, for missing, unreadable or malformed files ("tokenizer: <file>: <what>");
// decoding, for ids outside the vocab ("tokenizer: decode: id ... out of range ...");
// char-level encoding, for a character outside the vocab ("tokenizer: encode: ...").
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace forge {

class Tokenizer {
 public:
  enum class Kind { Bpe, Char };

  /// An empty handle (e.g. a member to be assigned later): defined() is false and every
  /// other method throws Error(Tokenizer).
  Tokenizer() = default;
  bool defined() const { return impl_ != nullptr; }

  /// Loads from a folder (a model folder or a tokenizer folder) holding, in order of
  /// preference: tokenizer.json (HF), vocab.json + merges.txt (HF), or encoder.json +
  /// vocab.bpe (OpenAI's names for the same two files) — or tokenizer_char.json (a
  /// character-level vocab written by save()). A folder holding both BPE files and
  /// tokenizer_char.json is an error (which one was meant is unknowable). `path` may also
  /// name a tokenizer.json, a tokenizer_char.json or a GGUF file (from_gguf) directly.
  static Tokenizer load(const std::string& path);
  /// Whether `path` holds a tokenizer load() would take: a folder with one of the layouts
  /// above, a tokenizer.json / tokenizer_char.json file, or a GGUF file whose metadata has a
  /// tokenizer (tokenizer.ggml.model). Never throws: an unreadable GGUF file has none.
  static bool available(const std::string& path);
  /// Loads a vocab (JSON object token → id, e.g. vocab.json / encoder.json) and a merges
  /// file (optional "#version" line, then one "left right" pair per line, rank = order).
  static Tokenizer from_vocab_merges(const std::string& vocab_path, const std::string& merges_path);
  /// Loads an HF tokenizer.json (model.vocab, model.merges, added_tokens).
  static Tokenizer from_tokenizer_json(const std::string& path);
  /// Loads a tokenizer_char.json written by save().
  static Tokenizer from_char_json(const std::string& path);

  /// A byte-level BPE tokenizer in the form GGUF files keep GPT-2's (tokenizer.ggml.tokens,
  /// .merges, .token_type): tokens[i] is id i's string in GPT-2's byte alphabet (as in
  /// vocab.json), merges are "left right" in rank order, and ids whose type is 3 (control)
  /// or 4 (user-defined) are special tokens, matched as raw text (types may be empty: then
  /// "<|endoftext|>" alone is special, as with vocab.json). `where` names the source in
  /// errors. Error(Tokenizer) for what from_vocab_merges refuses, and for a types list of
  /// another length.
  static Tokenizer from_token_list(const std::vector<std::string>& tokens,
                                   const std::vector<std::string>& merges,
                                   const std::vector<int64_t>& types, const std::string& where);
  /// The tokenizer of a GGUF file (tokenizer.ggml.model "gpt2"; load() takes a .gguf path
  /// too). Error(Tokenizer) for a file without one, or a malformed one.
  static Tokenizer from_gguf(const std::string& path);
  /// This BPE tokenizer in that form (types: 1 normal, 3 for the special tokens).
  /// Error(Tokenizer) for a character-level one.
  struct TokenList {
    std::vector<std::string> tokens, merges;
    std::vector<int64_t> types;
  };
  TokenList token_list() const;

  /// A character-level vocabulary of the distinct characters of `text` (see above).
  /// Error(Tokenizer) if text is empty.
  static Tokenizer build_char(std::string_view text);
  /// A character-level tokenizer whose id i is symbols[i]. Each symbol must be one character
  /// as build_char cuts text (one valid UTF-8 code point, or one byte >= 0x80 that does not
  /// start a valid character); no duplicates, at least one. Error(Tokenizer) otherwise.
  static Tokenizer from_char_symbols(const std::vector<std::string>& symbols);

  /// Writes the tokenizer into folder `dir` (created if missing) so that load(dir) gives it
  /// back, each file atomically. BPE: vocab.json + merges.txt in HF's layout (so HF
  /// transformers' GPT2Tokenizer loads them too), plus added_tokens.json when there are
  /// special tokens other than "<|endoftext|>". Char: tokenizer_char.json,
  ///   {"type": "forge-char", "version": 1, "symbols": [...]}
  /// where each symbol, in id order, is a JSON string (a valid UTF-8 character) or an
  /// integer 128..255 (a lone byte that is not valid UTF-8). Other tokenizer files in `dir`
  /// that load() would prefer or that would conflict (tokenizer.json; tokenizer_char.json
  /// or the BPE files) are removed, so the folder then holds exactly this tokenizer.
  /// Error(Io) if a file cannot be written.
  void save(const std::string& dir) const;

  Kind kind() const;
  bool is_char_level() const { return kind() == Kind::Char; }
  /// A hash of everything that decides the ids (kind, token bytes, merges in rank order,
  /// special tokens): equal tokenizers have equal fingerprints, wherever they were loaded
  /// from. Used to tell whether cached token ids are still valid.
  uint64_t fingerprint() const;

  /// Text (any bytes; UTF-8 expected) → token ids. Special tokens in the text map to their id.
  /// Char level: Error(Tokenizer) naming the first character not in the vocab and its byte
  /// offset.
  std::vector<uint32_t> encode(std::string_view text) const;
  /// Like encode, but special-token strings are tokenized as ordinary text.
  std::vector<uint32_t> encode_ordinary(std::string_view text) const;
  /// Ids → the exact bytes they stand for (may be invalid UTF-8 if the ids end or start
  /// inside a character). Error(Tokenizer) for an id >= vocab_size().
  std::string decode(std::span<const uint32_t> ids) const;
  /// The bytes of one token. Error(Tokenizer) for an id >= vocab_size().
  std::string token_bytes(uint32_t id) const;

  /// Number of ids (the largest id + 1): 50257 for GPT-2.
  uint32_t vocab_size() const;
  /// Id of a special token such as "<|endoftext|>", or -1 if the vocab has none by that name.
  int64_t special_id(std::string_view token) const;
  /// Id of "<|endoftext|>" (50256 for GPT-2), or -1 if absent (always for char level).
  int64_t eot_id() const { return special_id("<|endoftext|>"); }

  struct Impl;  // defined in src/text/; public only so the implementation files can reach it

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  const Impl& impl() const;  // Error(Tokenizer) for an empty handle
  std::shared_ptr<const Impl> impl_;
};

/// Turns a stream of ids into text, one id at a time, never splitting a UTF-8 character: a
/// token may end in the middle of a multi-byte character, so push() holds back an incomplete
/// trailing character until the tokens that complete it arrive.
///
/// Invalid UTF-8 (bytes that no continuation could make valid) is passed through unchanged
/// rather than replaced with U+FFFD, so the concatenation of every push() and the final
/// flush() is exactly decode(all ids).
class StreamDecoder {
 public:
  explicit StreamDecoder(Tokenizer tokenizer) : tokenizer_(std::move(tokenizer)) {}
  /// Adds one id; returns the text that became complete (possibly empty).
  /// Error(Tokenizer) for an id >= vocab_size() (the decoder's state is then unchanged).
  std::string push(uint32_t id);
  /// Returns whatever is still held back (an incomplete character, at most 3 bytes) and resets.
  std::string flush();

 private:
  Tokenizer tokenizer_;
  std::string pending_;  // bytes of an incomplete trailing UTF-8 character
};

}  // namespace forge
