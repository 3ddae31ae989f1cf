#include "cli/id_list.h"

#include <charconv>
#include <string_view>

#include "forge/error.h"

namespace forge::cli {

std::vector<uint32_t> parse_id_list(const std::string& text, const char* command,
                                    const char* option) {
  std::vector<uint32_t> ids;
  size_t pos = 0;
  for (;;) {
    const size_t comma = text.find(',', pos);
    std::string_view item(text.data() + pos,
                          (comma == std::string::npos ? text.size() : comma) - pos);
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    uint32_t v = 0;
    const auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || ptr != item.data() + item.size())
      throw Error(ErrorKind::Format, std::string(command) + ": " + option + ": '" +
                                         std::string(item.substr(0, 40)) +
                                         "' is not a token id (expected e.g. 464,2068,7586)");
    ids.push_back(v);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return ids;
}

}  // namespace forge::cli
