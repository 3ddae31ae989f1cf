// forge::bit_cast: std::bit_cast for every toolchain forge builds with (emscripten 3.1.6's
// libc++ 13 has no std::bit_cast; GCC and clang both have the builtin it is made of).
#pragma once

#include <type_traits>

namespace forge {

template <typename To, typename From>
constexpr To bit_cast(const From& from) noexcept {
  static_assert(sizeof(To) == sizeof(From), "bit_cast: sizes differ");
  static_assert(std::is_trivially_copyable_v<To> && std::is_trivially_copyable_v<From>,
                "bit_cast: types must be trivially copyable");
  return __builtin_bit_cast(To, from);
}

}  // namespace forge
