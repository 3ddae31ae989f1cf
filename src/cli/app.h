// forge's whole command line as one CLI11 app: what main.cpp parses and runs, and what the
// fuzz harness of the command line (fuzz/fuzz_cli_args.cpp) parses.
#pragma once

#include <CLI/CLI.hpp>

#include "cli/commands.h"

namespace forge::cli {

/// Adds the global options (--version; --threads, or FORGE_NUM_THREADS, into `threads`) and
/// every subcommand to `app`. After app.parse(), `action` holds the chosen subcommand's
/// action. Both references must outlive `app`.
void build_app(CLI::App& app, int& threads, Action& action);

}  // namespace forge::cli
