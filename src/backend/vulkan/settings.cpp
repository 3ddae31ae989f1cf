// The Vulkan settings table: each setting's name, how its value is parsed and shown, and
// whether it may change between calls (settings.h lists them).
#include "backend/vulkan/settings.h"

#include <charconv>
#include <cstdlib>
#include <initializer_list>

#include "forge/error.h"

namespace forge::vk {
namespace {

[[noreturn]] void bad(const std::string& who, std::string_view value, const char* expected) {
  throw Error(ErrorKind::Format,
              "vulkan: " + who + "=" + std::string(value) + ": expected " + expected);
}

/// "auto" -> 0, else a count in [lo, hi].
uint64_t count_or_auto(const std::string& who, std::string_view v, uint64_t lo, uint64_t hi,
                       const char* expected) {
  if (v == "auto") return 0;
  uint64_t n = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || end != v.data() + v.size() || n < lo || n > hi) bad(who, v, expected);
  return n;
}

bool flag(const std::string& who, std::string_view v) {
  if (v == "0") return false;
  if (v == "1") return true;
  bad(who, v, "0 or 1");
}

std::string choice(const std::string& who, std::string_view v,
                   std::initializer_list<const char*> options, const char* expected) {
  for (const char* o : options)
    if (v == o) return o;
  bad(who, v, expected);
}

std::string count_text(uint64_t n) { return n == 0 ? "auto" : std::to_string(n); }

struct Entry {
  const char* name;
  const char* variable;
  bool per_call;
  void (*parse)(Settings&, const std::string& who, std::string_view value);
  std::string (*show)(const Settings&);
};

const Entry kEntries[] = {
    {"validation", "FORGE_VULKAN_VALIDATION", false,
     [](Settings& s, const std::string& w, std::string_view v) { s.validation = flag(w, v); },
     [](const Settings& s) { return std::string(s.validation ? "1" : "0"); }},
    {"max_bindings", "FORGE_VULKAN_MAX_BINDINGS", false,
     [](Settings& s, const std::string& w, std::string_view v) {
       s.max_bindings = static_cast<uint32_t>(count_or_auto(w, v, 4, 11, "auto or 4..11"));
     },
     [](const Settings& s) { return count_text(s.max_bindings); }},
    {"push_descriptors", "FORGE_VULKAN_PUSH_DESCRIPTORS", false,
     [](Settings& s, const std::string& w, std::string_view v) {
       s.push_descriptors = choice(w, v, {"auto", "0"}, "auto or 0") == "auto";
     },
     [](const Settings& s) { return std::string(s.push_descriptors ? "auto" : "0"); }},
    {"staging", "FORGE_VULKAN_STAGING", false,
     [](Settings& s, const std::string& w, std::string_view v) { s.staging = flag(w, v); },
     [](const Settings& s) { return std::string(s.staging ? "1" : "0"); }},
    {"spin_us", "FORGE_VULKAN_SPIN_US", false,
     [](Settings& s, const std::string& w, std::string_view v) {
       // "0" is a value here (never poll), so auto is parsed apart.
       s.spin_us =
           v == "auto"
               ? -1
               : static_cast<int64_t>(count_or_auto(w, v, 0, 1000000, "auto or 0..1000000"));
     },
     [](const Settings& s) {
       return s.spin_us < 0 ? std::string("auto") : std::to_string(s.spin_us);
     }},
    {"chain", "FORGE_VULKAN_CHAIN", true,
     [](Settings& s, const std::string& w, std::string_view v) {
       const std::string c = choice(w, v, {"auto", "0", "1", "solo"}, "auto, 0, 1 or solo");
       s.chain = c == "auto" ? Settings::Chain::automatic
                 : c == "0"  ? Settings::Chain::off
                 : c == "1"  ? Settings::Chain::on
                             : Settings::Chain::solo;
     },
     [](const Settings& s) {
       switch (s.chain) {
         case Settings::Chain::off: return std::string("0");
         case Settings::Chain::on: return std::string("1");
         case Settings::Chain::solo: return std::string("solo");
         default: return std::string("auto");
       }
     }},
    {"matmul_tile", "FORGE_VULKAN_MATMUL_TILE", true,
     [](Settings& s, const std::string& w, std::string_view v) {
       s.matmul_tile = choice(w, v, {"auto", "128x128", "64x128", "128x64", "64x64"},
                              "auto, 128x128, 64x128, 128x64 or 64x64");
     },
     [](const Settings& s) { return s.matmul_tile; }},
    {"split_k", "FORGE_VULKAN_SPLIT_K", true,
     [](Settings& s, const std::string& w, std::string_view v) {
       s.split_k = count_or_auto(w, v, 1, 65535, "auto or a count of splits in 1..65535");
     },
     [](const Settings& s) { return count_text(s.split_k); }},
    {"attention_tile", "FORGE_VULKAN_ATTENTION_TILE", true,
     [](Settings& s, const std::string& w, std::string_view v) {
       s.attention_tile = choice(w, v, {"auto", "small", "big"}, "auto, small or big");
     },
     [](const Settings& s) { return s.attention_tile; }},
    {"attention_splits", "FORGE_VULKAN_ATTENTION_SPLITS", true,
     [](Settings& s, const std::string& w, std::string_view v) {
       s.attention_splits =
           static_cast<int64_t>(count_or_auto(w, v, 1, 65535, "auto or a count in 1..65535"));
     },
     [](const Settings& s) { return count_text(static_cast<uint64_t>(s.attention_splits)); }},
    {"window_bytes", "FORGE_VULKAN_WINDOW_BYTES", true,
     [](Settings& s, const std::string& w, std::string_view v) {
       s.window_bytes = count_or_auto(w, v, 4, uint64_t{1} << 32, "auto or a byte count >= 4");
     },
     [](const Settings& s) { return count_text(s.window_bytes); }},
};

const Entry& entry(std::string_view name) {
  for (const Entry& e : kEntries)
    if (name == e.name) return e;
  std::string names;
  for (const Entry& e : kEntries) names += (names.empty() ? "" : ", ") + std::string(e.name);
  throw Error(ErrorKind::Unsupported,
              "vulkan: no setting \"" + std::string(name) + "\" (settings: " + names + ")");
}

}  // namespace

Settings Settings::from_environment() {
  Settings s;
  for (const Entry& e : kEntries)
    if (const char* v = std::getenv(e.variable); v && *v) e.parse(s, e.variable, v);
  return s;
}

void Settings::set(std::string_view name, std::string_view value) {
  const Entry& e = entry(name);
  if (!e.per_call)
    throw Error(ErrorKind::Unsupported, "vulkan: setting \"" + std::string(name) +
                                            "\" is read only when the device is created (set " +
                                            e.variable + " before the first use)");
  e.parse(*this, "setting " + std::string(name), value);
}

std::string Settings::get(std::string_view name) const { return entry(name).show(*this); }

std::vector<std::string> Settings::names() {
  std::vector<std::string> out;
  for (const Entry& e : kEntries) out.emplace_back(e.name);
  return out;
}

Settings& settings() {
  // Read once (a bad variable fails the first use, and every later one: a static whose
  // initialization threw is initialized again at the next call).
  static Settings s = Settings::from_environment();
  return s;
}

}  // namespace forge::vk
