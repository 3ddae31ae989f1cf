// forge eval — placeholder until the command lands; it says so instead of pretending.
#include "cli/commands.h"
#include "forge/error.h"

namespace forge::cli {

void register_eval(CLI::App& app, Action& action) {
  CLI::App* cmd = app.add_subcommand("eval", "(not available yet)");
  cmd->allow_extras();
  cmd->callback([&action] {
    action = [] () -> int {
      throw Error(ErrorKind::Unsupported, "eval: not available in this build yet");
    };
  });
}

}  // namespace forge::cli
