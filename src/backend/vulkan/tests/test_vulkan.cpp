// The Vulkan backend beyond the generic op harness (which runs every op case on every
// Vulkan device: tests/test_ops_reference.cpp): device discovery and errors, batching (one
// submit per readback), the buffer pool, tensor views at unaligned offsets, validation
// layers, settings, windows of large bindings, and GPT-2 with tables beyond one binding.
// The backend-independent end-to-end tests (greedy tokens, eval, replays, training) run on
// every device in tests/test_device_e2e.cpp. Every test skips, naming the reason, when the
// build or the machine has no Vulkan device.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "backend/vulkan/settings.h"
#include "backend/vulkan/vulkan_backend.h"
#include "ci.h"
#include "cli_runner.h"
#include "device_test_util.h"
#include "forge/data.h"
#include "forge/forge.h"
#include "forge/generate.h"
#include "forge/gpt2.h"
#include "forge/train.h"
#include "scoped_env.h"
#include "scoped_setting.h"

namespace forge::test {
namespace {

/// The first Vulkan device of list_devices(), or nothing.
bool first_vulkan(Device& out, std::string& why) {
  for (const DeviceInfo& d : list_devices())
    if (d.device.backend() == "vulkan") {
      out = d.device;
      return true;
    }
  why = "no Vulkan device on this machine (install mesa-vulkan-drivers for lavapipe)";
  return false;
}

class Vulkan : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!first_vulkan(dev_, why)) FORGE_SKIP_NO_DEVICE(why);
  }
  Device dev_;
};

vk::Context& context_of(Device d) {
  return dynamic_cast<vk::VulkanBackend&>(backend_for(d)).context();
}

std::vector<float> ramp(size_t n, float scale = 0.01f) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = std::sin(static_cast<float>(i) * 0.37f) * scale * 100;
  return v;
}

/// The bound of one output in expect_gpu_matches_cpu: abs + rel * |cpu value|.
struct Bound {
  double abs = 0.0;
  double rel = 0.0;
};

// run(device) computes a list of outputs; each must agree between `gpu` and the CPU within
// its bound (one per output), or all within `tol`.
void expect_gpu_matches_cpu(const std::function<std::vector<std::vector<float>>(Device)>& run,
                            Device gpu, const std::vector<Bound>& bounds) {
  const auto want = run(Device::cpu());
  const auto got = run(gpu);
  ASSERT_EQ(want.size(), got.size());
  ASSERT_EQ(bounds.size(), want.size()) << "one bound per output";
  for (size_t i = 0; i < want.size(); ++i)
    expect_near(got[i], want[i], bounds[i].abs, "output " + std::to_string(i), bounds[i].rel);
}

void expect_gpu_matches_cpu(const std::function<std::vector<std::vector<float>>(Device)>& run,
                            Device gpu, double tol) {
  const size_t outputs = run(Device::cpu()).size();
  expect_gpu_matches_cpu(run, gpu, std::vector<Bound>(outputs, Bound{tol, 0.0}));
}

TEST_F(Vulkan, DeviceInfoReportsLimits) {
  const DeviceInfo info = backend_for(dev_).info();
  EXPECT_EQ(info.device, dev_);
  EXPECT_FALSE(info.name.empty());
  EXPECT_GT(info.max_binding_bytes, 0u);
  bool range = false, alignment = false, heap = false;
  for (const auto& [k, v] : info.limits) {
    range |= k == "max storage buffer range";
    alignment |= k == "storage offset alignment";
    heap |= k.rfind("memory heap", 0) == 0;
  }
  EXPECT_TRUE(range && alignment && heap);
  // "vulkan" without an index names an existing device.
  const Device d = parse_device("vulkan");
  EXPECT_EQ(d.backend(), "vulkan");
  EXPECT_GE(d.index, 0);
  EXPECT_NO_THROW(backend_for(d));
}

TEST_F(Vulkan, BadDeviceIndexAndHugeAllocationAreErrors) {
  try {
    backend_for(Device("vulkan", 4000));
    ADD_FAILURE() << "no error for vulkan:4000";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Device);
    EXPECT_NE(std::string(e.what()).find("Vulkan device(s)"), std::string::npos) << e.what();
  }
  // 1 TiB: more than any heap. A clean error, and the device keeps working.
  try {
    Tensor t = Tensor::empty({int64_t{1} << 38}, DType::F32, dev_);
    ADD_FAILURE() << "no error allocating " << t.str();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Backend);
    EXPECT_NE(std::string(e.what()).find("out of device memory"), std::string::npos) << e.what();
  }
  // A tensor larger than one binding: the flat kernels bind it in windows (scale here:
  // the same values on both sides of the window's edge); a kernel without windows
  // (dropout, whose masks hash the element index) is an Unsupported error naming the limit.
  const uint64_t limit = backend_for(dev_).info().max_binding_bytes;
  if (limit > 0 && limit < (uint64_t{1} << 30)) {
    const int64_t n = static_cast<int64_t>(limit / 4 + 64);
    const Tensor big = Tensor::full({n}, 1.5f, dev_);
    const std::vector<float> y = scale(big, 2.0f).to_vector<float>();
    ASSERT_EQ(y.size(), static_cast<size_t>(n));
    size_t wrong = 0;
    for (float v : y) wrong += v != 3.0f;
    EXPECT_EQ(wrong, 0u) << "of " << n << " elements";
    try {
      Tensor d = dropout(big, 0.5f, 1);
      ADD_FAILURE() << "no error for dropout of " << big.str();
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
      EXPECT_NE(std::string(e.what()).find("maxStorageBufferRange"), std::string::npos) << e.what();
    }
  }
  const Tensor x = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3}, dev_);
  EXPECT_EQ(scale(x, 2.0f).to_vector<float>(), (std::vector<float>{2, 4, 6}));
}

