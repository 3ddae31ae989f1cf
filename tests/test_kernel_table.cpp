// The op table and the kernel tables (forge/op_table.def, forge/backend.h): kernels are
// looked up by op and input dtypes, so a kernel for new weight dtypes plugs in by
// registering; a combination nobody registered is Error(Unsupported); fused ops a backend
// lacks run as their composition.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "forge/backend.h"
#include "forge/error.h"
#include "forge/ops.h"
#include "io/half.h"

namespace forge::test {
namespace {

// Host memory under another device name: a backend with nothing but what a test registers.
class BytesStorage final : public Storage {
 public:
  BytesStorage(Device d, size_t bytes, bool zero) : Storage(d, bytes), data_(bytes + 64) {
    if (!zero) std::memset(data_.data(), 0x7f, data_.size());  // poison: kernels must write
  }
  void* host_ptr() override { return data_.data(); }

 private:
  std::vector<unsigned char> data_;
};

unsigned char* bytes(const Storage& s) {
  return static_cast<unsigned char*>(const_cast<Storage&>(s).host_ptr());
}

class TableTestBackend final : public Backend {
 public:
  explicit TableTestBackend(Device d) : device_(d) {}
  DeviceInfo info() const override {
    DeviceInfo i;
    i.device = device_;
    i.name = "kernel table test backend";
    i.kind = "test";
    return i;
  }
  std::shared_ptr<Storage> allocate(size_t n) override {
    return std::make_shared<BytesStorage>(device_, n, false);
  }
  std::shared_ptr<Storage> allocate_zeros(size_t n) override {
    return std::make_shared<BytesStorage>(device_, n, true);
  }
  void write(Storage& dst, size_t off, const void* src, size_t n) override {
    std::memcpy(bytes(dst) + off, src, n);
  }
  void read(const Storage& src, size_t off, void* dst, size_t n) override {
    std::memcpy(dst, bytes(src) + off, n);
  }
  void copy(const Storage& src, size_t so, Storage& dst, size_t d_off, size_t n) override {
    std::memmove(bytes(dst) + d_off, bytes(src) + so, n);
  }
  int f16_matmuls = 0;
  int f16_embeddings = 0;

 private:
  Device device_;
};

TableTestBackend& table_backend() {
  static TableTestBackend* b = [] {
    auto* backend = new TableTestBackend(Device("tabletest", 0));
    BackendRegistration r;
    r.name = "tabletest";
    r.open = [backend](int) -> Backend& { return *backend; };
    // Not listed: the device lists' tests (every device of list_devices()) run every op.
    r.devices = [] { return std::vector<DeviceInfo>{}; };
    register_backend(r);
    return backend;
  }();
  return *b;
}

// out[M, N] = a[M, K] @ b[N, K]^T with b in f16 (weights of other dtypes are stored [out,
// in]): each weight converted to f32, then an f32 product.
void matmul_f32_f16(Backend& be, const OpCall& c) {
  static_cast<TableTestBackend&>(be).f16_matmuls++;
  const Tensor &a = c.in(0), &b = c.in(1);
  Tensor& out = c.out(0);
  const int64_t M = a.dim(0), K = a.dim(1), N = b.dim(0);
  const auto* pa = reinterpret_cast<const float*>(bytes(*a.storage())) + a.offset();
  const auto* pb = reinterpret_cast<const uint16_t*>(bytes(*b.storage())) + b.offset();
  auto* po = reinterpret_cast<float*>(bytes(*out.storage())) + out.offset();
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      float s = 0;
      for (int64_t k = 0; k < K; ++k) s += pa[m * K + k] * io::f16_to_f32(pb[n * K + k]);
      po[m * N + n] = c.attrs.accumulate ? po[m * N + n] + s : s;
    }
}

// out[i, :] = table[ids[i], :] with an f16 table, each value widened to f32: the tied LM
// head's table gathered through the same dtype dispatch as its product.
void embedding_u32_f16(Backend& be, const OpCall& c) {
  static_cast<TableTestBackend&>(be).f16_embeddings++;
  const Tensor &ids = c.in(0), &table = c.in(1);
  Tensor& out = c.out(0);
  const int64_t C = table.dim(1);
  const auto* pi = reinterpret_cast<const uint32_t*>(bytes(*ids.storage())) + ids.offset();
  const auto* pt = reinterpret_cast<const uint16_t*>(bytes(*table.storage())) + table.offset();
  auto* po = reinterpret_cast<float*>(bytes(*out.storage())) + out.offset();
  for (int64_t i = 0; i < ids.numel(); ++i)
    for (int64_t j = 0; j < C; ++j) po[i * C + j] = io::f16_to_f32(pt[pi[i] * C + j]);
}

// f16 bits of a normal f32 that f16 holds exactly (checked by converting back).
uint16_t exact_f16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  const uint32_t exp = (u >> 23) & 0xffu;
  const auto h = x == 0.0f ? static_cast<uint16_t>(u >> 16)
                           : static_cast<uint16_t>(((u >> 16) & 0x8000u) | ((exp - 112u) << 10) |
                                                   ((u >> 13) & 0x3ffu));
  EXPECT_EQ(io::f16_to_f32(h), x);
  return h;
}

