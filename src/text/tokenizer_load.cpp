// Loading a tokenizer from its files, and every check that makes a malformed file fail at
// load time (with the file and the offending entry named) rather than give wrong ids later.
#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "forge/gguf.h"
#include "text/char_json.h"
#include "text/tokenizer_impl.h"

namespace forge {

namespace fs = std::filesystem;
using text::fail;
using Json = nlohmann::json;

namespace {

// Real tokenizer files are a few MB; the cap keeps a wrong path (a model's weights, say) from
// being read whole into memory.
constexpr uintmax_t kMaxFileBytes = 256ull << 20;
constexpr int64_t kMaxId = std::numeric_limits<int32_t>::max();

std::string read_file(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) fail(path, "no such file");
  if (!fs::is_regular_file(path, ec)) fail(path, "not a regular file");
  const uintmax_t size = fs::file_size(path, ec);
  if (ec) fail(path, "cannot read: " + ec.message());
  if (size > kMaxFileBytes)
    fail(path, "file is " + std::to_string(size) + " bytes, more than a tokenizer file can be (" +
                   std::to_string(kMaxFileBytes) + ")");
  std::ifstream f(path, std::ios::binary);
  if (!f) fail(path, "cannot open for reading");
  std::string data(static_cast<size_t>(size), '\0');
  f.read(data.data(), static_cast<std::streamsize>(size));
  if (static_cast<uintmax_t>(f.gcount()) != size) fail(path, "cannot read the whole file");
  return data;
}

Json parse_json(const std::string& path) {
  const std::string data = read_file(path);
  try {
    return Json::parse(data);
  } catch (const Json::exception& e) {
    fail(path, std::string("malformed JSON: ") + e.what());
  }
}

// A short, printable rendering of a token for error messages.
std::string show_token(std::string_view s) {
  std::string out = "'";
  out.append(s.substr(0, 40));
  if (s.size() > 40) out += "...";
  return out + "'";
}

int64_t id_value(const std::string& where, const std::string& what, const Json& v) {
  if (!v.is_number_integer())  // true for signed and unsigned, false for floats and bools
    fail(where, what + ": id must be an integer, got " + std::string(v.type_name()));
  if (v.is_number_unsigned() ? v.get<uint64_t>() > static_cast<uint64_t>(kMaxId)
                             : (v.get<int64_t>() < 0 || v.get<int64_t>() > kMaxId))
    fail(where, what + ": id " + v.dump() + " out of range [0, " + std::to_string(kMaxId) + "]");
  return v.get<int64_t>();
}

std::vector<std::pair<std::string, int64_t>> vocab_entries(const std::string& where,
                                                           const Json& vocab) {
  if (!vocab.is_object())
    fail(where, "vocab must be a JSON object of token → id, got " + std::string(vocab.type_name()));
  std::vector<std::pair<std::string, int64_t>> out;
  out.reserve(vocab.size());
  for (const auto& [token, id] : vocab.items())
    out.emplace_back(token, id_value(where, "token " + show_token(token), id));
  return out;
}

// vocab.json / encoder.json, read with nlohmann's SAX interface: the entries go straight into
// a vector instead of through a DOM of 50k nodes, which halves the load time.
class VocabReader : public nlohmann::json_sax<Json> {
 public:
  explicit VocabReader(std::string path) : path_(std::move(path)) {}

  static std::vector<std::pair<std::string, int64_t>> read(const std::string& path) {
    const std::string data = read_file(path);
    VocabReader r(path);
    r.entries_.reserve(data.size() / 16);
    const bool ok = Json::sax_parse(data, &r);
    if (!ok || !r.error_.empty())
      fail(path, r.error_.empty() ? std::string("malformed JSON") : r.error_);
    if (!r.seen_object_) fail(path, "vocab must be a JSON object of token → id");
    return std::move(r.entries_);
  }