// Inputs of one op on two devices: the ops layer refuses, naming the op and both devices.
TEST_F(Vulkan, MixingDevicesIsAnError) {
  const Tensor a = Tensor::full({2, 3}, 1.0f);
  const Tensor b = Tensor::full({2, 3}, 1.0f, dev_);
  try {
    Tensor c = add(a, b);
    ADD_FAILURE() << "no error adding " << a.str() << " and " << b.str();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Device);
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("add:", 0), 0u) << msg;
    EXPECT_NE(msg.find(dev_.str()), std::string::npos) << msg;
  }
}

// The fused attention: one dispatch per call (the cache writes included), caches on
// another device refused by the ops layer, head dimensions beyond the shaders' 128 refused.
TEST_F(Vulkan, AttentionIsOneDispatchAndChecksDevicesAndHeadSize) {
  vk::Context& ctx = context_of(dev_);
  const Tensor qkv = Tensor::from_vector(ramp(20 * 3 * 32), {1, 20, 3 * 32}, dev_);
  Tensor kc = Tensor::zeros({2, 24, 16}, DType::F32, dev_);
  Tensor vc = Tensor::zeros({2, 24, 16}, DType::F32, dev_);
  backend_for(dev_).synchronize();
  for (int64_t T : {1, 20}) {  // the decode and the prefill kernel
    const uint64_t before = ctx.stats().dispatches;
    const Tensor y = attention(qkv.reshape({20, 96}).narrow_rows(0, T), 2, kc, vc, 0);
    EXPECT_EQ(ctx.stats().dispatches - before, 1u) << "T = " << T;
  }
  // attention_at: one dispatch too (Unsupported where a shader binds fewer than 6 buffers);
  // its position tensor must be on the device.
  const Tensor pos = Tensor::from_vector(std::vector<uint32_t>{3}, {1}, dev_);
  const Tensor step = qkv.reshape({20, 96}).narrow_rows(0, 1);
  if (ctx.max_bindings() >= 6) {
    const uint64_t before = ctx.stats().dispatches;
    (void)attention_at(step, 2, kc, vc, pos);
    EXPECT_EQ(ctx.stats().dispatches - before, 1u);
  } else {
    EXPECT_FALSE(backend_for(dev_).can_capture());
    try {
      (void)attention_at(step, 2, kc, vc, pos);
      ADD_FAILURE() << "attention_at with " << ctx.max_bindings() << " bindings";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Unsupported) << e.what();
    }
  }
  try {
    (void)attention_at(qkv, 2, kc, vc, Tensor::from_vector(std::vector<uint32_t>{0}, {1}));
    ADD_FAILURE() << "no error for a position on the CPU";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Device) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind("attention_at:", 0), 0u) << e.what();
  }
  Tensor cpu_cache = Tensor::zeros({2, 24, 16});
  try {
    (void)attention(qkv, 2, cpu_cache, vc, 0);
    ADD_FAILURE() << "no error for a cache on the CPU";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Device) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind("attention:", 0), 0u) << e.what();
  }
  try {
    (void)attention(Tensor::zeros({1, 2, 3 * 160}, DType::F32, dev_), 1);
    ADD_FAILURE() << "no error for hd 160";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported) << e.what();
  }
}

// layernorm_matmul of one row is one dispatch (the layernorm inside the GEMV) that equals
// layernorm then matmul on the device; several rows take the two kernels.
TEST_F(Vulkan, LayernormMatmulOfOneRowIsOneDispatch) {
  vk::Context& ctx = context_of(dev_);
  const Tensor x = Tensor::from_vector(ramp(3 * 96), {3, 96}, dev_);
  const Tensor g = Tensor::from_vector(ramp(96), {96}, dev_);
  const Tensor b = Tensor::from_vector(ramp(96), {96}, dev_);
  const Tensor w = Tensor::from_vector(ramp(96 * 40), {96, 40}, dev_);
  const Tensor bias = Tensor::from_vector(ramp(40), {40}, dev_);
  for (int64_t rows : {1, 3}) {
    SCOPED_TRACE("rows " + std::to_string(rows));
    const Tensor xr = x.narrow_rows(0, rows);
    backend_for(dev_).synchronize();
    const uint64_t before = ctx.stats().dispatches;
    const Tensor fused = layernorm_matmul(xr, g, b, 1e-5f, w, {.gelu = true}, bias);
    const uint64_t fused_dispatches = ctx.stats().dispatches - before;
    const Tensor two = matmul(layernorm(xr, g, b, 1e-5f), w, {.gelu = true}, bias);
    EXPECT_EQ(fused_dispatches, rows == 1 && ctx.max_bindings() >= 6 ? 1u : 2u);
    const std::vector<float> f = fused.to_vector<float>(), t = two.to_vector<float>();
    ASSERT_EQ(f.size(), t.size());
    for (size_t i = 0; i < f.size(); ++i)
      EXPECT_NEAR(f[i], t[i], 1e-5 * std::max(1.0f, std::fabs(t[i]))) << i;
  }
}

// matmul_add_ with acc on another device than its operands: refused at the door.
TEST_F(Vulkan, MatmulAddWithAccOnAnotherDeviceIsAnError) {
  const Tensor a = Tensor::full({1, 3}, 1.0f, dev_), b = Tensor::full({3, 4}, 1.0f, dev_);
  Tensor acc = Tensor::full({1, 4}, 1.0f);
  try {
    matmul_add_(acc, a, b);
    ADD_FAILURE() << "no error with acc on the CPU";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Device);
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("matmul_add_:", 0), 0u) << msg;
  }
  for (float x : acc.to_vector<float>()) EXPECT_EQ(x, 1.0f);
}

