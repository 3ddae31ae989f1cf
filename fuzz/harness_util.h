// What every libFuzzer harness of fuzz/ shares: a scratch folder on tmpfs for the files the
// harness hands to forge (forge reads paths, as the CLI does), splitting one input into the
// several files of a layout, and the one rule every harness checks: forge may throw
// forge::Error and nothing else.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "forge/gpt2.h"

namespace forge::fuzz {

/// The model the model-reading harnesses load and make_seeds.cpp saves: 1 layer, 2 heads,
/// 8 wide, 8 positions, 16 tokens (files of a few KiB, so that mutations stay fast).
gpt2::Config small_model_config();

/// This process's scratch folder (under $FORGE_FUZZ_TMP, else /dev/shm, else /tmp), made on
/// the first call and removed at exit.
const std::string& scratch_dir();

/// Writes `bytes` to scratch_dir()/name (replacing it) and returns the path.
std::string write_scratch(const std::string& name, std::string_view bytes);
std::string write_scratch(const std::string& name, const uint8_t* data, size_t size);

/// The parts of an input that holds several files: separated by kPartSeparator (a line of
/// its own in the seeds). Always `count` parts; missing ones are empty, and the last one
/// takes the rest, separators included.
inline constexpr std::string_view kPartSeparator = "\n=====forge-fuzz-part=====\n";
std::vector<std::string_view> split_parts(const uint8_t* data, size_t size, size_t count);

/// Runs `fn`. A forge::Error is the expected answer to bad input and is swallowed; any other
/// exception (std::bad_alloc, nlohmann::json's, std::out_of_range, ...) means a check is
/// missing, and aborts with its message so that libFuzzer records the input as a crash.
template <class Fn>
void expect_only_forge_errors(Fn&& fn);

/// Aborts with `what` (a harness's own consistency check failed).
[[noreturn]] void fail(const std::string& what);

/// Quiets forge's own stdout/stderr chatter (the CLI harness parses --help) by pointing
/// stdout at /dev/null; libFuzzer reports on stderr.
void silence_stdout();

}  // namespace forge::fuzz

#include "harness_util_impl.h"