  bool null() override { return value("null"); }
  bool boolean(bool) override { return value("boolean"); }
  bool number_integer(number_integer_t v) override {
    if (v < 0 || v > kMaxId) return stop(id_error(std::to_string(v)));
    return add(v);
  }
  bool number_unsigned(number_unsigned_t v) override {
    if (v > static_cast<uint64_t>(kMaxId)) return stop(id_error(std::to_string(v)));
    return add(static_cast<int64_t>(v));
  }
  bool number_float(number_float_t, const string_t&) override { return value("number"); }
  bool string(string_t&) override { return value("string"); }
  bool binary(binary_t&) override { return value("binary"); }
  bool start_object(std::size_t) override {
    if (depth_ > 0) return value("object");
    seen_object_ = true;
    ++depth_;
    return true;
  }
  bool key(string_t& k) override {
    key_ = k;
    return true;
  }
  bool end_object() override {
    --depth_;
    return true;
  }
  bool start_array(std::size_t) override { return value("array"); }
  bool end_array() override { return true; }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    return stop(std::string("malformed JSON: ") + e.what());
  }

 private:
  bool stop(std::string error) {
    error_ = std::move(error);
    return false;
  }
  std::string id_error(const std::string& got) const {
    return "token " + show_token(key_) + ": id " + got + " out of range [0, " +
           std::to_string(kMaxId) + "]";
  }
  // Any value other than an integer id: wrong at the top level and inside the object.
  bool value(const char* type) {
    if (depth_ == 0)
      return stop(std::string("vocab must be a JSON object of token → id, got ") + type);
    return stop("token " + show_token(key_) + ": id must be an integer, got " + type);
  }
  bool add(int64_t id) {
    if (depth_ == 0) return value("number");
    entries_.emplace_back(key_, id);
    return true;
  }

  std::string path_;
  std::vector<std::pair<std::string, int64_t>> entries_;
  std::string key_;
  std::string error_;
  int depth_ = 0;
  bool seen_object_ = false;
};

std::vector<text::MergeRule> parse_merges_txt(const std::string& path) {
  const std::string data = read_file(path);
  std::vector<text::MergeRule> rules;
  size_t line_no = 0;
  for (size_t pos = 0; pos < data.size();) {
    size_t eol = data.find('\n', pos);
    if (eol == std::string::npos) eol = data.size();
    std::string_view line(data.data() + pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line_no == 1 && line.starts_with("#version")) continue;
    const size_t space = line.find(' ');
    if (space == std::string_view::npos || space == 0 || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string_view::npos)
      fail(path,
           "line " + std::to_string(line_no) + ": expected 'left right', got " + show_token(line));
    rules.push_back(
        {std::string(line.substr(0, space)), std::string(line.substr(space + 1)), line_no});
  }
  return rules;
}

std::atomic<uint64_t> g_serial{0};

}  // namespace

