// The backend boundary, proved with a strict backend: a CPU wrapper, registered from this
// test binary alone, that behaves as WebGPU will. Its command buffers cannot be replayed
// (replay throws) and, while armed, every synchronous device read throws: the host learns
// values only through read_async. Greedy decoding, KV-cache steps, eval and training steps
// run on it unchanged, and give the CPU's numbers bit for bit (the same kernels run).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "backend/cpu/host_memory.h"
#include "forge/backend.h"
#include "forge/data.h"
#include "forge/device_group.h"
#include "forge/device_queue.h"
#include "forge/dist.h"
#include "forge/error.h"
#include "forge/gpt2.h"
#include "forge/ops.h"
#include "forge/train.h"
#include "train_test_util.h"

namespace forge::test {
namespace {

class HostStorage final : public Storage {
 public:
  HostStorage(Device d, size_t bytes, bool zero)
      : Storage(d, bytes), ptr_(cpu::host_alloc(bytes, zero)) {
    if (!ptr_) throw Error(ErrorKind::Backend, "strict: out of memory");
  }
  ~HostStorage() override { cpu::host_free(ptr_, bytes()); }
  void* host_ptr() override { return ptr_; }

 private:
  void* ptr_;
};

unsigned char* bytes_of(const Storage& s) {
  return static_cast<unsigned char*>(const_cast<Storage&>(s).host_ptr());
}

// The CPU's kernel for the call's op (the CPU registers the op table's dtypes only).
const KernelEntry& cpu_kernel(Op op) {
  const KernelEntry* e = backend_for(Device::cpu()).find_kernel(op, table_key(op));
  if (!e) throw Error(ErrorKind::Unsupported, "strict: the CPU has no kernel for this op");
  return *e;
}

class StrictBackend final : public Backend {
 public:
  StrictBackend() {
    for (int i = 0; i < kOpCount; ++i) {
      const Op op = static_cast<Op>(i);
      const KernelEntry* e = backend_for(Device::cpu()).find_kernel(op, table_key(op));
      if (!e) continue;  // a fused op the CPU composes: so does this backend
      Accepts accepts = nullptr;
      if (e->accepts)
        accepts = [](const Backend&, const OpCall& c) {
          return cpu_kernel(c.op).accepts(backend_for(Device::cpu()), c);
        };
      add_kernel(
          op,
          [](Backend&, const OpCall& c) { cpu_kernel(c.op).run(backend_for(Device::cpu()), c); },
          accepts);
    }
  }
  DeviceInfo info() const override {
    DeviceInfo i = backend_for(Device::cpu()).info();
    i.device = Device("strict", 0);
    i.name = "strict (the CPU, reads asynchronous only, no replay)";
    i.kind = "test";
    return i;
  }
  std::shared_ptr<Storage> allocate(size_t n) override {
    return std::make_shared<HostStorage>(info().device, n, false);
  }
  std::shared_ptr<Storage> allocate_zeros(size_t n) override {
    return std::make_shared<HostStorage>(info().device, n, true);
  }
  void write(Storage& dst, size_t off, const void* src, size_t n) override {
    std::memcpy(bytes_of(dst) + off, src, n);
  }
  void copy(const Storage& src, size_t so, Storage& dst, size_t d_off, size_t n) override {
    std::memmove(bytes_of(dst) + d_off, bytes_of(src) + so, n);
  }
  void read(const Storage& src, size_t off, void* dst, size_t n) override {
    if (armed)
      throw Error(ErrorKind::Backend,
                  "strict: a synchronous read of " + std::to_string(n) + " bytes (use read_async)");
    std::memcpy(dst, bytes_of(src) + off, n);
  }
  uint64_t read_async(const Storage& src, size_t off, size_t n) override {
    std::lock_guard<std::mutex> lock(mutex_);
    ++async_reads;
    std::vector<unsigned char>& r = pending_[++last_];
    r.assign(bytes_of(src) + off, bytes_of(src) + off + n);
    return last_;
  }
  void read_wait(uint64_t ticket, void* dst, size_t n) override {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = pending_.find(ticket);
    if (it == pending_.end() || it->second.size() != n)
      throw Error(ErrorKind::Backend, "strict: read_wait of a ticket not pending");
    std::memcpy(dst, it->second.data(), n);
    pending_.erase(it);
  }
  void replay(const Graph&) override {
    throw Error(ErrorKind::Backend, "strict: recorded commands cannot be replayed");
  }
  // A one-rank group (a sum is the identity) that records what it was given.
  std::unique_ptr<DeviceGroup> join_group(const std::vector<uint8_t>& id, int rank,
                                          int size) override;
  std::vector<uint8_t> new_group_id() override { return {7, 7, 7}; }
  std::vector<int64_t> group_sums;  // each started sum's length
  int group_finishes = 0;

  std::atomic<bool> armed{false};
  std::atomic<int64_t> async_reads{0};