// The GEMV's vec4 loads need b's view offset and row length to be multiples of 4 floats: a
// b of N = 36 at an offset of 1 float must take the scalar path, one at 36 the vec4 path,
// with the epilogues (gelu, accumulate) on both.
TEST_F(Vulkan, GemvOnAlignedAndUnalignedViewsMatchesTheCpu) {
  const int64_t K = 33, N = 36;
  const std::vector<float> data = ramp(static_cast<size_t>((K + 1) * N) + 1);
  const std::vector<float> x = ramp(static_cast<size_t>(K));
  auto run = [&](Device d) {
    const Tensor flat = Tensor::from_vector(data, {(K + 1) * N + 1, 1}, d);
    const Tensor a = Tensor::from_vector(x, {1, K}, d);
    std::vector<std::vector<float>> outs;
    for (int64_t offset : {int64_t{1}, N}) {
      const Tensor b = flat.narrow_rows(offset, K * N).reshape({K, N});
      const Tensor bias = flat.narrow_rows(offset + 3, N).reshape({N});
      MatmulSpec gelu;
      gelu.gelu = true;
      outs.push_back(matmul(a, b, gelu, bias).to_vector<float>());
      Tensor acc = Tensor::from_vector(ramp(static_cast<size_t>(N)), {1, N}, d);
      matmul_add_(acc, a, b, {}, bias);
      outs.push_back(acc.to_vector<float>());
    }
    return outs;
  };
  expect_gpu_matches_cpu(run, dev_, 1e-3);
}

