// Training data: token files (llm.c's shard layout), datasets built from text or token
// files with a deterministic train/validation split, and seeded batch samplers whose whole
// state is one counter (so a resumed run draws exactly the batches it would have drawn).
//
// Errors: forge::Error whose message starts with the function's name ("data::load: ...").
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "forge/tensor.h"
#include "forge/tokenizer.h"

namespace forge::data {

// ----------------------------------------------------------------------------------------
// Token files: a 1024-byte header of 256 little-endian int32 — [0] magic 20240520,
// [1] version (1: uint16 tokens, 2: uint32 tokens), [2] token count — then the tokens
// (llm.c's data-shard layout, so its tools can read forge's files and vice versa).
// ----------------------------------------------------------------------------------------

/// Writes tokens atomically (temp file + rename): version 1 when every id < 65536, else 2.
/// Error(Io) when the file cannot be written (the old file, if any, survives).
void write_token_file(const std::string& path, std::span<const uint32_t> tokens);
/// Reads a token file. Error(Io) if unreadable; Error(Format) for a bad magic, an unknown
/// version, or a size that does not match the header's count.
std::vector<uint32_t> read_token_file(const std::string& path);
/// True if `path` is a regular file that starts with the token-file magic.
bool is_token_file(const std::string& path);

// ----------------------------------------------------------------------------------------
// Datasets
// ----------------------------------------------------------------------------------------

struct DataOptions {
  /// A text file, a folder of .txt files (read in sorted name order, joined with
  /// "<|endoftext|>" between documents for BPE — "\n\n" if its vocab has no such token —
  /// and "\n\n" for char; empty documents are skipped), or a token file.
  std::string path;
  /// A tokenizer folder (GPT-2 BPE files), or "char" for a character-level vocabulary built
  /// from the data. Ignored for token files (they are already ids).
  std::string tokenizer;
  /// Folder for the token cache ("<cache_dir>/tokens.bin" + "tokens.json" naming the source,
  /// each file's size and mtime, and the tokenizer — the BPE's fingerprint, or the char
  /// vocab itself), so the text is tokenized once and re-tokenized when the files or the
  /// tokenizer change. A missing, stale or damaged cache is rebuilt, never an error.
  /// Empty: no cache.
  std::string cache_dir;
  /// The last fraction of the tokens is the validation split, in [0, 0.5]; 0: none.
  double val_fraction = 0.1;
};

struct Dataset {
  std::vector<uint32_t> train, val;
  /// How text maps to ids (BPE or char); an empty handle (has_tokenizer false) for token
  /// files.
  Tokenizer tokenizer;
  bool has_tokenizer = false;
  /// Ids are < vocab_size: the tokenizer's vocab, or (token files) the largest id + 1.
  int64_t vocab_size = 0;
  std::string cache_path;  // the token file read or written ("" when none)
};

/// Loads (and tokenizes, or reads from the cache) the data. Folders: only the .txt files
/// directly inside (not in subfolders), sorted by name bytes. BPE text is tokenized in
/// parallel over documents (ids identical to encoding the joined text). Errors: missing
/// path, or a folder without .txt files (Io); no tokens at all (Range "... holds no
/// tokens"); val_fraction outside [0, 0.5] (Range); a bad token file (Format); text without
/// a tokenizer, or tokenizer errors (Tokenizer). Text that is not valid UTF-8 still
/// tokenizes (BPE: bytes; char: every invalid byte is its own symbol).
Dataset load(const DataOptions& options);

// ----------------------------------------------------------------------------------------
// Batches
// ----------------------------------------------------------------------------------------

/// B sequences of T tokens and their next-token targets, U32 [B, T] each, on the CPU.
struct Batch {
  Tensor inputs, targets;
};

/// Draws batches of `batch` windows of seq + 1 consecutive tokens; window j (counting every
/// window ever drawn) starts at a position given by a counter-based hash of (seed, j),
/// uniform over the n - seq possible starts, so the sampler's whole state is the number of
/// windows drawn. Row r of batch k is window k * batch + r: inputs = its first seq tokens,
/// targets = its last seq. Error(Range) when the tokens hold fewer than seq + 1 ("data
/// shorter than one sequence: ... needs N tokens, the data has M"), batch or seq < 1,
/// batch * seq > 2^31, or tokens is null.
class BatchSampler {
 public:
  BatchSampler(std::shared_ptr<const std::vector<uint32_t>> tokens, int64_t batch, int64_t seq,
               uint64_t seed);
  Batch next();
  /// Windows drawn so far; seek() restores a saved position.
  uint64_t position() const { return position_; }
  void seek(uint64_t position) { position_ = position; }

 private:
  std::shared_ptr<const std::vector<uint32_t>> tokens_;
  int64_t batch_ = 0, seq_ = 0;
  uint64_t seed_ = 0, position_ = 0;
};

/// Fixed evaluation batches: consecutive non-overlapping windows of seq + 1 tokens from the
/// start of `tokens`, grouped `batch` at a time (the last batch may hold fewer rows), at most
/// max_batches batches (0: all). Empty when tokens hold fewer than seq + 1.
std::vector<Batch> sequential_batches(const std::vector<uint32_t>& tokens, int64_t batch,
                                      int64_t seq, int64_t max_batches = 0);

}  // namespace forge::data
