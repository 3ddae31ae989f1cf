// TensorDirectory: a model's weights in one safetensors file or in shards named by an index.
#include <sys/stat.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <vector>

#include "forge/error.h"
#include "forge/safetensors.h"
#include "io/safetensors_header.h"

namespace forge {
namespace {

constexpr const char* kSingle = "model.safetensors";
constexpr const char* kIndex = "model.safetensors.index.json";

bool exists(const std::string& p, bool* dir = nullptr) {
  struct stat st {};
  if (::stat(p.c_str(), &st) != 0) return false;
  if (dir) *dir = S_ISDIR(st.st_mode);
  return true;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// A shard must be a file directly inside the index's folder: no separators, no "." or "..",
// so that an index cannot make forge read files elsewhere.
bool plain_file_name(const std::string& s) {
  return !s.empty() && s != "." && s != ".." && s.find('/') == std::string::npos &&
         s.find('\\') == std::string::npos && s.find('\0') == std::string::npos;
}

std::string read_small_file(const std::string& path, const std::string& prefix) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw Error(ErrorKind::Io, prefix + ": cannot open");
  f.seekg(0, std::ios::end);
  const std::streamoff size = f.tellg();
  if (size < 0) throw Error(ErrorKind::Io, prefix + ": cannot read");
  if (static_cast<uint64_t>(size) > io::kMaxHeaderBytes)
    throw Error(ErrorKind::Format, prefix + ": index of " + std::to_string(size) +
                                       " bytes exceeds the " +
                                       std::to_string(io::kMaxHeaderBytes >> 20) + " MiB limit");
  f.seekg(0);
  std::string text(static_cast<size_t>(size), '\0');
  if (!f.read(text.data(), size)) throw Error(ErrorKind::Io, prefix + ": cannot read");
  return text;
}

// Parses JSON, rejecting duplicate keys at any level (a DOM parse keeps only the last one,
// which would let one name silently point at two shards) and implausible nesting.
nlohmann::ordered_json parse_strict(const std::string& text, const std::string& prefix) {
  using json = nlohmann::ordered_json;
  std::vector<std::set<std::string>> keys;  // one set per open object
  auto cb = [&](int depth, json::parse_event_t ev, json& parsed) {
    if (depth > 32) throw Error(ErrorKind::Format, prefix + ": JSON nested too deeply");
    switch (ev) {
      case json::parse_event_t::object_start: keys.emplace_back(); break;
      case json::parse_event_t::object_end: keys.pop_back(); break;
      case json::parse_event_t::key:
        if (!keys.back().insert(parsed.get<std::string>()).second)
          throw Error(ErrorKind::Format,
                      prefix + ": duplicate key '" + parsed.get<std::string>() + "'");
        break;
      default: break;
    }
    return true;
  };
  try {
    return json::parse(text, cb);
  } catch (const json::exception& e) {
    throw Error(ErrorKind::Format, prefix + ": not valid JSON: " + e.what());
  }
}

}  // namespace

TensorDirectory TensorDirectory::open(const std::string& path) {
  bool is_dir = false;
  if (!exists(path, &is_dir)) throw Error(ErrorKind::Io, "safetensors: " + path + ": not found");
  std::string file = path;
  if (is_dir) {
    const std::string base = ends_with(path, "/") ? path : path + "/";
    if (exists(base + kSingle)) {
      file = base + kSingle;
    } else if (exists(base + kIndex)) {
      file = base + kIndex;
    } else {
      throw Error(ErrorKind::Io,
                  "safetensors: " + path + ": holds neither " + kSingle + " nor " + kIndex);
    }
  }

  TensorDirectory d;
  d.source_ = file;
  if (!ends_with(file, ".json")) {
    d.files_.push_back(SafeTensorsFile::open(file));
    d.names_ = d.files_[0].names();
    for (const std::string& n : d.names_) d.where_.emplace(n, 0);
    return d;
  }

  const std::string prefix = "safetensors: " + file;
  const auto slash = file.find_last_of('/');
  const std::string folder = slash == std::string::npos ? "" : file.substr(0, slash + 1);
  const nlohmann::ordered_json index = parse_strict(read_small_file(file, prefix), prefix);
  if (!index.is_object()) throw Error(ErrorKind::Format, prefix + ": index is not a JSON object");
  const auto wm = index.find("weight_map");
  if (wm == index.end() || !wm->is_object())
    throw Error(ErrorKind::Format, prefix + ": no \"weight_map\" object");

  // name -> shard file name, and shards in order of first appearance.
  std::map<std::string, std::string> mapped;
  std::vector<std::string> shard_names;
  std::map<std::string, size_t> shard_index;
  for (const auto& [name, shard] : wm->items()) {
    if (!shard.is_string())
      throw Error(ErrorKind::Format,
                  prefix + ": weight_map['" + name + "'] is not a file name string");
    const std::string s = shard.get<std::string>();
    if (!plain_file_name(s))
      throw Error(ErrorKind::Format, prefix + ": weight_map['" + name + "'] = '" + s +
                                         "' is not a plain file name in the index's folder");
    mapped.emplace(name, s);
    if (shard_index.emplace(s, shard_names.size()).second) shard_names.push_back(s);
  }

  for (size_t i = 0; i < shard_names.size(); ++i) {
    d.files_.push_back(SafeTensorsFile::open(folder + shard_names[i]));
    const SafeTensorsFile& f = d.files_.back();
    for (const std::string& n : f.names()) {
      auto it = mapped.find(n);
      if (it == mapped.end())
        throw Error(ErrorKind::Format, prefix + ": shard '" + shard_names[i] + "' holds tensor '" +
                                           n + "', which weight_map does not list");
      if (it->second != shard_names[i])
        throw Error(ErrorKind::Format, prefix + ": tensor '" + n + "' is in shard '" +
                                           shard_names[i] + "' but weight_map maps it to '" +
                                           it->second + "'");
      d.names_.push_back(n);
      d.where_.emplace(n, i);
    }
  }
  for (const auto& [name, shard] : mapped) {
    if (!d.where_.count(name))
      throw Error(ErrorKind::Format, prefix + ": weight_map maps '" + name + "' to '" + shard +
                                         "', which holds no such tensor");
  }
  return d;
}

const std::vector<std::string>& TensorDirectory::names() const { return names_; }
const std::vector<SafeTensorsFile>& TensorDirectory::files() const { return files_; }
bool TensorDirectory::contains(const std::string& name) const { return where_.count(name) != 0; }

const SafeTensorsFile& TensorDirectory::file_of(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end())
    throw Error(ErrorKind::Format, "safetensors: " + source_ + ": no tensor named '" + name + "'");
  return files_[it->second];
}

const TensorInfo& TensorDirectory::info(const std::string& name) const {
  return file_of(name).info(name);
}

Tensor TensorDirectory::load(const std::string& name, Device device) const {
  return file_of(name).load(name, device);
}

}  // namespace forge