// matmul_add_layernorm_matmul of one row is one dispatch (gemv_chain: the second product's
// workgroups poll for the first's, or compute it themselves) with the two ops' results bit
// for bit, x untouched; also when replayed from a captured graph many times (its counters
// reset by each run). Several rows take the copy and the separate kernels. The kernel's
// own report says which path its second-phase workgroups took: with FORGE_VULKAN_CHAIN=1
// the consuming one must have run (on a discrete GPU, every time), with solo never.
TEST_F(Vulkan, MatmulAddLayernormMatmulOfOneRowIsOneDispatch) {
  vk::Context& ctx = context_of(dev_);
  auto& vb = dynamic_cast<vk::VulkanBackend&>(backend_for(dev_));
  const int64_t N1 = 96, K1 = 200, N2 = 72;
  const uint64_t groups2 = (N2 + 15) / 16;  // the second phase's workgroups of 16 columns
  (void)vb.take_chain_counts();
  const Tensor a = Tensor::from_vector(ramp(3 * K1), {3, K1}, dev_);
  const Tensor w1 = Tensor::from_vector(ramp(K1 * N1, 0.003f), {K1, N1}, dev_);
  const Tensor b1 = Tensor::from_vector(ramp(N1), {N1}, dev_);
  const Tensor g = Tensor::from_vector(ramp(N1), {N1}, dev_);
  const Tensor be = Tensor::from_vector(ramp(N1, 0.02f), {N1}, dev_);
  const Tensor w2 = Tensor::from_vector(ramp(N1 * N2), {N1, N2}, dev_);
  const Tensor b2 = Tensor::from_vector(ramp(N2), {N2}, dev_);
  const Tensor x0 = Tensor::from_vector(ramp(3 * N1, 0.05f), {3, N1}, dev_);
  const bool fits = ctx.max_bindings() >= 11;
  // Dispatches without the chain (the copy is a transfer): the GEMV, then gemv_n_ln for one
  // row where its bindings fit, else layernorm and a matmul.
  const uint64_t separate = ctx.max_bindings() >= 7 ? 2u : 3u;
  // Second-phase workgroups (FORGE_VULKAN_CHAIN=1) that read the first phase's rows, and
  // that gave up waiting and computed them.
  uint64_t consumed = 0, recomputed = 0;
  // The kernel's report since the last take, after dispatches with `groups` second-phase
  // workgroups in all (none where the chain does not fit) in `mode`.
  auto check_counts = [&](const std::string& mode, uint64_t groups) {
    const vk::ChainCounts c = vb.take_chain_counts();
    EXPECT_EQ(c.consumed + c.recomputed, fits ? groups : 0u);
    if (mode == "solo") {
      EXPECT_EQ(c.consumed, 0u);
      return;
    }
    consumed += c.consumed;
    recomputed += c.recomputed;
    if (ctx.discrete()) {
      EXPECT_EQ(c.recomputed, 0u) << "a workgroup gave up waiting";
    }
  };
  for (const char* mode : {"1", "solo"}) {
    const ScopedSetting chain_on(dev_, "chain", mode);  // auto: discrete GPUs only
    for (int64_t rows : {1, 3}) {
      SCOPED_TRACE(std::string("mode ") + mode + ", rows " + std::to_string(rows));
      const Tensor x = x0.narrow_rows(0, rows).clone();
      Tensor xt = x.clone();
      const Tensor ar = a.narrow_rows(0, rows);
      backend_for(dev_).synchronize();
      const uint64_t before = ctx.stats().dispatches;
      const ResidualProduct fused =
          matmul_add_layernorm_matmul(x, ar, w1, b1, g, be, 1e-5f, w2, {.gelu = true}, b2);
      const uint64_t fused_dispatches = ctx.stats().dispatches - before;
      matmul_add_(xt, ar, w1, {}, b1);
      const Tensor two = layernorm_matmul(xt, g, be, 1e-5f, w2, {.gelu = true}, b2);
      EXPECT_EQ(fused_dispatches, rows == 1 ? (fits ? 1u : separate) : 3u);
      EXPECT_EQ(fused.out.to_vector<float>(), two.to_vector<float>());
      EXPECT_EQ(fused.x.to_vector<float>(), xt.to_vector<float>());
      EXPECT_EQ(x.to_vector<float>(), x0.narrow_rows(0, rows).to_vector<float>());
      check_counts(mode, rows == 1 ? groups2 : 0u);  // several rows: no gemv_chain dispatch
    }
  }
  // A row longer than 1024 (the second product's rows past those loaded before the wait),
  // k1 > 1024 (the first product in workgroups of 8 columns) and 20 columns (the last of the
  // second product's workgroups, 16 columns each, has 4).
  {
    const int64_t n1 = 1040, k1 = 1100, n2 = 20;
    const Tensor la = Tensor::from_vector(ramp(k1), {1, k1}, dev_);
    const Tensor lw1 = Tensor::from_vector(ramp(k1 * n1, 0.003f), {k1, n1}, dev_);
    const Tensor lb1 = Tensor::from_vector(ramp(n1), {n1}, dev_);
    const Tensor lg = Tensor::from_vector(ramp(n1), {n1}, dev_);
    const Tensor lbe = Tensor::from_vector(ramp(n1, 0.02f), {n1}, dev_);
    const Tensor lw2 = Tensor::from_vector(ramp(n1 * n2, 0.001f), {n1, n2}, dev_);
    const Tensor lb2 = Tensor::from_vector(ramp(n2), {n2}, dev_);
    const Tensor lx = Tensor::from_vector(ramp(n1, 0.05f), {1, n1}, dev_);
    for (const char* mode : {"1", "solo"}) {
      SCOPED_TRACE(std::string("long row, mode ") + mode);
      const ScopedSetting chain_on(dev_, "chain", mode);
      const ResidualProduct fused =
          matmul_add_layernorm_matmul(lx, la, lw1, lb1, lg, lbe, 1e-5f, lw2, {}, lb2);
      Tensor xt = lx.clone();
      matmul_add_(xt, la, lw1, {}, lb1);
      const Tensor two = layernorm_matmul(xt, lg, lbe, 1e-5f, lw2, {}, lb2);
      EXPECT_EQ(fused.out.to_vector<float>(), two.to_vector<float>());
      EXPECT_EQ(fused.x.to_vector<float>(), xt.to_vector<float>());
      check_counts(mode, static_cast<uint64_t>((n2 + 15) / 16));
    }
  }
  {
    const ScopedSetting off(dev_, "chain", "0");
    backend_for(dev_).synchronize();
    const uint64_t before = ctx.stats().dispatches;
    (void)matmul_add_layernorm_matmul(x0.narrow_rows(0, 1), a.narrow_rows(0, 1), w1, b1, g, be,
                                      1e-5f, w2, {}, b2);
    EXPECT_EQ(ctx.stats().dispatches - before, separate);
  }
  for (const char* bad : {"2", "yes", "AUTO"}) {
    EXPECT_THROW(set_device_setting(dev_, "chain", bad), Error) << bad;
    EXPECT_EQ(device_setting(dev_, "chain"), "auto") << "a bad value changed nothing";
  }
  if (fits) {
    EXPECT_GT(consumed, 0u) << "no second-phase workgroup ever consumed phase 1's rows";
  }
  (void)vb.take_chain_counts();
  if (!backend_for(dev_).can_capture())
    GTEST_SKIP() << dev_.str() << " cannot capture graphs: the replays were not run";
  // Captured once, replayed 5 times on a row that changes (x_new copied back into x after
  // each run): each run equals the two ops.
  const ScopedSetting chain_on(dev_, "chain", "1");
  const Tensor x = x0.narrow_rows(0, 1).clone();
  Tensor xt = x.clone();
  const Tensor a1 = a.narrow_rows(0, 1);
  Backend& bk = backend_for(dev_);
  bk.synchronize();
  bk.begin_capture();
  ResidualProduct r;
  try {
    r = matmul_add_layernorm_matmul(x, a1, w1, b1, g, be, 1e-5f, w2, {}, b2);
  } catch (...) {
    bk.abort_capture();
    throw;
  }
  const std::shared_ptr<Graph> graph = bk.end_capture();
  for (int i = 0; i < 5; ++i) {
    bk.replay(*graph);
    matmul_add_(xt, a1, w1, {}, b1);
    const Tensor two = layernorm_matmul(xt, g, be, 1e-5f, w2, {}, b2);
    EXPECT_EQ(r.out.to_vector<float>(), two.to_vector<float>()) << "replay " << i;
    EXPECT_EQ(r.x.to_vector<float>(), xt.to_vector<float>()) << "replay " << i;
    Tensor xm = x;
    xm.copy_from(r.x);
  }
  const uint64_t consumed_before_replays = consumed;
  check_counts("1", 5 * groups2);
  if (fits) {
    EXPECT_GT(consumed, consumed_before_replays) << "no replay consumed phase 1's rows";
  }
  // The tally, for runs repeated on a GPU (tools/gpu_tests.sh sums these lines).
  std::printf("gemv_chain tally: consumed %llu recomputed %llu\n",
              static_cast<unsigned long long>(consumed),
              static_cast<unsigned long long>(recomputed));
}

// Views at element offsets that are not multiples of the binding alignment: the kernels
// bind the aligned-down offset and add the remainder themselves.
TEST_F(Vulkan, ViewsAtUnalignedOffsetsMatchTheCpu) {
  const std::vector<float> data = ramp(37 * 33);
  auto run = [&](Device d) {
    const Tensor whole = Tensor::from_vector(data, {37, 33}, d);
    const Tensor a = whole.narrow_rows(3, 5);   // offset 99 floats
    const Tensor b = whole.narrow_rows(11, 5);  // offset 363 floats
    const Tensor w = whole.narrow_rows(1, 33);  // [33, 33] at offset 33
    std::vector<std::vector<float>> outs;
    outs.push_back(add(a, b).to_vector<float>());
    outs.push_back(gelu(a).to_vector<float>());
    outs.push_back(matmul(a, w).to_vector<float>());
    outs.push_back(softmax(b).to_vector<float>());
    outs.push_back(
        layernorm(a, whole.narrow_rows(20, 1).reshape({33}), whole.narrow_rows(21, 1).reshape({33}))
            .to_vector<float>());
    Tensor target = whole.clone().narrow_rows(7, 5);
    add_(target, b);
    outs.push_back(target.to_vector<float>());
    return outs;
  };
  // The softmax (33 probabilities of ~0.03 a row) relative to each value: 1e-3 absolute
  // would let a kernel that leaves a column out of the row's sum pass.
  expect_gpu_matches_cpu(run, dev_, {{1e-3}, {1e-3}, {1e-3}, {0.0, 1e-5}, {1e-3}, {1e-3}});
}

