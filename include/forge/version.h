#pragma once
namespace forge {
constexpr const char* kVersion = "0.1.0";
}
