// Helpers shared by the subcommands that take token ids or model folders.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace forge::cli {

/// "1,2,3" (spaces around ids allowed) -> ids. Error(Format) "<command>: <option>: '<item>' is
/// not a token id (expected e.g. 464,2068,7586)" for anything else.
std::vector<uint32_t> parse_id_list(const std::string& text, const char* command,
                                    const char* option);

}  // namespace forge::cli