// Ops are recorded, not submitted: a chain of ops costs one submit, at the readback; and a
// repeated step allocates no new device memory after its first run (the buffer pool).
TEST_F(Vulkan, OneSubmitPerReadbackAndNoAllocationsInSteadyState) {
  vk::Context& ctx = context_of(dev_);
  const Tensor w = Tensor::from_vector(ramp(64 * 64), {64, 64}, dev_);
  const Tensor g = Tensor::full({64}, 1.0f, dev_);
  const Tensor b = Tensor::zeros({64}, DType::F32, dev_);
  auto step = [&](const Tensor& x) {
    Tensor h = layernorm(x, g, b);
    h = gelu(matmul(h, w));
    h = softmax(add(h, x), true, 0);
    return scale(h, 0.5f);
  };
  const Tensor x = Tensor::from_vector(ramp(8 * 64, 0.02f), {8, 64}, dev_);
  backend_for(dev_).synchronize();
  std::vector<float> first = step(x).to_vector<float>();  // warms the pool and pipelines
  const uint64_t submits = ctx.stats().submits;
  const uint64_t allocations = ctx.stats().buffer_allocations;
  const uint64_t dispatches = ctx.stats().dispatches;
  for (int i = 0; i < 5; ++i) EXPECT_EQ(step(x).to_vector<float>(), first);
  EXPECT_EQ(ctx.stats().submits - submits, 5u) << "one submit per readback";
  EXPECT_EQ(ctx.stats().buffer_allocations, allocations) << "the pool should serve every buffer";
  EXPECT_EQ(ctx.stats().dispatches - dispatches, 5u * 6u);
}
// A captured graph: ops called during the capture are recorded once and run at each
// replay, on whatever the host wrote into the graph's input tensors before it, with one
// submit per replay + readback. The graph keeps its buffers alive after the tensors of the
// capture are gone. Host reads during a capture are errors; an aborted capture leaves the
// device usable.
TEST_F(Vulkan, CapturedGraphReplaysOnNewInputs) {
  Backend& be = backend_for(dev_);
  if (!be.can_capture()) GTEST_SKIP() << "this device cannot capture graphs";
  vk::Context& ctx = context_of(dev_);
  const Tensor w = Tensor::from_vector(ramp(64 * 48), {64, 48}, dev_);
  const Tensor g = Tensor::full({64}, 1.0f, dev_);
  const Tensor b = Tensor::zeros({64}, DType::F32, dev_);
  auto step = [&](const Tensor& x) {
    Tensor h = layernorm(x, g, b);
    h = gelu(matmul(h, w));
    return softmax(h, true, 0);
  };
  Tensor x = Tensor::zeros({3, 64}, DType::F32, dev_);
  be.synchronize();
  be.begin_capture();
  Tensor y = step(x);
  EXPECT_THROW((void)y.to_vector<float>(), Error);  // a read while capturing
  std::shared_ptr<Graph> graph = be.end_capture();
  const Tensor out = y;  // the graph's output: rewritten by every replay
  y = Tensor();
  const uint64_t submits = ctx.stats().submits;
  for (int i = 0; i < 4; ++i) {
    const std::vector<float> in = ramp(3 * 64, 0.01f * static_cast<float>(i + 1));
    x.copy_from(in);
    be.replay(*graph);
    const std::vector<float> got = out.to_vector<float>();
    const std::vector<float> want = step(Tensor::from_vector(in, {3, 64}, dev_)).to_vector<float>();
    EXPECT_EQ(got, want) << "replay " << i;
  }
  // One submit per replay + read, and one per direct run of the step.
  EXPECT_EQ(ctx.stats().submits - submits, 8u);

  // Replays queue after the work recorded before them and before the work after them.
  x.copy_from(ramp(3 * 64, 0.05f));
  const Tensor before = scale(x, 2.0f);
  be.replay(*graph);
  const Tensor after = scale(out, 3.0f);
  const std::vector<float> want =
      step(Tensor::from_vector(ramp(3 * 64, 0.05f), {3, 64}, dev_)).to_vector<float>();
  std::vector<float> want3(want.size());
  for (size_t i = 0; i < want.size(); ++i) want3[i] = want[i] * 3.0f;
  expect_near(after.to_vector<float>(), want3, 1e-6, "work after a replay sees its output");
  expect_near(before.to_vector<float>(), ramp(3 * 64, 0.1f), 1e-5, "work before a replay");

  // A failed capture is abandoned cleanly.
  be.begin_capture();
  (void)gelu(x);
  be.abort_capture();
  EXPECT_EQ(gelu(Tensor::full({4}, 0.0f, dev_)).to_vector<float>(), std::vector<float>(4, 0.0f));
  graph.reset();
  be.synchronize();
}

// Timestamp queries around every dispatch: GPU time per shader (what --profile will show).
TEST_F(Vulkan, ProfilingReportsTimePerShader) {
  vk::Context& ctx = context_of(dev_);
  ctx.set_profiling(true);
  const Tensor a = Tensor::from_vector(ramp(96 * 80), {96, 80}, dev_);
  for (int i = 0; i < 3; ++i) (void)gelu(matmul(a, a, {.trans_b = true})).to_vector<float>();
  const std::vector<KernelTime> times = ctx.profile();
  ctx.set_profiling(false);
  bool matmul_seen = false;
  for (const auto& t : times) {
    if (t.kernel == "matmul") {
      matmul_seen = true;
      EXPECT_EQ(t.dispatches, 3u);
      EXPECT_GT(t.ms, 0.0);
    }
  }
  EXPECT_TRUE(matmul_seen);
}

