// What a CI run demands of the suite: under CI=true (scripts/test.sh sets it) everything
// scripts/setup.sh and the fetch scripts install is there (lavapipe, python3-torch, the
// tokenizer files, the validation layer), so a test that would skip for want of one of them
// fails instead. Skips for what no setup can change (a CPU without AVX-512, a device that
// cannot capture graphs, an ASan build) stay skips, and say so.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>
#include <string>

namespace forge::test {

/// Backends compiled into this build (the generated list of CMake's backend blocks).
inline int built_in_backends() {
  int n = 0;
#define FORGE_BACKEND(name) ++n;
#include "forge_backends.inc"
#undef FORGE_BACKEND
  return n;
}

inline bool under_ci() {
  const char* ci = std::getenv("CI");
  return ci != nullptr && std::string(ci) == "true";
}

}  // namespace forge::test

/// Skips the current test because something a set-up machine has is missing here (`why`
/// streams like a gtest message) - or, under CI, fails it.
#define FORGE_SKIP_UNLESS_CI(why)                                              \
  do {                                                                         \
    std::ostringstream forge_why_;                                             \
    forge_why_ << why;                                                         \
    if (::forge::test::under_ci()) FAIL() << "under CI: " << forge_why_.str(); \
    GTEST_SKIP() << forge_why_.str();                                          \
  } while (0)

/// A device besides the CPU is missing. In a build with another backend that is a machine
/// not set up (CI fails: setup.sh installs what each backend needs to run here); a build with
/// the CPU alone (e.g. the ThreadSanitizer pass, FORGE_CPU_ONLY=ON) skips.
#define FORGE_SKIP_NO_DEVICE(why)                                          \
  do {                                                                     \
    if (::forge::test::built_in_backends() > 1) FORGE_SKIP_UNLESS_CI(why); \
    GTEST_SKIP() << why;                                                   \
  } while (0)
