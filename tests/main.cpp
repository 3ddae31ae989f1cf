// forge_tests' main: GoogleTest's, except that a run whose filter selects no test fails
// (a ctest entry whose --gtest_filter has gone stale would otherwise pass having run
// nothing).
#include <gtest/gtest.h>

#include <cstdio>
#ifdef __EMSCRIPTEN__
#include <emscripten.h>
#endif

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  if (GTEST_FLAG_GET(list_tests)) return rc;
  if (::testing::UnitTest::GetInstance()->test_to_run_count() == 0) {
    std::fprintf(stderr, "error: no test matches --gtest_filter=%s\n",
                 GTEST_FLAG_GET(filter).c_str());
    return 1;
  }
#ifdef __EMSCRIPTEN__
  // wasm with ASYNCIFY: main's stack may have been unwound and resumed, and a resumed main's
  // return value reaches nobody; the exit status is passed on explicitly.
  emscripten_force_exit(rc);
#endif
  return rc;
}