// gemm's tile choice and its switches, seen through the profile's kernel names (what the
// kernels compute is checked by MatmulTiles/OpTiles under every setting).
TEST_F(Vulkan, MatmulTileAndSplitKSwitchesPickTheKernels) {
  vk::Context& ctx = context_of(dev_);
  // The kernels (and whether k was split) of one matmul [M, 128] @ [128, N].
  auto kernels = [&](int64_t M, int64_t N) {
    const Tensor a = Tensor::from_vector(ramp(static_cast<size_t>(M * 128)), {M, 128}, dev_);
    const Tensor b = Tensor::from_vector(ramp(static_cast<size_t>(128 * N)), {128, N}, dev_);
    ctx.set_profiling(true);
    (void)matmul(a, b).to_vector<float>();
    std::set<std::string> names;
    for (const KernelTime& t : ctx.profile()) names.insert(t.kernel);
    ctx.set_profiling(false);
    return names;
  };
  using Names = std::set<std::string>;
  // auto: too few 128x128 tiles for a GPU -> the half tile that pads less (64x128 on a tie),
  // no split with k = 128 (< 256 per split); small outputs -> matmul (64x64).
  EXPECT_EQ(kernels(256, 256), Names{"matmul_big_64x128"});
  EXPECT_EQ(kernels(256, 192), Names{"matmul_big_128x64"});
  EXPECT_EQ(kernels(100, 256), Names{"matmul"});
  {
    const ScopedSetting tile(dev_, "matmul_tile", "128x128");
    const ScopedSetting split(dev_, "split_k", "2");
    EXPECT_EQ(kernels(256, 192), (Names{"matmul_big", "split_k_reduce"}));
    EXPECT_EQ(kernels(100, 256), (Names{"matmul", "split_k_reduce"}));  // not big: 64x64
  }
  {
    const ScopedSetting tile(dev_, "matmul_tile", "64x64");
    const ScopedSetting split(dev_, "split_k", "auto");
    EXPECT_EQ(kernels(256, 256), Names{"matmul"});
  }
  for (const char* bad : {"96x96", "128", "AUTO"})
    EXPECT_THROW(set_device_setting(dev_, "matmul_tile", bad), Error) << bad;
  for (const char* bad : {"0", "-1", "2x", "many"})
    EXPECT_THROW(set_device_setting(dev_, "split_k", bad), Error) << bad;
}

// The validation layers watch runs of real work (forge eval of a golden model on the
// device; greedy generation, whose steps are replayed graphs queued ahead of their reads,
// also with gemv_chain forced on, whose workgroups hand data over through atomics) and must
// report nothing. Runs the CLI so that the layer is enabled from the start.
TEST_F(Vulkan, ValidationLayersReportNothing) {
  if (!std::ifstream("/usr/share/vulkan/explicit_layer.d/VkLayer_khronos_validation.json"))
    FORGE_SKIP_UNLESS_CI(
        "VK_LAYER_KHRONOS_validation is not installed (apt-get install "
        "vulkan-validationlayers)");
  const std::string model = std::string(FORGE_SOURCE_DIR) + "/tests/data/golden/odd";
  const std::string err = ::testing::TempDir() + "forge_vk_validation.err";
  const std::string generate =
      "generate --model " + model + " --prompt-ids 5,17,300 -n 24 --greedy --ignore-eos";
  const std::vector<std::pair<std::string, std::string>> runs = {
      // {environment, arguments}
      {"", "eval --model " + model + " --ids 5,17,300,2,999,41,7,8,9,10,11"},
      {"", generate},
      {"FORGE_VULKAN_CHAIN=1 ", generate}};
  for (const auto& [env, args] : runs) {
    const std::string cmd = "FORGE_VULKAN_VALIDATION=1 " + env + std::string(FORGE_BINARY) + " " +
                            args + " --device " + dev_.str() + " > /dev/null 2> " + err;
    const int status = std::system(cmd.c_str());
    std::ifstream f(err);
    std::stringstream ss;
    ss << f.rdbuf();
    const std::string log = ss.str();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << env << args << "\n" << log;
    EXPECT_NE(log.find("validation layer enabled"), std::string::npos) << args << "\n" << log;
    EXPECT_EQ(log.find("vulkan validation:"), std::string::npos) << args << "\n" << log;
  }
}

// `forge bench --preset ... --profile` on a GPU: per-kernel GPU time from timestamp queries,
// for the prefill, per decode step and per training step, with each kernel's dispatches.
TEST_F(Vulkan, BenchProfileReportsGpuTimePerKernel) {
  // The seams as separate kernels (the one-dispatch gemv_chain, on by default on discrete
  // GPUs, has a test of its own).
  const ScopedEnv no_chain("FORGE_VULKAN_CHAIN", "0");
  const CliResult r =
      run_forge("bench --preset tiny --device " + dev_.str() +
                " --prompt-tokens 8 --decode-tokens 2 --train-steps 1 --profile --json");
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = parse_json(r);
  // tiny: 2 layers of 4 weight products in the prefill (qkv, c_proj, fc, fc_proj) and one
  // fused attention each (8 tokens: the decode kernel's regime); a decode step's products
  // are GEMVs with b untransposed, 4 per layer, two of them with ln_1 / ln_2 folded in
  // (gemv_n_ln: no layernorm dispatch but ln_f's).
  // (Shaders binding fewer than 6 buffers: the prefill kernel, layernorm + gemv_n.)
  const bool six = context_of(dev_).max_bindings() >= 6;
  const std::string attn = six ? "attention_decode x2" : "attention_prefill x2";
  const auto& pre = j.at("prefill_profile_ms");
  ASSERT_TRUE(pre.contains("matmul x8")) << pre.dump();
  EXPECT_GT(pre.at("matmul x8").get<double>(), 0.0);
  EXPECT_TRUE(pre.contains(attn)) << pre.dump();
  EXPECT_GT(pre.at("sum of ops").get<double>(), 0.0);
  const auto& dec = j.at("decode_step_profile_ms");
  EXPECT_TRUE(dec.contains(six ? "gemv_n x4" : "gemv_n x8")) << dec.dump();
  EXPECT_EQ(dec.contains("gemv_n_ln x4"), six) << dec.dump();
  EXPECT_TRUE(dec.contains(six ? "layernorm x1" : "layernorm x5")) << dec.dump();
  EXPECT_TRUE(dec.contains(attn)) << dec.dump();
  EXPECT_TRUE(dec.contains("embedding x1")) << dec.dump();
  // A training step: one AdamW dispatch per parameter tensor (28 in tiny, wte tied).
  const auto& train = j.at("train_step_profile_ms");
  EXPECT_TRUE(train.contains("adamw x28")) << train.dump();
}

