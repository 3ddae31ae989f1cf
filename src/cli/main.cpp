// forge — the command-line entry point. Wires the subcommands (one cmd_*.cpp each), applies
// the global options, and turns every failure into "error: <message>" on stderr + exit 1.
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#ifdef __EMSCRIPTEN__
#include <emscripten.h>
#endif

#include "cli/args.h"
#include "cli/commands.h"
#include "forge/error.h"
#include "forge/threads.h"
#include "forge/version.h"

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
  app.set_version_flag("--version", std::string("forge ") + forge::kVersion,
                       "Print the version and exit");
  int threads = 0;  // 0: keep the pool's default (FORGE_NUM_THREADS or all hardware threads)
  // The environment variable goes through the same range check as the flag, so a bad
  // FORGE_NUM_THREADS is an error here instead of being silently ignored.
  app.add_option("--threads", threads,
                 "CPU worker threads, the calling thread included (default: all hardware "
                 "threads); accepted before or after the subcommand")
      ->envname("FORGE_NUM_THREADS")
      ->check(forge::cli::int_in_range(1, 1024));
  app.require_subcommand(1);

  forge::cli::Action action;
  forge::cli::register_devices(app, action);
  forge::cli::register_bench(app, action);
  forge::cli::register_generate(app, action);
  forge::cli::register_tokenize(app, action);
  forge::cli::register_eval(app, action);
  forge::cli::register_train(app, action);
  forge::cli::register_plot(app, action);
  forge::cli::register_quantize(app, action);
  // Options a subcommand does not know (--threads) are tried on the main app, so global
  // options may follow the subcommand: `forge bench --op matmul ... --threads 2`.
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) sub->fallthrough();

  try {
    app.parse(argc, argv);
    if (threads > 0) forge::set_num_threads(threads);
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
