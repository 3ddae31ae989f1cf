// Which Vulkan kernels the ops take, and that they agree with the CPU: the fused attention
// and GEMV seams in one dispatch, tensor views at unaligned offsets, the matmul tile and
// split-k settings, and the windows that bind tensors larger than one binding.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backend/vulkan/tests/vulkan_test_util.h"
#include "backend/vulkan/vulkan_backend.h"
#include "ci.h"
#include "forge/forge.h"
#include "scoped_setting.h"

namespace forge::test {
namespace {

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
  const std::string chain = device_setting(dev_, "chain");  // FORGE_VULKAN_CHAIN's, or auto
  for (const char* bad : {"2", "yes", "AUTO"}) {
    EXPECT_THROW(set_device_setting(dev_, "chain", bad), Error) << bad;
    EXPECT_EQ(device_setting(dev_, "chain"), chain) << "a bad value changed nothing";
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
  // The tally, for runs repeated on a GPU (src/backend/vulkan/tools/gpu_tests.sh sums these lines).
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

}  // namespace
}  // namespace forge::test
