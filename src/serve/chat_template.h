// forge serve's chat template. GPT-2 has no chat format of its own, so chat requests are
// rendered as a plain transcript that a base model continues naturally:
//
//   System: You are terse.\n
//   User: Hi!\n
//   Assistant:
//
// Each message is "<Role>: <content>\n" (roles capitalized; developer reads as System, tool
// as Tool), and the prompt ends with "Assistant:", which the model completes. Generation
// also stops where the model starts the next turn: chat_stop_strings() are added to the
// request's own stop strings.
#pragma once

#include <string>
#include <vector>

#include "serve/request.h"

namespace forge::serve {

std::string render_chat(const std::vector<ChatMessage>& messages);
/// "\nUser:", "\nSystem:" (the turns a transcript continues with).
std::vector<std::string> chat_stop_strings();

}  // namespace forge::serve