Tensor f16_tensor(const std::vector<float>& v, const Shape& shape, Device d) {
  Tensor t = Tensor::empty(shape, DType::F16, d);
  std::vector<uint16_t> h;
  for (float x : v) h.push_back(exact_f16(x));
  std::memcpy(t.storage()->host_ptr(), h.data(), h.size() * 2);
  return t;
}

TEST(KernelTable, AKernelForF16WeightsIsPickedByTheirDtype) {
  TableTestBackend& be = table_backend();
  const Device d("tabletest", 0);
  const DTypeKey f16_key = dtype_key({DType::F32, DType::F16, DType::F32});
  be.add_kernel(Op::matmul, f16_key, matmul_f32_f16);
  EXPECT_TRUE(be.supports(Op::matmul, f16_key));
  EXPECT_FALSE(be.supports(Op::matmul));  // no f32 kernel registered here
  EXPECT_FALSE(be.supports(Op::matmul, dtype_key({DType::F32, DType::BF16, DType::F32})));

  // Values exact in f16 (multiples of 1/8 up to 2), so float64 gives the exact result.
  const std::vector<float> av = {0.5f, -1.0f, 2.0f, 0.25f, 1.5f, -0.125f};  // [2, 3]
  const std::vector<float> bv = {1.0f, 0.5f, -2.0f, 0.75f, 1.25f, -0.375f, 0.125f, 1.75f};
  const Tensor a = Tensor::from_vector(av, {2, 3}, d);
  const Tensor b = f16_tensor(std::vector<float>(bv.begin(), bv.begin() + 6), {2, 3}, d);  // [N, K]
  const Tensor y = matmul(a, b, {.trans_b = true});
  EXPECT_EQ(be.f16_matmuls, 1);
  const std::vector<float> got = y.to_vector<float>();
  for (int m = 0; m < 2; ++m)
    for (int n = 0; n < 2; ++n) {
      double want = 0;
      for (int k = 0; k < 3; ++k) want += static_cast<double>(av[m * 3 + k]) * bv[n * 3 + k];
      EXPECT_EQ(got[m * 2 + n], static_cast<float>(want)) << m << "," << n;
    }

  // The same product with f32 weights: nobody registered it on this backend.
  try {
    matmul(a, Tensor::from_vector(std::vector<float>(6, 1.0f), {3, 2}, d));
    ADD_FAILURE() << "no error for an unregistered (f32, f32) matmul";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_NE(
        std::string(e.what()).find("matmul: device tabletest:0 has no kernel for (f32, f32, f32)"),
        std::string::npos)
        << e.what();
  }
  EXPECT_EQ(be.f16_matmuls, 1);
}