std::shared_ptr<const Tokenizer::Impl> Tokenizer::Impl::build(
    const std::string& vocab_where, const std::vector<std::pair<std::string, int64_t>>& vocab,
    const std::string& merges_where, const std::vector<text::MergeRule>& merges,
    const std::vector<std::pair<std::string, int64_t>>& added) {
  auto impl = std::make_shared<Impl>();

  std::unordered_map<std::string, int64_t> added_ids;
  for (const auto& [content, id] : added) {
    if (content.empty()) fail(vocab_where, "added token " + std::to_string(id) + " is empty");
    auto [it, fresh] = added_ids.emplace(content, id);
    if (!fresh && it->second != id)
      fail(vocab_where, "added token " + show_token(content) + " has two ids, " +
                            std::to_string(it->second) + " and " + std::to_string(id));
  }

  // Ids must be exactly 0..n-1. There are at most `limit` distinct ids, so a larger id means a
  // gap; checking that first bounds the tables below by the number of entries, not by an id.
  const size_t limit = vocab.size() + added_ids.size();
  std::vector<const std::string*> owner(limit, nullptr);  // id → its token, while checking
  int64_t max_id = -1;
  auto claim = [&](int64_t id, const std::string& token, bool is_added) {
    if (static_cast<uint64_t>(id) >= limit)
      fail(vocab_where, "token " + show_token(token) + " has id " + std::to_string(id) +
                            ", but with " + std::to_string(limit) + " tokens the ids must be 0.." +
                            std::to_string(limit - 1));
    const std::string*& o = owner[static_cast<size_t>(id)];
    if (o && !(is_added && *o == token))
      fail(vocab_where, "duplicate id " + std::to_string(id) + " for " + show_token(*o) + " and " +
                            show_token(token));
    o = &token;
    max_id = std::max(max_id, id);
  };
  std::unordered_map<std::string_view, uint32_t> vocab_ids;  // byte-level string → id
  vocab_ids.reserve(vocab.size());
  for (const auto& [token, id] : vocab) {
    if (token.empty()) fail(vocab_where, "the empty string is not a valid token");
    auto a = added_ids.find(token);
    if (a != added_ids.end() && a->second != id)
      fail(vocab_where, "token " + show_token(token) + " is id " + std::to_string(id) +
                            " in the vocab but " + std::to_string(a->second) + " in added_tokens");
    claim(id, token, false);
    vocab_ids.emplace(token, static_cast<uint32_t>(id));
  }
  for (const auto& [content, id] : added_ids) claim(id, content, true);
  if (max_id < 0) fail(vocab_where, "the vocab is empty");
  for (int64_t id = 0; id < max_id; ++id)
    if (!owner[static_cast<size_t>(id)])
      fail(vocab_where, "no token has id " + std::to_string(id) + " (ids must be 0.." +
                            std::to_string(max_id) + " without gaps)");

  // id → bytes. Added tokens are raw text; everything else is in the byte-level alphabet.
  impl->token_bytes.resize(static_cast<size_t>(max_id) + 1);
  for (const auto& [token, id] : vocab) {
    if (added_ids.count(token)) continue;
    std::optional<std::string> bytes = text::byte_level_decode(token);
    if (!bytes)
      fail(vocab_where, "token " + show_token(token) + " (id " + std::to_string(id) +
                            ") is not in GPT-2's byte-level alphabet");
    impl->token_bytes[static_cast<size_t>(id)] = std::move(*bytes);
  }
  for (const auto& [content, id] : added_ids) {
    impl->token_bytes[static_cast<size_t>(id)] = content;
    impl->specials.push_back({content, static_cast<uint32_t>(id)});
  }
  // Longest first: when two special tokens start at the same place, the longer one wins (as
  // HF's leftmost-longest added-token matching does); ties in length by id, for determinism.
  std::sort(impl->specials.begin(), impl->specials.end(), [](const auto& a, const auto& b) {
    return a.text.size() != b.text.size() ? a.text.size() > b.text.size() : a.id < b.id;
  });

  // Every byte needs its own token, so that any text encodes.
  for (int b = 0; b < 256; ++b) {
    const std::string token = text::byte_level_encode(std::string(1, static_cast<char>(b)));
    auto it = vocab_ids.find(token);
    if (it == vocab_ids.end() || added_ids.count(token)) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02X", b);
      fail(vocab_where, std::string("no token for byte ") + hex + " (" + show_token(token) + ")");
    }
    impl->byte_ids[static_cast<size_t>(b)] = it->second;
  }

  impl->merges.reserve(merges.size());
  auto lookup = [&](const text::MergeRule& r, const std::string& token) {
    auto it = vocab_ids.find(token);
    if (it == vocab_ids.end())
      fail(merges_where,
           "line " + std::to_string(r.line) + ": " + show_token(token) + " is not in the vocab");
    return it->second;
  };
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const text::MergeRule& r = merges[rank];
    // Separate statements: the errors name the first missing token, left to right.
    const uint32_t left = lookup(r, r.left);
    const uint32_t right = lookup(r, r.right);
    const uint32_t merged = lookup(r, r.left + r.right);
    impl->merges.insert(left, right, static_cast<uint32_t>(rank), merged);
  }
  impl->serial = ++g_serial;
  return impl;
}

Tokenizer Tokenizer::from_vocab_merges(const std::string& vocab_path,
                                       const std::string& merges_path) {
  const auto vocab = VocabReader::read(vocab_path);
  const auto merges = parse_merges_txt(merges_path);
  // vocab.json carries no flag for special tokens; HF's GPT2Tokenizer treats <|endoftext|>
  // (its bos/eos/unk) as one.
  std::vector<std::pair<std::string, int64_t>> added;
  for (const auto& [token, id] : vocab)
    if (token == "<|endoftext|>") added.emplace_back(token, id);
  // Other special tokens live in added_tokens.json next to vocab.json (HF's slow tokenizers
  // read it too; save() writes it).
  const fs::path added_path = fs::path(vocab_path).parent_path() / "added_tokens.json";
  std::error_code ec;
  if (fs::is_regular_file(added_path, ec)) {
    const std::string where = added_path.string();
    const Json root = parse_json(where);
    if (!root.is_object()) fail(where, "expected a JSON object of token → id");
    for (const auto& [content, id] : root.items())
      added.emplace_back(content, id_value(where, "added token " + show_token(content), id));
  }
  return Tokenizer(Impl::build(vocab_path, vocab, merges_path, merges, added));
}