// The windowed kernels really split: with window_bytes 4096 (1024 floats) a
// flat op over 3000 elements takes 3 dispatches, an embedding over a [100, 64] table 7
// (16 rows each), and the LM head's product over it several, with the CPU's values. A bad
// value of the variable is an error naming it.
TEST_F(Vulkan, WindowedKernelsSplitTheirBindings) {
  const ScopedSetting window(dev_, "window_bytes", "4096");
  vk::Context& ctx = context_of(dev_);
  auto dispatches = [&](const std::function<void()>& f) {
    synchronize(dev_);
    const uint64_t before = ctx.stats().dispatches;
    f();
    synchronize(dev_);
    return ctx.stats().dispatches - before;
  };
  std::vector<float> xs(3000);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(i % 97) - 48.0f;
  const Tensor x = Tensor::from_vector(xs, {3000}, dev_);
  Tensor y;
  EXPECT_EQ(dispatches([&] { y = scale(x, 0.5f); }), 3u);
  EXPECT_EQ(y.to_vector<float>(), scale(Tensor::from_vector(xs, {3000}), 0.5f).to_vector<float>());

  std::vector<float> ts(100 * 64);
  for (size_t i = 0; i < ts.size(); ++i) ts[i] = static_cast<float>((i * 37) % 101) / 50.0f - 1;
  const Tensor table_cpu = Tensor::from_vector(ts, {100, 64});
  const Tensor table = table_cpu.to(dev_);
  const std::vector<uint32_t> id_list = {0, 15, 16, 99, 47, 16, 84};
  const Tensor ids = Tensor::from_vector(id_list, {7});
  Tensor e;
  EXPECT_EQ(dispatches([&] { e = embedding(ids, table); }), 7u);
  EXPECT_EQ(e.to_vector<float>(), embedding(ids, table_cpu).to_vector<float>());

  const Tensor h_cpu =
      Tensor::from_vector(std::vector<float>(xs.begin(), xs.begin() + 128), {2, 64});
  MatmulSpec nt;
  nt.trans_b = true;
  Tensor logits;
  EXPECT_GT(dispatches([&] { logits = matmul(h_cpu.to(dev_), table, nt); }), 3u);
  expect_near(logits.to_vector<float>(), matmul(h_cpu, table_cpu, nt).to_vector<float>(), 2e-3,
              "h @ table^T in windows (terms up to 48: sums of 64 round to 1e-3)");

  for (const char* bad : {"lots", "3", "-1"}) {
    try {
      set_device_setting(dev_, "window_bytes", bad);
      ADD_FAILURE() << "no error for window_bytes " << bad;
    } catch (const Error& err) {
      EXPECT_EQ(err.kind(), ErrorKind::Format);
      EXPECT_NE(std::string(err.what()).find("window_bytes=" + std::string(bad)), std::string::npos)
          << err.what();
    }
  }
  EXPECT_EQ(device_setting(dev_, "window_bytes"), "4096");
}

