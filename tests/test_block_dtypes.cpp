// Tensors of ggml's block dtypes (Q8_0, Q4_0: forge/dtype.h): bytes per block of 32, and
// shapes, views, row slices and transfers that keep whole blocks, on every device.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "forge/devices.h"
#include "forge/error.h"
#include "forge/ops.h"
#include "forge/safetensors.h"
#include "forge/tensor.h"

namespace forge::test {
namespace {

std::vector<uint8_t> pattern(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>((i * 37 + 11) % 251);
  return v;
}

template <typename F>
void expect_error(F&& f, ErrorKind kind, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error (expected " << needle << ")";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(BlockDTypes, BytesPerBlockAreGgmls) {
  EXPECT_EQ(dtype_block(DType::Q8_0), 32);
  EXPECT_EQ(dtype_block_bytes(DType::Q8_0), 34u);  // f16 scale + 32 int8
  EXPECT_EQ(dtype_block(DType::Q4_0), 32);
  EXPECT_EQ(dtype_block_bytes(DType::Q4_0), 18u);  // f16 scale + 16 bytes of nibbles
  EXPECT_EQ(dtype_block(DType::F16), 1);
  EXPECT_EQ(dtype_bytes(DType::Q8_0, 96), 102u);
  EXPECT_EQ(dtype_bytes(DType::F32, 5), 20u);
  EXPECT_STREQ(dtype_name(DType::Q4_0), "q4_0");
  expect_error([] { (void)dtype_bytes(DType::Q4_0, 40); }, ErrorKind::Shape, "whole blocks");
  expect_error([] { (void)dtype_size(DType::Q8_0); }, ErrorKind::DType, "blocks of 32");
}

TEST(BlockDTypes, ShapesViewsAndRowSlicesKeepWholeBlocks) {
  for (const DeviceInfo& info : list_devices()) {
    const Device dev = info.device;
    for (DType dt : {DType::Q8_0, DType::Q4_0}) {
      SCOPED_TRACE(dev.str() + " " + dtype_name(dt));
      const size_t bb = dtype_block_bytes(dt);
      const std::vector<uint8_t> bytes = pattern(4 * 2 * bb);  // [4, 64]: 2 blocks a row
      const Tensor t = Tensor::from_bytes(bytes.data(), bytes.size(), {4, 64}, dt, dev);
      EXPECT_EQ(t.nbytes(), 8 * bb);
      EXPECT_EQ(t.to_bytes(), bytes);
      // Rows 1..2: bytes [2 bb, 6 bb).
      const Tensor rows = t.narrow_rows(1, 2);
      EXPECT_EQ(rows.byte_offset(), 2 * bb);
      EXPECT_EQ(rows.nbytes(), 4 * bb);
      EXPECT_EQ(rows.to_bytes(), std::vector<uint8_t>(bytes.begin() + 2 * static_cast<long>(bb),
                                                      bytes.begin() + 6 * static_cast<long>(bb)));
      // Views with whole blocks in the last dimension; a copy to the CPU and back.
      EXPECT_EQ(t.reshape({8, 32}).to_bytes(), bytes);
      EXPECT_EQ(t.reshape({256}).narrow_rows(64, 96).to_bytes(),
                std::vector<uint8_t>(bytes.begin() + 2 * static_cast<long>(bb),
                                     bytes.begin() + 5 * static_cast<long>(bb)));
      EXPECT_EQ(rows.to(Device::cpu()).to(dev).to_bytes(), rows.to_bytes());
      Tensor dst = Tensor::zeros({2, 64}, dt, dev);
      dst.copy_from(rows);
      EXPECT_EQ(dst.to_bytes(), rows.to_bytes());
      // What would cut a block, and element access, are errors.
      expect_error([&] { (void)t.reshape({16, 16}); }, ErrorKind::Shape, "whole blocks of 32");
      expect_error(
          [&] {
            (void)Tensor::empty({3, 33}, dt, dev);
          },
          ErrorKind::Shape, "whole blocks of 32");
      expect_error([&] { (void)Tensor::zeros({}, dt, dev); }, ErrorKind::Shape, "whole blocks");
      expect_error([&] { (void)t.reshape({256}).narrow_rows(16, 32); }, ErrorKind::Shape,
                   "cut a block");
      expect_error([&] { (void)t.to_vector<float>(); }, ErrorKind::DType, "q");
      expect_error(
          [&] {
            (void)Tensor::from_bytes(bytes.data(), bytes.size() - 1, {4, 64}, dt, dev);
          },
          ErrorKind::Shape, "takes");
    }
  }
}

// Block dtypes are weights: matmul's b (stored [N, K], used with trans_b) and the embedding's
// table; every other op refuses them, and so does safetensors.
TEST(BlockDTypes, BlockWeightsOutsideMatmulAndEmbeddingAreRefused) {
  const std::vector<uint8_t> bytes = pattern(2 * 34);
  const Tensor w = Tensor::from_bytes(bytes.data(), bytes.size(), {2, 32}, DType::Q8_0);
  // Block weights are [N, K] and read transposed: untransposed is a Shape error.
  expect_error(
      [&] {
        (void)matmul(Tensor::zeros({3, 2}), w);
      },
      ErrorKind::Shape, "b of dtype q8_0 must be a 2-D [N, K] matrix used with trans_b");
  expect_error([&] { (void)layernorm(w, Tensor::zeros({32}), Tensor::zeros({32})); },
               ErrorKind::DType, "q8_0");
  // safetensors has no block dtypes: a clear refusal before anything is written.
  const std::string path = ::testing::TempDir() + "forge_block.safetensors";
  expect_error(
      [&] {
        save_safetensors(path, {{"w", w}}, {});
      },
      ErrorKind::DType, "safetensors has no dtype");
}

}  // namespace
}  // namespace forge::test
