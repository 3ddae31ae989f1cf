// Argument checks shared by the CLI subcommands, so every bad value reads the same way:
// "error: --m: 'abc' is not an integer", "error: --m: 0 is outside [1, 2147483647]".
#pragma once

#include <CLI/CLI.hpp>
#include <charconv>
#include <cstdint>
#include <string>

namespace forge::cli {

/// A CLI11 validator accepting a base-10 integer in [lo, hi] (the whole string, no spaces).
inline CLI::Validator int_in_range(int64_t lo, int64_t hi) {
  const std::string range = "[" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  return CLI::Validator(
      [lo, hi, range](std::string& text) -> std::string {
        int64_t v = 0;
        const char* end = text.data() + text.size();
        const auto [ptr, ec] = std::from_chars(text.data(), end, v);
        if (ec == std::errc::result_out_of_range) return text + " is outside " + range;
        if (ec != std::errc() || ptr != end || text.empty())
          return "'" + text + "' is not an integer";
        if (v < lo || v > hi) return text + " is outside " + range;
        return {};
      },
      "in " + range);
}

}  // namespace forge::cli