 private:
  std::mutex mutex_;
  std::map<uint64_t, std::vector<unsigned char>> pending_;
  uint64_t last_ = 0;
};

class StrictGroup final : public DeviceGroup {
 public:
  explicit StrictGroup(StrictBackend& b) : b_(b) {}
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void start_sum(Tensor& t) override {
    if (t.device() != b_.info().device) throw Error(ErrorKind::Device, "strict group: device");
    b_.group_sums.push_back(t.numel());
  }
  void finish() override { ++b_.group_finishes; }
  void set_timeline(bool on) override { on_ = on; }
  std::vector<GroupSpan> timeline() override {
    if (!on_) return {};
    return {{"compute", "ready 0", 1.0, 1.0},
            {"sum", "sum 0", 1.5, 2.0},
            {"compute", "finish", 3.0, 3.0}};
  }

 private:
  StrictBackend& b_;
  bool on_ = false;
};

std::unique_ptr<DeviceGroup> StrictBackend::join_group(const std::vector<uint8_t>& id, int rank,
                                                       int size) {
  if (id != std::vector<uint8_t>{7, 7, 7} || rank != 0 || size != 1)
    throw Error(ErrorKind::Backend, "strict: a group of one, id 7 7 7");
  return std::make_unique<StrictGroup>(*this);
}

StrictBackend& strict() {
  static StrictBackend* b = [] {
    auto* backend = new StrictBackend();
    BackendRegistration r;
    r.name = "strict";
    r.open = [backend](int index) -> Backend& {
      if (index != 0) throw Error(ErrorKind::Device, "strict: one device, strict:0");
      return *backend;
    };
    // Not listed: the device lists' tests cover the registered backends' real devices.
    r.devices = [] { return std::vector<DeviceInfo>{}; };
    register_backend(r);
    return backend;
  }();
  return *b;
}

// Synchronous reads of the strict device throw while one of these lives.
struct Armed {
  Armed() { strict().armed = true; }
  ~Armed() { strict().armed = false; }
};

const Device kStrict("strict", 0);

gpt2::Config tiny() { return gpt2::Config::preset("tiny"); }

std::vector<uint32_t> prompt() { return {3, 141, 59, 26, 53, 58, 97}; }

std::vector<uint32_t> strict_text() {
  std::vector<uint32_t> text;
  for (uint32_t i = 0; i < 300; ++i) text.push_back((i * 37 + i / 7) % 256);
  return text;
}

/// Step `step`'s two micro-batches [2, 16] of `text`.
std::vector<data::Batch> two_micro_batches(const std::vector<uint32_t>& text, int step) {
  std::vector<data::Batch> out;
  for (int m = 0; m < 2; ++m) {
    std::vector<uint32_t> in, tg;
    for (int b = 0; b < 2; ++b)
      for (int t = 0; t < 16; ++t) {
        const size_t at = static_cast<size_t>(step * 50 + m * 20 + b * 9 + t);
        in.push_back(text[at]);
        tg.push_back(text[at + 1]);
      }
    out.push_back({Tensor::from_vector(in, {2, 16}), Tensor::from_vector(tg, {2, 16})});
  }
  return out;
}

TEST(StrictBackend, RefusesSynchronousReadsAndReplays) {
  strict();
  const Tensor t = Tensor::from_vector(std::vector<float>{1, 2, 3}, {3}, kStrict);
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2, 3}));  // not armed
  Armed armed;
  try {
    (void)t.to_vector<float>();
    FAIL() << "an armed synchronous read did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::Backend);
    EXPECT_NE(std::string(e.what()).find("synchronous read"), std::string::npos) << e.what();
  }
  EXPECT_EQ(read_async(t).get<float>(), (std::vector<float>{1, 2, 3}));
  EXPECT_FALSE(RecordedStep::replays_on(kStrict));
  // A recorded step on it runs its body each time: never a replay.
  int runs = 0;
  RecordedStep step(kStrict, [&] { ++runs; });
  step.run();
  step.run();
  EXPECT_EQ(runs, 2);
  EXPECT_FALSE(step.replays());
}

TEST(StrictBackend, GreedyDecodingAndKvCacheStepsMatchTheCpu) {
  strict();
  const gpt2::Model cpu = gpt2::Model::random(tiny(), 7);
  const gpt2::Model dev = gpt2::Model::random(tiny(), 7, kStrict);
  const Tensor ids = Tensor::from_vector(prompt(), {1, static_cast<int64_t>(prompt().size())});
  auto greedy = [&](const gpt2::Model& m) {
    gpt2::KVCache cache(m, 1, 40);
    const uint32_t first = read_async(argmax_rows(m.forward_cached(ids, cache))).get<uint32_t>()[0];
    gpt2::GreedyDecoder dec(m, cache, first, 24);
    std::vector<uint32_t> out{first};
    for (int i = 0; i < 24; ++i) out.push_back(dec.next());
    return out;
  };
  const std::vector<uint32_t> want = greedy(cpu);
  const int64_t reads = strict().async_reads;
  {
    Armed armed;
    EXPECT_EQ(greedy(dev), want);
  }
  EXPECT_GE(strict().async_reads - reads, 25);  // each token through read_async

  // KV-cache steps, their logits read ahead of the host: the CPU's, bit for bit.
  auto steps = [&](const gpt2::Model& m) {
    gpt2::KVCache cache(m, 1, 16);
    std::vector<PendingRead> logits;
    logits.push_back(read_async(m.forward_cached(ids, cache)));
    for (uint32_t t : {5u, 250u, 0u, 77u})
      logits.push_back(read_async(
          m.forward_cached(Tensor::from_vector(std::vector<uint32_t>{t}, {1, 1}), cache)));
    std::vector<std::vector<float>> out;
    for (PendingRead& r : logits) out.push_back(r.get<float>());
    return out;
  };
  const auto want_logits = steps(cpu);
  Armed armed;
  EXPECT_EQ(steps(dev), want_logits);
}

