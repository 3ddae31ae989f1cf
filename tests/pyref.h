// Runs a Python reference script (Debian's /usr/bin/python3 with python3-torch) from a test:
// the script gets a JSON input file and writes a JSON output file. Tests skip when torch is
// not installed, except under CI (CI=true), where a missing reference is a failure.
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "ci.h"

namespace forge::test {

inline const char* python_path() { return "/usr/bin/python3"; }

inline bool torch_available() {
  static const bool ok =
      std::system("/usr/bin/python3 -c 'import torch' > /dev/null 2>&1") == 0;
  return ok;
}

/// Skips (or fails under CI) the current test when torch is missing.
#define FORGE_REQUIRE_TORCH()                                                             \
  do {                                                                                    \
    if (!::forge::test::torch_available())                                                \
      FORGE_SKIP_UNLESS_CI("python3-torch not installed (scripts/setup.sh installs it)"); \
  } while (0)

/// Runs tests/python/<script> with input JSON; returns its output JSON. Throws on failure.
inline nlohmann::json run_python(const std::string& script, const nlohmann::json& input) {
  const std::string dir = ::testing::TempDir();
  const std::string tag = std::to_string(reinterpret_cast<uintptr_t>(&input)) + "_" +
                          std::to_string(std::rand());
  const std::string in_path = dir + "/pyref_in_" + tag + ".json";
  const std::string out_path = dir + "/pyref_out_" + tag + ".json";
  { std::ofstream(in_path) << input.dump(); }
  const std::string cmd = std::string(python_path()) + " " FORGE_SOURCE_DIR "/tests/python/" +
                          script + " " + in_path + " " + out_path;
  const int rc = std::system(cmd.c_str());
  std::remove(in_path.c_str());
  if (rc != 0) throw std::runtime_error("python reference failed: " + cmd);
  std::ifstream f(out_path);
  std::stringstream ss;
  ss << f.rdbuf();
  std::remove(out_path.c_str());
  return nlohmann::json::parse(ss.str());
}

}  // namespace forge::test
