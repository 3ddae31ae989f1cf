// data::load: text, a folder of .txt files, or a token file → token ids, with a token cache
// (so a corpus is tokenized once) and the train/validation split.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "backend/cpu/thread_pool.h"
#include "forge/data.h"
#include "forge/error.h"
#include "io/atomic_file.h"
#include "text/char_json.h"

namespace forge::data {
namespace {

namespace fs = std::filesystem;
using Json = nlohmann::json;

constexpr const char* kFn = "data::load";
// Bumped when the cache's meaning changes, so old caches are rebuilt rather than misread.
constexpr int kCacheVersion = 1;

[[noreturn]] void fail(ErrorKind kind, const std::string& what) {
  throw Error(kind, std::string(kFn) + ": " + what);
}

std::string read_file(const fs::path& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(ErrorKind::Io, path.string() + ": cannot open for reading");
  std::ostringstream ss;
  ss << f.rdbuf();
  if (f.bad()) fail(ErrorKind::Io, path.string() + ": read failed");
  return std::move(ss).str();
}

// The text files of a source: the file itself, or a folder's .txt files in name order.
std::vector<fs::path> text_files(const fs::path& source) {
  std::error_code ec;
  if (fs::is_regular_file(source, ec)) return {source};
  if (!fs::is_directory(source, ec))
    fail(ErrorKind::Io, source.string() + ": not a regular file or a folder");
  std::vector<fs::path> files;
  for (fs::directory_iterator it(source, ec), end; !ec && it != end; it.increment(ec))
    if (it->path().extension() == ".txt" && it->is_regular_file(ec)) files.push_back(it->path());
  if (ec) fail(ErrorKind::Io, source.string() + ": cannot list the folder: " + ec.message());
  if (files.empty()) fail(ErrorKind::Io, source.string() + ": the folder holds no .txt files");
  // Byte order of the names: the same on every machine, unlike locale collation.
  std::sort(files.begin(), files.end(),
            [](const fs::path& a, const fs::path& b) { return a.filename() < b.filename(); });
  return files;
}

// What the cache must match: each file's name, size and modification time.
Json file_stamps(const std::vector<fs::path>& files) {
  Json out = Json::array();
  for (const fs::path& f : files) {
    std::error_code ec;
    const auto size = fs::file_size(f, ec);
    if (ec) fail(ErrorKind::Io, f.string() + ": " + ec.message());
    const auto mtime = fs::last_write_time(f, ec);
    if (ec) fail(ErrorKind::Io, f.string() + ": " + ec.message());
    out.push_back(
        {{"name", f.filename().string()},
         {"size", size},
         {"mtime_ns",
          std::chrono::duration_cast<std::chrono::nanoseconds>(mtime.time_since_epoch()).count()}});
  }
  return out;
}

// How the ids were made: enough to tell whether cached ids are still right. The BPE's
// fingerprint, not its path, so the same files elsewhere reuse the cache and changed files
// at the same path do not.
Json tokenizer_identity(const Tokenizer* bpe) {
  if (!bpe) return {{"kind", "char"}};
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(bpe->fingerprint()));
  return {{"kind", "bpe"}, {"fingerprint", hex}};
}

struct Tokens {
  std::vector<uint32_t> ids;
  Tokenizer tokenizer;
};

// Tokenizes the documents: BPE in parallel over documents (ids identical to encoding the
// joined text: encode splits at "<|endoftext|>" anyway), char level over the joined text
// after building the vocab from it.
Tokens tokenize(const std::vector<fs::path>& files, const Tokenizer* bpe) {
  std::vector<std::string> docs(files.size());
  for (size_t i = 0; i < files.size(); ++i) docs[i] = read_file(files[i]);
  // Empty documents are left out, so they add no separators (a folder of empty files holds
  // no tokens rather than a few "<|endoftext|>").
  std::erase_if(docs, [](const std::string& d) { return d.empty(); });
  if (!bpe) {
    std::string joined;
    size_t total = 0;
    for (const auto& d : docs) total += d.size() + 2;
    joined.reserve(total);
    for (size_t i = 0; i < docs.size(); ++i) {
      if (i) joined += "\n\n";
      joined += docs[i];
    }
    if (joined.empty()) return {};
    Tokenizer tok = Tokenizer::build_char(joined);
    return {tok.encode(joined), tok};
  }
  std::vector<std::vector<uint32_t>> parts(docs.size());
  cpu::run_tasks(static_cast<int64_t>(docs.size()), [&](int64_t i) {
    parts[static_cast<size_t>(i)] = bpe->encode(docs[static_cast<size_t>(i)]);
  });
  const int64_t eot = bpe->eot_id();
  std::vector<uint32_t> ids;
  size_t total = 0;
  for (const auto& p : parts) total += p.size() + 1;
  ids.reserve(total);
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) {
      // Between documents: "<|endoftext|>", or a blank line when the vocab has none.
      if (eot >= 0) {
        ids.push_back(static_cast<uint32_t>(eot));
      } else {
        const auto sep = bpe->encode("\n\n");
        ids.insert(ids.end(), sep.begin(), sep.end());
      }
    }
    ids.insert(ids.end(), parts[i].begin(), parts[i].end());
    std::vector<uint32_t>().swap(parts[i]);
  }
  return {std::move(ids), *bpe};
}