// The settings: every FORGE_VULKAN_* variable parsed and validated in one place (a bad
// value names the variable and what it takes), the per-call ones changed by name, the
// creation-time ones and unknown names refused, and the CPU has none.
TEST_F(Vulkan, SettingsAreParsedOnceAndValidated) {
  {
    const ScopedEnv tile("FORGE_VULKAN_MATMUL_TILE", "64x128");
    const ScopedEnv bindings("FORGE_VULKAN_MAX_BINDINGS", "4");
    const ScopedEnv spin("FORGE_VULKAN_SPIN_US", "0");
    const vk::Settings s = vk::Settings::from_environment();
    EXPECT_EQ(s.matmul_tile, "64x128");
    EXPECT_EQ(s.max_bindings, 4u);
    EXPECT_EQ(s.spin_us, 0);
    EXPECT_EQ(s.get("spin_us"), "0");
    EXPECT_EQ(s.get("split_k"), "auto");
  }
  const std::pair<const char*, const char*> bad[] = {
      {"FORGE_VULKAN_CHAIN", "yes"},         {"FORGE_VULKAN_MAX_BINDINGS", "12"},
      {"FORGE_VULKAN_MAX_BINDINGS", "four"}, {"FORGE_VULKAN_SPIN_US", "-5"},
      {"FORGE_VULKAN_STAGING", "true"},      {"FORGE_VULKAN_PUSH_DESCRIPTORS", "1"},
      {"FORGE_VULKAN_VALIDATION", "on"},     {"FORGE_VULKAN_ATTENTION_SPLITS", "0"},
      {"FORGE_VULKAN_WINDOW_BYTES", "1k"},   {"FORGE_VULKAN_ATTENTION_TILE", "huge"}};
  for (const auto& [name, value] : bad) {
    const ScopedEnv env(name, value);
    try {
      (void)vk::Settings::from_environment();
      ADD_FAILURE() << "no error for " << name << "=" << value;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::Format);
      EXPECT_NE(std::string(e.what()).find(std::string(name) + "=" + value), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("expected"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(device_setting_names(dev_).size(), 11u);
  {
    const ScopedSetting tile(dev_, "attention_splits", "3");
    EXPECT_EQ(device_setting(dev_, "attention_splits"), "3");
  }
  EXPECT_EQ(device_setting(dev_, "attention_splits"), "auto");
  try {
    set_device_setting(dev_, "staging", "1");
    ADD_FAILURE() << "staging changed after the device was created";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_NE(std::string(e.what()).find("FORGE_VULKAN_STAGING"), std::string::npos) << e.what();
  }
  try {
    set_device_setting(dev_, "tile", "64x64");
    ADD_FAILURE() << "no error for an unknown setting";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Unsupported);
    EXPECT_NE(std::string(e.what()).find("matmul_tile"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(device_setting_names(Device::cpu()).empty());
  EXPECT_THROW(set_device_setting(Device::cpu(), "chain", "1"), Error);
}

/// One block of width 768 with GPT-2's real vocabulary: a 147 MiB wte.
gpt2::Config wide_vocab_config() {
  gpt2::Config c = gpt2::Config::preset("tiny");
  c.n_layer = 1;
  c.n_head = 12;
  c.n_embd = 768;
  c.n_ctx = 32;
  c.vocab_size = 50257;
  c.bos_id = c.eos_id = 50256;
  return c;
}

/// Whether wte of `c` is larger than one storage binding of `dev` (then its kernels bind it
/// in windows).
bool wte_exceeds_a_binding(const gpt2::Config& c, Device dev) {
  const uint64_t limit = backend_for(dev).info().max_binding_bytes;
  const uint64_t wte_bytes = static_cast<uint64_t>(c.vocab_size) * c.n_embd * sizeof(float);
  return limit > 0 && wte_bytes > limit;
}

// GPT-2's real vocabulary at width 768: wte is 147 MiB, more than lavapipe's 128 MiB binding
// limit. The model holds it as one tensor; the embedding and the tied LM head bind it in
// windows. Same logits as the CPU.
TEST_F(Vulkan, WteLargerThanOneBindingRunsInWindows) {
  const gpt2::Config c = wide_vocab_config();
  if (!wte_exceeds_a_binding(c, dev_))
    GTEST_SKIP() << dev_.str() << " binds " << backend_for(dev_).info().max_binding_bytes
                 << " bytes: wte fits one binding, nothing to split";
  const gpt2::Model cpu = gpt2::Model::random(c, 7);
  const gpt2::Model gpu = gpt2::Model::random(c, 7, dev_);
  // Ids from both windows (the first ends at row 43690 on lavapipe).
  const std::vector<uint32_t> prompt = {50256, 464, 2068, 43690, 43689, 0};
  const Tensor ids = Tensor::from_vector(prompt, {1, 6});
  gpt2::KVCache cpu_cache(cpu, 1), gpu_cache(gpu, 1);
  const std::vector<float> want = cpu.forward_cached(ids, cpu_cache).to_vector<float>();
  ASSERT_EQ(want.size(), 50257u);
  expect_near(gpu.forward_cached(ids, gpu_cache).to_vector<float>(), want, 1e-3,
              "last-position logits");
  // One decode step: the embedding of an id in the second window.
  const Tensor next = Tensor::from_vector(std::vector<uint32_t>{50000}, {1, 1});
  expect_near(gpu.forward_cached(next, gpu_cache).to_vector<float>(),
              cpu.forward_cached(next, cpu_cache).to_vector<float>(), 1e-3, "decode logits");
}

// All-position logits beyond one binding (700 rows x 50257 x 4 B = 140 MB > lavapipe's 128
// MiB): the LM head writes them in row slices. Same logits as the CPU.
TEST_F(Vulkan, LogitsLargerThanOneBindingRunInRowSlices) {
  gpt2::Config c = wide_vocab_config();  // GPT-2's vocabulary, but narrow: a cheap head
  c.n_head = 2;
  c.n_embd = 16;
  c.n_ctx = 704;
  const int64_t T = 700;
  const uint64_t logits_bytes = static_cast<uint64_t>(T) * c.vocab_size * sizeof(float);
  const uint64_t limit = backend_for(dev_).info().max_binding_bytes;
  if (limit == 0 || logits_bytes <= limit)
    GTEST_SKIP() << dev_.str() << " binds " << limit << " bytes: the logits fit one binding";
  const gpt2::Model cpu = gpt2::Model::random(c, 9);
  const gpt2::Model gpu = gpt2::Model::random(c, 9, dev_);
  std::vector<uint32_t> ids(static_cast<size_t>(T));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<uint32_t>((i * 7919) % 50257);
  const Tensor t = Tensor::from_vector(ids, {1, T});
  expect_near(gpu.forward(t).to_vector<float>(), cpu.forward(t).to_vector<float>(), 1e-4,
              "logits [1, 700, 50257]");
}

// Training with GPT-2's real vocabulary at width 768 (wte beyond lavapipe's binding limit):
// the LM head's products, the embedding's backward, AdamW and the norms bind wte, its
// gradient and moments in windows.
TEST_F(Vulkan, TrainingWithAWteLargerThanOneBinding) {
  const gpt2::Config c = wide_vocab_config();
  if (!wte_exceeds_a_binding(c, dev_))
    GTEST_SKIP() << dev_.str() << " binds " << backend_for(dev_).info().max_binding_bytes
                 << " bytes: wte fits one binding, nothing to split";
  gpt2::ModelOptions o;
  o.device = dev_;
  expect_same_training(train_run(c, o, 1, 4, 1), train_run(c, {}, 1, 4, 1), "50257 x 768 wte",
                       false);
}

}  // namespace
}  // namespace forge::test
