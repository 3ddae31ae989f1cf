// Writing a tokenizer into a model folder (so checkpoints carry theirs) and its fingerprint.
#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <tuple>

#include "io/atomic_file.h"
#include "text/char_json.h"
#include "text/tokenizer_impl.h"

namespace forge {
namespace {

namespace fs = std::filesystem;

[[noreturn]] void io_fail(const std::string& path, const std::string& what) {
  throw Error(ErrorKind::Io, "tokenizer: save: " + path + ": " + what);
}

void write_file(const fs::path& path, const std::string& data) {
  io::AtomicFile file(path.string(), "tokenizer: save");
  file.write(data.data(), data.size());
  file.commit();
}

// Merges as (left, right, merged) in rank order (the table keeps them by hash).
std::vector<std::tuple<uint32_t, uint32_t, uint32_t>> merges_in_rank_order(
    const Tokenizer::Impl& t) {
  std::vector<std::tuple<uint32_t, uint32_t, uint32_t, uint32_t>> ranked;  // rank first
  ranked.reserve(t.merges.size());
  t.merges.for_each([&](uint32_t left, uint32_t right, uint32_t rank, uint32_t merged) {
    ranked.emplace_back(rank, left, right, merged);
  });
  std::sort(ranked.begin(), ranked.end());
  std::vector<std::tuple<uint32_t, uint32_t, uint32_t>> out;
  out.reserve(ranked.size());
  for (const auto& [rank, left, right, merged] : ranked) out.emplace_back(left, right, merged);
  return out;
}

bool is_special(const Tokenizer::Impl& t, uint32_t id) {
  return std::any_of(t.specials.begin(), t.specials.end(),
                     [&](const text::SpecialToken& s) { return s.id == id; });
}

// The vocab string of an id: special tokens as they are, the rest in GPT-2's byte alphabet.
std::string vocab_string(const Tokenizer::Impl& t, uint32_t id) {
  return is_special(t, id) ? t.token_bytes[id] : text::byte_level_encode(t.token_bytes[id]);
}

void save_bpe(const Tokenizer::Impl& t, const fs::path& dir) {
  // vocab.json in id order, as HF writes it (a JSON object keeps no order, but readers of
  // these files like it that way).
  std::string vocab = "{";
  for (uint32_t id = 0; id < t.token_bytes.size(); ++id) {
    if (id) vocab += ", ";
    vocab += nlohmann::json(vocab_string(t, id)).dump() + ": " + std::to_string(id);
  }
  vocab += "}\n";
  write_file(dir / "vocab.json", vocab);

  std::string merges = "#version: 0.2\n";
  for (const auto& [left, right, merged] : merges_in_rank_order(t))
    merges += vocab_string(t, left) + " " + vocab_string(t, right) + "\n";
  write_file(dir / "merges.txt", merges);

  // vocab.json cannot flag special tokens; the loaders treat "<|endoftext|>" as one by
  // convention, and read any other from added_tokens.json.
  nlohmann::json added = nlohmann::json::object();
  for (const text::SpecialToken& s : t.specials)
    if (s.text != "<|endoftext|>") added[s.text] = s.id;
  if (!added.empty()) write_file(dir / "added_tokens.json", added.dump() + "\n");
}

}  // namespace

Tokenizer::TokenList Tokenizer::token_list() const {
  if (!impl_ || impl_->kind != Kind::Bpe)
    throw Error(ErrorKind::Tokenizer,
                "tokenizer: token_list: only a byte-level BPE tokenizer has one");
  const Impl& t = *impl_;
  TokenList out;
  for (uint32_t id = 0; id < t.token_bytes.size(); ++id) {
    out.tokens.push_back(vocab_string(t, id));
    out.types.push_back(is_special(t, id) ? 3 : 1);
  }
  for (const auto& [left, right, merged] : merges_in_rank_order(t))
    out.merges.push_back(vocab_string(t, left) + " " + vocab_string(t, right));
  return out;
}

namespace {

void save_char(const Tokenizer& tokenizer, const fs::path& dir) {
  nlohmann::ordered_json root;
  root["type"] = "forge-char";
  root["version"] = 1;
  root["symbols"] = text::char_symbols_to_json(tokenizer);
  write_file(dir / "tokenizer_char.json", root.dump() + "\n");
}

}  // namespace

void Tokenizer::save(const std::string& dir) const {
  const Impl& t = impl();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir, ec))
    io_fail(dir, "cannot create the folder" + (ec ? ": " + ec.message() : std::string()));
  std::vector<const char*> stale;
  if (t.kind == Kind::Char) {
    save_char(*this, dir);
    stale = {"tokenizer.json", "vocab.json", "merges.txt",
             "encoder.json",   "vocab.bpe",  "added_tokens.json"};
  } else {
    save_bpe(t, dir);
    // tokenizer.json would win over the files just written; a stale added_tokens.json would
    // add special tokens this tokenizer does not have.
    stale = {"tokenizer.json", "tokenizer_char.json"};
    if (std::none_of(t.specials.begin(), t.specials.end(),
                     [](const text::SpecialToken& s) { return s.text != "<|endoftext|>"; }))
      stale.push_back("added_tokens.json");
  }
  for (const char* name : stale) {
    const fs::path p = fs::path(dir) / name;
    if (fs::exists(p, ec) && !fs::remove(p, ec))
      io_fail(p.string(), "cannot remove this stale tokenizer file: " + ec.message());
  }
}

uint64_t Tokenizer::fingerprint() const {
  // FNV-1a over a length-prefixed serialization: unambiguous, and stable across runs and
  // builds (unlike std::hash).
  uint64_t h = 0xcbf29ce484222325ull;
  auto bytes = [&](const void* p, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      h ^= static_cast<const uint8_t*>(p)[i];
      h *= 0x100000001b3ull;
    }
  };
  auto u64 = [&](uint64_t v) { bytes(&v, sizeof v); };
  auto str = [&](const std::string& s) {
    u64(s.size());
    bytes(s.data(), s.size());
  };
  const Impl& t = impl();
  u64(t.kind == Kind::Char ? 2 : 1);
  u64(t.token_bytes.size());
  for (const std::string& s : t.token_bytes) str(s);
  std::vector<std::pair<uint32_t, std::string>> specials;
  for (const text::SpecialToken& s : t.specials) specials.emplace_back(s.id, s.text);
  std::sort(specials.begin(), specials.end());
  u64(specials.size());
  for (const auto& [id, text] : specials) {
    u64(id);
    str(text);
  }
  // Ranks only order the merges (gaps are possible after duplicates), so hash the order.
  const auto merges = merges_in_rank_order(t);
  u64(merges.size());
  for (const auto& [left, right, merged] : merges) {
    u64(left);
    u64(right);
    u64(merged);
  }
  return h;
}

}  // namespace forge
