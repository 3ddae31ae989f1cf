// The Vulkan backend beyond the generic op harness (which runs every op case on every
// Vulkan device: tests/test_ops_reference.cpp): device discovery and errors, batching (one
// submit per readback), the buffer pool, captured graphs, profiling, validation layers,
// settings, and GPT-2 with tables beyond one binding. Which kernels the ops take:
// test_vulkan_kernels.cpp.
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
#include "backend/vulkan/tests/vulkan_test_util.h"
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
  EXPECT_TRUE(dec.contains("embedding x2")) << dec.dump();  // the token's and the position's
  // A training step: one AdamW dispatch per parameter tensor (28 in tiny, wte tied).
  const auto& train = j.at("train_step_profile_ms");
  EXPECT_TRUE(train.contains("adamw x28")) << train.dump();
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
  const std::string splits = device_setting(dev_, "attention_splits");
  {
    const ScopedSetting tile(dev_, "attention_splits", "3");
    EXPECT_EQ(device_setting(dev_, "attention_splits"), "3");
  }
  EXPECT_EQ(device_setting(dev_, "attention_splits"), splits) << "restored";
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
