// forge — the command-line entry point. Builds the app (app.cpp: the global options and one
// cmd_*.cpp per subcommand), applies the global options, and turns every failure into
// "error: <message>" on stderr + exit 1.
#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#ifdef __EMSCRIPTEN__
#include <emscripten.h>
#endif

#include "cli/app.h"
#include "forge/dist.h"
#include "forge/error.h"
#include "forge/threads.h"

namespace {

int report_error(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  return 1;
}

/// True if the command line itself holds --threads (else its value came from the environment).
bool threads_flag_given(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--threads" || arg.rfind("--threads=", 0) == 0) return true;
  }
  return false;
}

int run(int argc, char** argv) {
  CLI::App app{"forge: a small deep-learning engine (GPT-2 inference and training)", "forge"};
  int threads = 0;
  forge::cli::Action action;
  forge::cli::build_app(app, threads, action);

  try {
    app.parse(argc, argv);
    if (threads > 0) {
      forge::set_num_threads(threads);
    } else if (const int local = forge::dist::launcher_local_size(); local > 1) {
      // mpirun put several ranks on this host: each takes its share of the cores (as
      // torchrun sets OMP_NUM_THREADS), unless --threads or FORGE_NUM_THREADS says otherwise.
      forge::set_num_threads(std::max(1, forge::num_threads() / local));
    }
    if (!action) return report_error("no action for this subcommand (run 'forge --help')");
    const int rc = action();
    // A full disk or closed pipe must not pass for success.
    if (std::fflush(stdout) != 0) return report_error("writing the output failed");
    return rc;
  } catch (const CLI::ParseError& e) {
    // --help and --version arrive as "errors" with exit code 0; CLI11 prints them.
    if (e.get_exit_code() == 0) return app.exit(e);
    // CLI11 reports a misspelt subcommand as "A subcommand is required"; name it instead.
    const std::vector<std::string> rest = app.remaining();
    if (app.get_subcommands().empty() && !rest.empty() && !rest.front().empty()) {
      if (rest.front()[0] == '-')
        return report_error("unknown option '" + rest.front() + "' (run 'forge --help')");
      std::string known;
      for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
        known += (known.empty() ? "" : ", ") + sub->get_name();
      return report_error("unknown subcommand '" + rest.front() + "' (known: " + known + ")");
    }
    std::string message = e.what();
    // A bad FORGE_NUM_THREADS is reported under the option's name; say where it came from.
    if (message.rfind("--threads:", 0) == 0 && !threads_flag_given(argc, argv))
      message = "FORGE_NUM_THREADS" + message.substr(std::string("--threads").size());
    return report_error(message + " (run 'forge --help')");
  } catch (const forge::Error& e) {
    return report_error(e.what());
  } catch (const std::exception& e) {
    return report_error(std::string("unexpected failure: ") + e.what());
  } catch (...) {
    return report_error("unexpected failure of an unknown kind");
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int rc = run(argc, argv);
#ifdef __EMSCRIPTEN__
  // wasm with ASYNCIFY: a GPU read may unwind and resume main's stack, and a resumed main's
  // return value reaches nobody; the exit status is passed on explicitly.
  std::fflush(stdout);
  emscripten_force_exit(rc);
#endif
  return rc;
}
