// forge's command line: the input's NUL-separated parts are the arguments after "forge",
// parsed by the same CLI11 app main.cpp builds (every subcommand, every numeric option's
// range check). The subcommand's action never runs here (it would train or write files);
// instead every argument also goes through the parsers the actions apply to option values:
// token-id lists (--prompt-ids, --ids) and device names (--device).
#include <CLI/CLI.hpp>

#include "cli/app.h"
#include "cli/id_list.h"
#include "forge/devices.h"
#include "harness_util.h"

using namespace forge;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const bool quiet = (fuzz::silence_stdout(), true);  // --help and --version print
  (void)quiet;
  std::vector<std::string> args = {"forge"};
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  while (args.size() < 64) {
    const size_t nul = rest.find('\0');
    args.emplace_back(rest.substr(0, nul));
    if (nul == std::string_view::npos) break;
    rest.remove_prefix(nul + 1);
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());

  // One app for the whole run (building it is most of an input's time): clear() resets what
  // the last parse counted and matched; the option values it wrote stay, and no check reads
  // them.
  static int threads = 0;
  static cli::Action action;
  static CLI::App app{"forge", "forge"};
  static const bool built = (cli::build_app(app, threads, action), true);
  (void)built;
  app.clear();
  fuzz::expect_only_forge_errors([&] {
    try {
      app.parse(static_cast<int>(argv.size()), argv.data());
    } catch (const CLI::ParseError&) {
      // main.cpp prints these as "error: ..." (or the help text) and exits
    }
  });
  for (size_t i = 1; i < args.size(); ++i) {
    fuzz::expect_only_forge_errors([&] { cli::parse_id_list(args[i], "fuzz", "--ids"); });
    fuzz::expect_only_forge_errors([&] { parse_device(args[i]); });
  }
  return 0;
}