Tokenizer Tokenizer::from_token_list(const std::vector<std::string>& tokens,
                                     const std::vector<std::string>& merges,
                                     const std::vector<int64_t>& types, const std::string& where) {
  if (!types.empty() && types.size() != tokens.size())
    fail(where, std::to_string(types.size()) + " token types for " + std::to_string(tokens.size()) +
                    " tokens");
  std::vector<std::pair<std::string, int64_t>> vocab, added;
  vocab.reserve(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    const auto id = static_cast<int64_t>(i);
    vocab.emplace_back(tokens[i], id);
    const bool special =
        types.empty() ? tokens[i] == "<|endoftext|>" : types[i] == 3 || types[i] == 4;
    if (special) added.emplace_back(tokens[i], id);
  }
  std::vector<text::MergeRule> rules;
  rules.reserve(merges.size());
  for (size_t i = 0; i < merges.size(); ++i) {
    const std::string& m = merges[i];
    const size_t space = m.find(' ');
    if (space == std::string::npos || space == 0 || space + 1 == m.size() ||
        m.find(' ', space + 1) != std::string::npos)
      fail(where, "merge " + std::to_string(i) + ": expected 'left right', got " + show_token(m));
    rules.push_back({m.substr(0, space), m.substr(space + 1), i + 1});
  }
  return Tokenizer(Impl::build(where, vocab, where, rules, added));
}

Tokenizer Tokenizer::from_gguf(const std::string& path) {
  try {
    const gguf::File f = gguf::File::open(path);
    if (const gguf::Value* m = f.find("tokenizer.ggml.model"); !m || m->as_string() != "gpt2")
      fail(path, "tokenizer.ggml.model must be \"gpt2\" (byte-level BPE), got " +
                     (m ? "\"" + m->as_string().substr(0, 40) + "\"" : std::string("none")));
    const gguf::Value* types = f.find("tokenizer.ggml.token_type");
    return from_token_list(f.get_strings("tokenizer.ggml.tokens"),
                           f.get_strings("tokenizer.ggml.merges"),
                           types ? types->as_i64s() : std::vector<int64_t>{}, path);
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::Tokenizer) throw;
    fail(path, e.what());  // the file's own errors, as tokenizer errors
  }
}

Tokenizer Tokenizer::from_char_json(const std::string& path) {
  const Json root = parse_json(path);
  if (!root.is_object()) fail(path, "expected a JSON object at the top level");
  auto type = root.find("type");
  if (type == root.end() || *type != "forge-char")
    fail(path, "\"type\" must be \"forge-char\"" +
                   (type == root.end() ? std::string() : ", got " + type->dump().substr(0, 40)));
  if (auto v = root.find("version"); v != root.end() && *v != 1)
    fail(path, "unknown version " + v->dump().substr(0, 20) + " (this build reads version 1)");
  auto symbols = root.find("symbols");
  if (symbols == root.end()) fail(path, "no \"symbols\" list");
  return Tokenizer(Impl::build_char(text::char_symbols_from_json(*symbols, path), path));
}

