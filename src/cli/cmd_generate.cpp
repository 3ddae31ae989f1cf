// forge generate — placeholder until the command lands; it says so instead of pretending.
#include "cli/commands.h"
#include "forge/error.h"

namespace forge::cli {

void register_generate(CLI::App& app, Action& action) {
  CLI::App* cmd = app.add_subcommand("generate", "(not available yet)");
  cmd->allow_extras();
  cmd->callback([&action] {
    action = [] () -> int {
      throw Error(ErrorKind::Unsupported, "generate: not available in this build yet");
    };
  });
}

}  // namespace forge::cli