TEST(StrictBackend, EvalAndTrainingStepsMatchTheCpu) {
  strict();
  const std::vector<uint32_t> text = strict_text();
  const gpt2::Model cpu_eval = gpt2::Model::random(tiny(), 9);
  const gpt2::Model dev_eval = gpt2::Model::random(tiny(), 9, kStrict);
  const double want_loss = gpt2::evaluate(cpu_eval, text, {32, 16}).loss;
  {
    Armed armed;
    EXPECT_EQ(gpt2::evaluate(dev_eval, text, {32, 16}).loss, want_loss);
  }

  const train::Hyper h = two_micro_batch_hyper();
  auto batches = [&](int step) { return two_micro_batches(text, step); };
  gpt2::Model cpu = gpt2::Model::random(tiny(), 11);
  gpt2::Model dev = gpt2::Model::random(tiny(), 11, kStrict);
  train::Trainer tc(cpu, h), td(dev, h);
  for (int s = 0; s < 3; ++s) {
    const train::StepStats want = tc.step(batches(s));
    train::StepStats got;
    {
      Armed armed;
      got = td.step(batches(s));
    }
    EXPECT_EQ(got.loss, want.loss) << "step " << s;
    EXPECT_EQ(got.grad_norm, want.grad_norm) << "step " << s;
  }
  Armed armed;
  EXPECT_EQ(td.evaluate(batches(5)), tc.evaluate(batches(5)));
  const auto wc = cpu.named_weights(), wd = dev.named_weights();
  ASSERT_EQ(wc.size(), wd.size());
  for (size_t i = 0; i < wc.size(); ++i)
    EXPECT_EQ(read_async(wd[i].second).get<float>(), wc[i].second.to_vector<float>())
        << wc[i].first;
}

// A device's gradients are summed by its group (forge/device_group.h), set up through the
// job: the trainer packs them into buckets on the device (copies, no host reads), starts
// each bucket's sum, and writes the sums back. With one rank a sum is the identity, so the
// step equals the CPU's without a job bit for bit, and the buckets hold every gradient.
TEST(StrictBackend, GradientSumsGoThroughTheDevicesGroup) {
  strict();
  const std::vector<uint32_t> text = strict_text();
  const train::Hyper h = two_micro_batch_hyper();
  gpt2::Model cpu = gpt2::Model::random(tiny(), 11);
  gpt2::Model dev = gpt2::Model::random(tiny(), 11, kStrict);
  train::Trainer tc(cpu, h), td(dev, h, &dist::job());
  ASSERT_EQ(dist::job().size(), 1);
  int64_t floats = 0;
  for (const ag::Parameter& p : td.params()) floats += p.value().numel();
  const std::string trace = ::testing::TempDir() + "/strict_sum_timeline.json";
  std::remove(trace.c_str());
  td.set_sum_timeline(trace);
  for (int s = 0; s < 3; ++s) {
    strict().group_sums.clear();
    const train::StepStats want = tc.step(two_micro_batches(text, s));
    train::StepStats got;
    {
      Armed armed;
      got = td.step(two_micro_batches(text, s));
    }
    EXPECT_EQ(got.loss, want.loss) << "step " << s;
    EXPECT_EQ(got.grad_norm, want.grad_norm) << "step " << s;
    int64_t summed = 0;
    for (int64_t n : strict().group_sums) summed += n;
    EXPECT_EQ(summed, floats) << "step " << s;
    EXPECT_EQ(strict().group_finishes, s + 1);
  }
  expect_same_weights(tc, td);
  // The last step's timeline, as a Chrome trace: the sum a complete event, points instants.
  std::ifstream f(trace);
  ASSERT_TRUE(f) << trace;
  const nlohmann::json j = nlohmann::json::parse(f);
  ASSERT_EQ(j.at("traceEvents").size(), 3u);
  const nlohmann::json& sum = j["traceEvents"][1];
  EXPECT_EQ(sum.at("name"), "sum 0");
  EXPECT_EQ(sum.at("ph"), "X");
  EXPECT_DOUBLE_EQ(sum.at("ts").get<double>(), 1500.0);
  EXPECT_DOUBLE_EQ(sum.at("dur").get<double>(), 500.0);
  EXPECT_EQ(j["traceEvents"][2].at("ph"), "i");
  // CPU gradients are summed inside MPI: no timeline to keep.
  train::Trainer on_cpu(cpu, h, &dist::job());
  EXPECT_THROW(on_cpu.set_sum_timeline(trace), Error);
}

}  // namespace
}  // namespace forge::test