Tokenizer Tokenizer::from_tokenizer_json(const std::string& path) {
  const Json root = parse_json(path);
  if (!root.is_object()) fail(path, "expected a JSON object at the top level");
  auto model_it = root.find("model");
  if (model_it == root.end() || !model_it->is_object()) fail(path, "no \"model\" object");
  const Json& model = *model_it;
  if (auto t = model.find("type"); t != model.end() && *t != "BPE")
    fail(path, "model.type is " + t->dump() + "; only BPE is supported");
  auto vocab_it = model.find("vocab");
  if (vocab_it == model.end()) fail(path, "no model.vocab");
  const auto vocab = vocab_entries(path, *vocab_it);

  auto merges_it = model.find("merges");
  if (merges_it == model.end() || !merges_it->is_array()) fail(path, "no model.merges list");
  std::vector<text::MergeRule> merges;
  merges.reserve(merges_it->size());
  size_t index = 0;
  for (const Json& m : *merges_it) {
    ++index;
    const std::string what = "model.merges[" + std::to_string(index - 1) + "]";
    // Older files write "left right"; tokenizers >= 0.20 writes ["left", "right"].
    if (m.is_string()) {
      const std::string& s = m.get_ref<const std::string&>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || space == 0 || space + 1 == s.size() ||
          s.find(' ', space + 1) != std::string::npos)
        fail(path, what + ": expected 'left right', got " + show_token(s));
      merges.push_back({s.substr(0, space), s.substr(space + 1), index});
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      merges.push_back({m[0].get<std::string>(), m[1].get<std::string>(), index});
    } else {
      fail(path, what + ": expected \"left right\" or [\"left\", \"right\"], got " +
                     m.dump().substr(0, 60));
    }
  }

  std::vector<std::pair<std::string, int64_t>> added;
  if (auto a = root.find("added_tokens"); a != root.end() && !a->is_null()) {
    if (!a->is_array()) fail(path, "added_tokens must be a list");
    for (const Json& t : *a) {
      if (!t.is_object() || !t.contains("id") || !t.contains("content") ||
          !t["content"].is_string())
        fail(path, "added_tokens: each entry needs \"id\" and a string \"content\"");
      const std::string content = t["content"].get<std::string>();
      added.emplace_back(content, id_value(path, "added token " + show_token(content), t["id"]));
    }
  }
  return Tokenizer(Impl::build(path, vocab, path + " (model.merges)", merges, added));
}

bool Tokenizer::available(const std::string& path) {
  std::error_code ec;
  const fs::path p(path);
  if (fs::is_regular_file(p, ec)) {
    if (p.extension() == ".json")
      return p.filename() == "tokenizer.json" || p.filename() == "tokenizer_char.json";
    if (p.extension() != ".gguf") return false;
    try {
      return gguf::File::open(path).find("tokenizer.ggml.model") != nullptr;
    } catch (const Error&) {
      return false;
    }
  }
  auto has = [&](const char* name) { return fs::is_regular_file(p / name, ec); };
  return has("tokenizer.json") || (has("vocab.json") && has("merges.txt")) ||
         (has("encoder.json") && has("vocab.bpe")) || has("tokenizer_char.json");
}

Tokenizer Tokenizer::load(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) fail(path, "no such file or folder");
  if (fs::is_regular_file(path, ec)) {
    if (fs::path(path).filename() == "tokenizer_char.json") return from_char_json(path);
    if (fs::path(path).extension() == ".json") return from_tokenizer_json(path);
    if (fs::path(path).extension() == ".gguf") return from_gguf(path);
    fail(path, "expected a folder, a tokenizer.json, a tokenizer_char.json or a .gguf file");
  }
  const fs::path dir(path);
  auto has = [&](const char* name) { return fs::is_regular_file(dir / name, ec); };
  if (has("tokenizer_char.json")) {
    for (const char* bpe :
         {"tokenizer.json", "vocab.json", "merges.txt", "encoder.json", "vocab.bpe"})
      if (has(bpe))
        fail(path, std::string("holds both tokenizer_char.json and ") + bpe +
                       " (a char-level and a BPE tokenizer); remove the one that does not belong");
    return from_char_json((dir / "tokenizer_char.json").string());
  }
  if (has("tokenizer.json")) return from_tokenizer_json((dir / "tokenizer.json").string());
  for (auto [vocab, merges] :
       {std::pair{"vocab.json", "merges.txt"}, std::pair{"encoder.json", "vocab.bpe"}}) {
    if (has(vocab) && has(merges))
      return from_vocab_merges((dir / vocab).string(), (dir / merges).string());
    if (has(vocab) != has(merges))
      fail((dir / (has(vocab) ? merges : vocab)).string(),
           std::string("no such file (needed next to ") + (has(vocab) ? vocab : merges) + ")");
  }
  fail(path,
       "no tokenizer files (expected tokenizer.json, vocab.json + merges.txt, encoder.json + "
       "vocab.bpe, or tokenizer_char.json)");
}

}  // namespace forge
