// forge tokenize / forge detokenize: text ↔ GPT-2 token ids from the command line.
//
//   forge tokenize -m DIR [--text T] [--json]   (text from stdin without --text)
//       prints the ids space-separated, or {"ids": [...]} with --json
//   forge detokenize -m DIR [ID ...]            (ids from stdin without arguments:
//       whitespace-separated, or JSON {"ids": [...]} / [...]); prints the exact decoded bytes
//
// DIR is a model folder or a tokenizer folder (see Tokenizer::load).
#include <charconv>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "forge/error.h"
#include "forge/tokenizer.h"

namespace forge::cli {
namespace {

// Far above any real input, but a runaway pipe cannot exhaust memory.
constexpr size_t kMaxStdinBytes = size_t{1} << 30;

std::string read_stdin(const char* cmd) {
  std::string data;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, stdin)) > 0) {
    if (data.size() + n > kMaxStdinBytes)
      throw Error(ErrorKind::Format, std::string(cmd) + ": standard input is larger than " +
                                         std::to_string(kMaxStdinBytes) + " bytes");
    data.append(buf, n);
  }
  if (std::ferror(stdin))
    throw Error(ErrorKind::Io, std::string(cmd) + ": cannot read standard input");
  return data;
}

void write_stdout(const std::string& s) {
  if (!s.empty() && std::fwrite(s.data(), 1, s.size(), stdout) != s.size())
    throw Error(ErrorKind::Io, "writing the output failed");
}

struct TokenizeOptions {
  std::string model;
  std::string text;
  bool has_text = false;
  bool json = false;
};

int run_tokenize(const TokenizeOptions& o) {
  const Tokenizer tok = Tokenizer::load(o.model);
  const std::string text = o.has_text ? o.text : read_stdin("tokenize");
  const std::vector<uint32_t> ids = tok.encode(text);
  std::string out;
  out.reserve(ids.size() * 6 + 16);
  out += o.json ? "{\"ids\": [" : "";
  char buf[16];
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i) out += o.json ? ", " : " ";
    const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, ids[i]);
    out.append(buf, end);
  }
  out += o.json ? "]}\n" : "\n";
  write_stdout(out);
  return 0;
}

uint32_t parse_id(std::string_view s) {
  uint32_t v = 0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || s.empty())
    throw Error(ErrorKind::Format,
                "detokenize: '" + std::string(s.substr(0, 40)) + "' is not a token id");
  return v;
}

// Ids from stdin: JSON ({"ids": [...]} as `forge tokenize --json` prints, or a bare list) or
// plain whitespace-separated numbers.
std::vector<uint32_t> ids_from_stdin() {
  const std::string data = read_stdin("detokenize");
  const size_t first = data.find_first_not_of(" \t\r\n");
  std::vector<uint32_t> ids;
  if (first != std::string::npos && (data[first] == '{' || data[first] == '[')) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(data);
    } catch (const nlohmann::json::exception& e) {
      throw Error(ErrorKind::Format, std::string("detokenize: malformed JSON: ") + e.what());
    }
    if (j.is_object() && j.contains("ids")) j = j["ids"];
    if (!j.is_array()) throw Error(ErrorKind::Format, "detokenize: expected {\"ids\": [...]}");
    for (const auto& v : j) {
      if (!v.is_number_unsigned() || v.get<uint64_t>() > UINT32_MAX)
        throw Error(ErrorKind::Format,
                    "detokenize: " + v.dump().substr(0, 40) + " is not a token id");
      ids.push_back(v.get<uint32_t>());
    }
    return ids;
  }
  for (size_t pos = 0; pos < data.size();) {
    pos = data.find_first_not_of(" \t\r\n", pos);
    if (pos == std::string::npos) break;
    size_t end = data.find_first_of(" \t\r\n", pos);
    if (end == std::string::npos) end = data.size();
    ids.push_back(parse_id(std::string_view(data).substr(pos, end - pos)));
    pos = end;
  }
  return ids;
}

struct DetokenizeOptions {
  std::string model;
  std::vector<std::string> ids;
};

int run_detokenize(const DetokenizeOptions& o) {
  std::vector<uint32_t> ids;
  if (o.ids.empty()) {
    ids = ids_from_stdin();
  } else {
    for (const std::string& s : o.ids) ids.push_back(parse_id(s));
  }
  const Tokenizer tok = Tokenizer::load(o.model);
  write_stdout(tok.decode(ids));
  return 0;
}

}  // namespace

void register_tokenize(CLI::App& app, Action& action) {
  const char* model_help =
      "Model or tokenizer folder (tokenizer.json, vocab.json + merges.txt, or encoder.json + "
      "vocab.bpe)";
  {
    CLI::App* cmd = app.add_subcommand("tokenize", "Text → GPT-2 token ids");
    // Parsed options must outlive register_tokenize: the action runs after parsing.
    auto o = std::make_shared<TokenizeOptions>();
    cmd->add_option("-m,--model", o->model, model_help)->required();
    CLI::Option* text = cmd->add_option("--text", o->text, "Text to encode (default: stdin)");
    cmd->add_flag("--json", o->json, "Print {\"ids\": [...]} instead of space-separated ids");
    cmd->callback([&action, o, text] {
      o->has_text = text->count() > 0;
      action = [o] { return run_tokenize(*o); };
    });
  }
  {
    CLI::App* cmd = app.add_subcommand(
        "detokenize", "GPT-2 token ids → text (the exact bytes, no newline added)");
    auto o = std::make_shared<DetokenizeOptions>();
    cmd->add_option("-m,--model", o->model, model_help)->required();
    cmd->add_option("ids", o->ids,
                    "Token ids (default: stdin, whitespace-separated or {\"ids\": [...]})");
    cmd->callback([&action, o] { action = [o] { return run_detokenize(*o); }; });
  }
}

}  // namespace forge::cli