TEST(KernelTable, AnF16EmbeddingIsPickedByItsTablesDtype) {
  TableTestBackend& be = table_backend();
  const Device d("tabletest", 0);
  be.add_kernel(Op::embedding, dtype_key({DType::U32, DType::F16}), embedding_u32_f16);
  const std::vector<float> tv = {0.5f, -1.0f, 2.0f, 0.25f, 1.5f, -0.125f};  // [3, 2], exact
  const Tensor table = f16_tensor(tv, {3, 2}, d);
  const Tensor ids = Tensor::from_vector(std::vector<uint32_t>{2, 0, 2}, {3});
  const std::vector<float> got = embedding(ids, table).to_vector<float>();
  EXPECT_EQ(be.f16_embeddings, 1);
  EXPECT_EQ(got, (std::vector<float>{1.5f, -0.125f, 0.5f, -1.0f, 1.5f, -0.125f}));
  // An f32 table: nobody registered that here.
  try {
    embedding(ids, Tensor::from_vector(tv, {3, 2}, d));
    ADD_FAILURE() << "no error for an unregistered (u32, f32) embedding";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_NE(std::string(e.what()).find("(u32, f32)"), std::string::npos) << e.what();
  }
  EXPECT_EQ(be.f16_embeddings, 1);
}

TEST(KernelTable, WeightsOfOtherDtypesAreStoredOutByIn) {
  // f16 / bf16 / block weights are [N, K] matrices used with trans_b: anything else is a
  // Shape error at validation, before any kernel is looked up.
  const Tensor a = Tensor::from_vector(std::vector<float>(6, 1.0f), {2, 3});
  const Tensor b = f16_tensor(std::vector<float>(6, 1.0f), {3, 2}, Device::cpu());
  try {
    matmul(a, b);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Shape);
    EXPECT_NE(std::string(e.what()).find(
                  "matmul: b of dtype f16 must be a 2-D [N, K] matrix used with trans_b, got "
                  "[3, 2] without trans_b"),
              std::string::npos)
        << e.what();
  }
  // A dtype the table does not accept for b at all is a DType error at validation.
  try {
    matmul(a, Tensor::from_vector(std::vector<uint32_t>(6, 1u), {3, 2}));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::DType);
    EXPECT_NE(
        std::string(e.what()).find("matmul: b must be f32 or f16 or bf16 or q8_0 or q4_0, got u32"),
        std::string::npos)
        << e.what();
  }
}

TEST(KernelTable, EveryBackendHasEveryOpOfTheTable) {
  // The CPU: every op (fused ones through their composition). Other backends may lack one
  // only where forge/backend.h's supports() documents it (e.g. attention_at on a
  // GPU binding too few buffers), which the op harness checks case by case.
  Backend& cpu = backend_for(Device::cpu());
  for (const OpInfo& op : op_table()) {
    EXPECT_TRUE(cpu.supports(op.op)) << op.name;
    if (op.kind != OpKind::fused) {
      EXPECT_NE(cpu.find_kernel(op.op, table_key(op.op)), nullptr) << op.name;
    }
  }
}

TEST(KernelTable, TheTableParses) {
  const OpInfo& mm = op_info(Op::matmul);
  EXPECT_EQ(mm.name, "matmul");
  ASSERT_EQ(mm.inputs.size(), 3u);
  EXPECT_EQ(mm.inputs[1].name, "b");
  EXPECT_EQ(mm.inputs[1].accepted.size(), 5u);
  EXPECT_TRUE(mm.inputs[2].optional);
  EXPECT_TRUE(mm.outputs[0].read);  // +out: matmul_add_ accumulates
  EXPECT_EQ(op_named("adamw"), Op::adamw);
  EXPECT_EQ(op_of_function("scale_"), Op::scale);
  EXPECT_THROW(op_named("nosuch"), Error);
  EXPECT_EQ(key_str(Op::matmul, table_key(Op::matmul)), "(f32, f32, f32)");
  EXPECT_THROW(backend_for(Device::cpu())
                   .add_kernel(
                       Op::add, [](Backend&, const OpCall&) {},
                       [](const Backend&, const OpCall&) { return true; }),
               Error);  // only fused ops may decline calls
}

}  // namespace
}  // namespace forge::test
