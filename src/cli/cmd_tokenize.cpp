// forge tokenize — placeholder until the command lands; it says so instead of pretending.
#include "cli/commands.h"
#include "forge/error.h"

namespace forge::cli {

void register_tokenize(CLI::App& app, Action& action) {
  CLI::App* cmd = app.add_subcommand("tokenize", "(not available yet)");
  cmd->allow_extras();
  cmd->callback([&action] {
    action = [] () -> int {
      throw Error(ErrorKind::Unsupported, "tokenize: not available in this build yet");
    };
  });
}

}  // namespace forge::cli
