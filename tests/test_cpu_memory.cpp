// The CPU allocator's cache of large blocks (src/backend/cpu/host_memory.h): recycled
// blocks must behave exactly like fresh ones (alignment, zeroing, no aliasing).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "backend/cpu/host_memory.h"
#include "forge/forge.h"

namespace {

using forge::DType;
using forge::Tensor;

constexpr int64_t kLargeFloats = int64_t{3} << 20;  // 12 MiB: a "large" block

#if defined(__SANITIZE_ADDRESS__)
#define FORGE_SKIP_UNDER_ASAN() GTEST_SKIP() << "ASan builds allocate every block with malloc"
#else
#define FORGE_SKIP_UNDER_ASAN() (void)0
#endif

TEST(CpuMemory, LargeBlocksAreRecycledAndStayAligned) {
  FORGE_SKIP_UNDER_ASAN();
  forge::cpu::host_trim();
  const void* first = nullptr;
  {
    Tensor t = Tensor::empty({kLargeFloats}, DType::F32);
    first = t.data<float>();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(first) % (2u << 20), 0u) << "large blocks start on 2 MiB";
  }
  EXPECT_GE(forge::cpu::host_cached_bytes(), static_cast<size_t>(kLargeFloats) * 4);
  Tensor again = Tensor::empty({kLargeFloats}, DType::F32);
  EXPECT_EQ(again.data<float>(), first) << "a freed block of the same size is reused";
  EXPECT_EQ(forge::cpu::host_cached_bytes(), 0u);
  // A second live tensor of that size cannot share the block.
  Tensor other = Tensor::empty({kLargeFloats}, DType::F32);
  EXPECT_NE(other.data<float>(), again.data<float>());
}

TEST(CpuMemory, ZerosFromARecycledBlockAreZero) {
  FORGE_SKIP_UNDER_ASAN();
  forge::cpu::host_trim();
  {
    Tensor dirty = Tensor::full({kLargeFloats}, 3.5f);
    ASSERT_EQ(dirty.to_vector<float>()[12345], 3.5f);
  }
  ASSERT_GT(forge::cpu::host_cached_bytes(), 0u);
  const Tensor z = Tensor::zeros({kLargeFloats});
  const std::vector<float> v = z.to_vector<float>();
  size_t nonzero = 0;
  for (float x : v) nonzero += x != 0.0f;
  EXPECT_EQ(nonzero, 0u);
}

TEST(CpuMemory, TrimReleasesTheCache) {
  FORGE_SKIP_UNDER_ASAN();
  { Tensor t = Tensor::empty({kLargeFloats + 17}, DType::F32); }
  EXPECT_GT(forge::cpu::host_cached_bytes(), 0u);
  forge::cpu::host_trim();
  EXPECT_EQ(forge::cpu::host_cached_bytes(), 0u);
}

TEST(CpuMemory, SmallAndOddSizesRoundTrip) {
  for (int64_t n :
       {int64_t{1}, int64_t{17}, int64_t{1} << 20, (int64_t{1} << 20) + 3, kLargeFloats + 1}) {
    std::vector<float> data(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) data[static_cast<size_t>(i)] = static_cast<float>(i % 1000);
    const Tensor t = Tensor::from_vector(data, {n});
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data<float>()) % 64, 0u);
    EXPECT_EQ(t.to_vector<float>(), data) << "n = " << n;
  }
}

}  // namespace
