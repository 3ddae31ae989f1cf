#include "cli/app.h"

#include <string>

#include "cli/args.h"
#include "forge/version.h"

namespace forge::cli {

void build_app(CLI::App& app, int& threads, Action& action) {
  app.set_version_flag("--version", std::string("forge ") + forge::kVersion,
                       "Print the version and exit");
  // 0: keep the pool's default (FORGE_NUM_THREADS or all hardware threads). The environment
  // variable goes through the same range check as the flag, so a bad FORGE_NUM_THREADS is an
  // error here instead of being silently ignored.
  app.add_option("--threads", threads,
                 "CPU worker threads, the calling thread included (default: all hardware "
                 "threads); accepted before or after the subcommand")
      ->envname("FORGE_NUM_THREADS")
      ->check(int_in_range(1, 1024));
  app.require_subcommand(1);

  register_devices(app, action);
  register_bench(app, action);
  register_generate(app, action);
  register_tokenize(app, action);
  register_eval(app, action);
  register_train(app, action);
  register_plot(app, action);
  register_quantize(app, action);
  register_serve(app, action);
  // Options a subcommand does not know (--threads) are tried on the main app, so global
  // options may follow the subcommand: `forge bench --op matmul ... --threads 2`.
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) sub->fallthrough();
}

}  // namespace forge::cli
