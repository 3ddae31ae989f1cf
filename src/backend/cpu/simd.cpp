#include "backend/cpu/simd.h"

#include <cstdlib>
#include <cstring>
#include <string>

#include "forge/error.h"

namespace forge::cpu {
namespace {

SimdLevel detect() {
  SimdLevel level = SimdLevel::Portable;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) level = SimdLevel::Avx2;
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
    level = SimdLevel::Avx512;
#endif
  if (const char* cap = std::getenv("FORGE_SIMD"); cap != nullptr && *cap != '\0') {
    SimdLevel want = level;
    if (std::strcmp(cap, "portable") == 0) {
      want = SimdLevel::Portable;
    } else if (std::strcmp(cap, "avx2") == 0) {
      want = SimdLevel::Avx2;
    } else if (std::strcmp(cap, "avx512") == 0) {
      want = SimdLevel::Avx512;
    } else {
      // A typo would otherwise run (and test) a level nobody asked for.
      throw Error(ErrorKind::Format,
                  std::string("FORGE_SIMD=") + cap + ": expected portable, avx2 or avx512");
    }
    if (static_cast<int>(want) < static_cast<int>(level)) level = want;
  }
  return level;
}

}  // namespace

SimdLevel simd_level() {
  static const SimdLevel level = detect();
  return level;
}

const char* simd_level_name(SimdLevel level) {
  switch (level) {
    case SimdLevel::Portable: return "portable";
    case SimdLevel::Avx2: return "avx2";
    case SimdLevel::Avx512: return "avx512";
  }
  return "?";
}

}  // namespace forge::cpu
