// forge serve's plain chat template (chat_template.h).
#include "serve/chat_template.h"

namespace forge::serve {
namespace {

std::string role_name(const std::string& role) {
  if (role == "system" || role == "developer") return "System";
  if (role == "user") return "User";
  if (role == "assistant") return "Assistant";
  return "Tool";
}

}  // namespace

std::string render_chat(const std::vector<ChatMessage>& messages) {
  std::string out;
  for (const ChatMessage& m : messages) out += role_name(m.role) + ": " + m.content + "\n";
  return out + "Assistant:";
}

std::vector<std::string> chat_stop_strings() { return {"\nUser:", "\nSystem:"}; }

}  // namespace forge::serve