// The cached ids (and, for char level, the vocab) when the cache matches `meta`; nullopt
// when it is missing, stale or damaged (it is then rebuilt, never an error).
std::optional<Tokens> read_cache(const fs::path& dir, const Json& meta, const Tokenizer* bpe) {
  std::error_code ec;
  const fs::path meta_path = dir / "tokens.json", bin_path = dir / "tokens.bin";
  if (!fs::is_regular_file(meta_path, ec) || !fs::is_regular_file(bin_path, ec))
    return std::nullopt;
  try {
    // tokens.json is small, unless something else took its name.
    if (fs::file_size(meta_path) > (64u << 20)) return std::nullopt;
    const Json saved = Json::parse(read_file(meta_path));
    for (const char* key : {"version", "source", "files", "tokenizer"})
      if (!saved.contains(key) || saved[key] != meta[key]) return std::nullopt;
    Tokens out;
    out.ids = read_token_file(bin_path.string());
    if (!saved.contains("tokens") || saved["tokens"] != out.ids.size()) return std::nullopt;
    out.tokenizer = bpe ? *bpe
                        : Tokenizer::from_char_symbols(text::char_symbols_from_json(
                              saved.at("char_symbols"), meta_path.string()));
    const uint32_t vocab = out.tokenizer.vocab_size();
    if (std::any_of(out.ids.begin(), out.ids.end(), [&](uint32_t id) { return id >= vocab; }))
      return std::nullopt;
    return out;
  } catch (const std::exception&) {
    return std::nullopt;  // a damaged cache is rebuilt
  }
}

void write_cache(const fs::path& dir, Json meta, const Tokens& tokens, const Tokenizer* bpe) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir, ec))
    fail(ErrorKind::Io, dir.string() + ": cannot create the cache folder" +
                            (ec ? ": " + ec.message() : std::string()));
  // tokens.json goes first and comes back last: a crash in between leaves no metadata, so
  // the next run rebuilds instead of trusting a tokens.bin that belongs to other data.
  fs::remove(dir / "tokens.json", ec);
  write_token_file((dir / "tokens.bin").string(), tokens.ids);
  meta["tokens"] = tokens.ids.size();
  if (!bpe) meta["char_symbols"] = text::char_symbols_to_json(tokens.tokenizer);
  const std::string text = meta.dump(1) + "\n";
  io::AtomicFile file((dir / "tokens.json").string(), kFn);
  file.write(text.data(), text.size());
  file.commit();
}

}  // namespace

Dataset load(const DataOptions& options) {
  if (!(options.val_fraction >= 0.0 && options.val_fraction <= 0.5))
    fail(ErrorKind::Range,
         "val_fraction must be in [0, 0.5], got " + std::to_string(options.val_fraction));
  if (options.path.empty()) fail(ErrorKind::Io, "no data path given");
  std::error_code ec;
  if (!fs::exists(options.path, ec)) fail(ErrorKind::Io, options.path + ": no such file or folder");

  Dataset ds;
  std::vector<uint32_t> ids;
  if (is_token_file(options.path)) {
    ids = read_token_file(options.path);
    ds.cache_path = options.path;
    for (uint32_t id : ids) ds.vocab_size = std::max<int64_t>(ds.vocab_size, int64_t{id} + 1);
  } else {
    if (options.tokenizer.empty())
      fail(ErrorKind::Tokenizer, options.path +
                                     " is text: give a tokenizer (a folder of GPT-2 BPE files, or "
                                     "\"char\")");
    const bool char_level = options.tokenizer == "char";
    std::optional<Tokenizer> bpe;
    if (!char_level) bpe = Tokenizer::load(options.tokenizer);
    const Tokenizer* bpe_ptr = bpe ? &*bpe : nullptr;
    const std::vector<fs::path> files = text_files(options.path);

    std::optional<Tokens> tokens;
    Json meta;
    if (!options.cache_dir.empty()) {
      meta = {{"version", kCacheVersion},
              {"source", fs::absolute(options.path, ec).lexically_normal().string()},
              {"files", file_stamps(files)},
              {"tokenizer", tokenizer_identity(bpe_ptr)}};
      tokens = read_cache(options.cache_dir, meta, bpe_ptr);
    }
    const bool from_cache = tokens.has_value();
    if (!tokens) tokens = tokenize(files, bpe_ptr);
    if (tokens->ids.empty()) fail(ErrorKind::Range, options.path + " holds no tokens");
    if (!options.cache_dir.empty()) {
      if (!from_cache) write_cache(options.cache_dir, meta, *tokens, bpe_ptr);
      ds.cache_path = (fs::path(options.cache_dir) / "tokens.bin").string();
    }
    ids = std::move(tokens->ids);
    ds.tokenizer = tokens->tokenizer;
    ds.has_tokenizer = true;
    ds.vocab_size = ds.tokenizer.vocab_size();
  }
  if (ids.empty()) fail(ErrorKind::Range, options.path + " holds no tokens");

  // The last val_fraction of the tokens (rounded to nearest) is the validation split.
  const auto n = static_cast<int64_t>(ids.size());
  const auto n_val =
      static_cast<int64_t>(std::llround(static_cast<double>(n) * options.val_fraction));
  ds.val.assign(ids.end() - n_val, ids.end());
  ids.resize(static_cast<size_t>(n - n_val));
  ds.train = std::move(ids);
  return ds;
}

}  // namespace forge::data
