// The training state file (train_state.safetensors): a bit-identical round trip and resume,
// files that are not a state this trainer can resume (each refused before anything
// changes), and a save killed at random instants that always leaves a loadable state.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "forge/autograd.h"
#include "forge/error.h"
#include "forge/gpt2.h"
#include "forge/ops.h"
#include "forge/safetensors.h"
#include "forge/train.h"
#include "train_test_util.h"

namespace forge::test {
namespace {

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------
// Training state
// ---------------------------------------------------------------------------------------

train::Hyper resume_hyper() {
  train::Hyper h;
  h.steps = 6;
  h.batch = 4;
  h.micro_batch = 2;
  h.lr = 2e-3;
  h.warmup = 2;
  h.dropout = 0.1f;  // dropout seeds must follow the step count across a resume
  h.seed = 99;
  return h;
}

TEST(TrainState, RoundTripIsBitIdentical) {
  const std::string dir = temp_dir("roundtrip");
  gpt2::Model a = gpt2::Model::random(tiny_config(), 3);
  train::Trainer ta(a, resume_hyper());
  for (int64_t k = 0; k < 2; ++k) ta.step(two_micro_batches(k));
  ta.save_state(dir + "/s1.safetensors", {{"sampler", "1234"}, {"note", "ü"}});

  gpt2::Model b = gpt2::Model::random(tiny_config(), 4);  // other weights: all overwritten
  train::Trainer tb(b, resume_hyper());
  const auto meta = tb.load_state(dir + "/s1.safetensors");
  EXPECT_EQ(meta.at("sampler"), "1234");
  EXPECT_EQ(meta.at("note"), "ü");
  EXPECT_EQ(meta.at("forge.step"), "2");
  EXPECT_EQ(tb.step_count(), 2);
  tb.save_state(dir + "/s2.safetensors", {{"sampler", "1234"}, {"note", "ü"}});
  // Every tensor (weights and both moments) and all metadata equal, byte for byte.
  const SafeTensorsFile f1 = SafeTensorsFile::open(dir + "/s1.safetensors");
  const SafeTensorsFile f2 = SafeTensorsFile::open(dir + "/s2.safetensors");
  EXPECT_EQ(f1.names(), f2.names());
  EXPECT_EQ(f1.metadata(), f2.metadata());
  EXPECT_EQ(f1.names().size(), 3 * ta.params().size());
  for (const std::string& n : f1.names()) {
    const auto r1 = f1.raw(n), r2 = f2.raw(n);
    ASSERT_EQ(r1.size(), r2.size()) << n;
    EXPECT_EQ(std::memcmp(r1.data(), r2.data(), r1.size()), 0) << n;
  }
  for (size_t i = 0; i < ta.params().size(); ++i)
    EXPECT_TRUE(bits_equal(ta.params()[i].value(), tb.params()[i].value()));
  // The model the trainer wraps holds the loaded weights (parameters alias them).
  EXPECT_TRUE(bits_equal(b.weights().wpe, a.weights().wpe));
  EXPECT_THROW(ta.save_state(dir + "/s3.safetensors", {{"forge.step", "7"}}), Error);
  EXPECT_THROW(ta.save_state(dir + "/no/such/dir/s.safetensors", {}), Error);
  fs::remove_all(dir);
}

TEST(TrainState, ResumeIsBitIdentical) {
  const std::string dir = temp_dir("resume");
  // Uninterrupted: 6 steps.
  gpt2::Model a = gpt2::Model::random(tiny_config(), 8);
  train::Trainer ta(a, resume_hyper());
  std::vector<double> losses_a;
  for (int64_t k = 0; k < 6; ++k) losses_a.push_back(ta.step(two_micro_batches(k)).loss);
  // Interrupted after 3: save, a fresh process (fresh model and trainer), load, 3 more.
  std::vector<double> losses_b;
  {
    gpt2::Model b = gpt2::Model::random(tiny_config(), 8);
    train::Trainer tb(b, resume_hyper());
    for (int64_t k = 0; k < 3; ++k) losses_b.push_back(tb.step(two_micro_batches(k)).loss);
    tb.save_state(dir + "/state.safetensors", {});
  }
  gpt2::Model c = gpt2::Model::random(tiny_config(), 1234);
  train::Trainer tc(c, resume_hyper());
  tc.load_state(dir + "/state.safetensors");
  for (int64_t k = tc.step_count(); k < 6; ++k)
    losses_b.push_back(tc.step(two_micro_batches(k)).loss);
  ASSERT_EQ(losses_a.size(), losses_b.size());
  for (size_t k = 0; k < losses_a.size(); ++k)
    EXPECT_EQ(std::memcmp(&losses_a[k], &losses_b[k], sizeof(double)), 0)
        << "step " << k + 1 << ": " << losses_a[k] << " vs " << losses_b[k];
  for (size_t i = 0; i < ta.params().size(); ++i)
    EXPECT_TRUE(bits_equal(ta.params()[i].value(), tc.params()[i].value()))
        << ta.params()[i].name();
  fs::remove_all(dir);
}

void expect_load_error(train::Trainer& t, const std::string& path, ErrorKind kind,
                       const char* needle) {
  try {
    t.load_state(path);
    ADD_FAILURE() << "no error loading " << path;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind("train::Trainer::load_state", 0), 0u) << e.what();
  }
}

TEST(TrainState, BadFilesAreRejectedCleanly) {
  const std::string dir = temp_dir("bad");
  gpt2::Model a = gpt2::Model::random(tiny_config(), 3);
  train::Trainer ta(a, resume_hyper());
  ta.step(two_micro_batches(0));
  const std::string good = dir + "/good.safetensors";
  ta.save_state(good, {});

  gpt2::Model b = gpt2::Model::random(tiny_config(), 4);
  train::Trainer tb(b, resume_hyper());
  const std::vector<float> wpe_before = values(b.weights().wpe);
  expect_load_error(tb, dir + "/missing.safetensors", ErrorKind::Io, "missing");
  // Truncated: half the file.
  {
    std::ifstream f(good, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    std::ofstream(dir + "/cut.safetensors", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
    std::ofstream(dir + "/junk.safetensors", std::ios::binary) << "not a safetensors file at all";
  }
  expect_load_error(tb, dir + "/cut.safetensors", ErrorKind::Format, "");
  expect_load_error(tb, dir + "/junk.safetensors", ErrorKind::Format, "");
  // A model folder's weights are not a training state.
  a.save(dir + "/model");
  expect_load_error(tb, dir + "/model/model.safetensors", ErrorKind::Format, "forge.format");
  // Another config: wider (shapes differ), or same shapes but other heads.
  gpt2::Config wide = tiny_config();
  wide.n_embd = 48;
  gpt2::Model w = gpt2::Model::random(wide, 1);
  train::Trainer tw(w, resume_hyper());
  expect_load_error(tw, good, ErrorKind::Format, "does not match");
  gpt2::Config heads = tiny_config();
  heads.n_head = 4;
  gpt2::Model hm = gpt2::Model::random(heads, 1);
  train::Trainer th(hm, resume_hyper());
  expect_load_error(th, good, ErrorKind::Format, "does not match");
  // A tensor missing (an untied model expects an lm_head).
  gpt2::Config untied = tiny_config();
  untied.tie_word_embeddings = false;
  gpt2::Model um = gpt2::Model::random(untied, 1);
  train::Trainer tu(um, resume_hyper());
  expect_load_error(tu, good, ErrorKind::Format, "does not match");
  // Nothing changed by the failed loads.
  EXPECT_EQ(values(b.weights().wpe), wpe_before);
  EXPECT_EQ(tb.step_count(), 0);
  EXPECT_NO_THROW(tb.load_state(good));
  EXPECT_EQ(tb.step_count(), 1);
  fs::remove_all(dir);
}

// good's tensors and metadata, changed by `change`, written to `path`.
void rewrite_state(
    const std::string& good, const std::string& path,
    const std::function<void(NamedTensors&, std::map<std::string, std::string>&)>& change) {
  const SafeTensorsFile file = SafeTensorsFile::open(good);
  NamedTensors tensors;
  for (const std::string& name : file.names()) tensors.emplace_back(name, file.load(name).clone());
  std::map<std::string, std::string> meta = file.metadata();
  change(tensors, meta);
  save_safetensors(path, tensors, meta);
}

Tensor& tensor_named(NamedTensors& tensors, const std::string& name) {
  for (auto& [n, t] : tensors)
    if (n == name) return t;
  throw std::runtime_error("no tensor " + name);
}

// Files that parse as safetensors but are not a state this trainer can resume from.
TEST(TrainState, CorruptStatesAreRejectedCleanly) {
  const std::string dir = temp_dir("corrupt");
  gpt2::Model a = gpt2::Model::random(tiny_config(), 3);
  train::Trainer ta(a, resume_hyper());
  ta.step(two_micro_batches(0));
  ta.step(two_micro_batches(1));
  const std::string good = dir + "/good.safetensors";
  ta.save_state(good, {});
  const std::string wte = ta.params()[0].name();
  gpt2::Model b = gpt2::Model::random(tiny_config(), 4);
  train::Trainer tb(b, resume_hyper());
  const std::vector<float> wpe_before = values(b.weights().wpe);
  using Meta = std::map<std::string, std::string>;
  auto meta_case = [&](const char* file, const char* key, const std::string& value,
                       const char* needle) {
    const std::string path = dir + "/" + file;
    rewrite_state(good, path, [&](NamedTensors&, Meta& meta) { meta[key] = value; });
    SCOPED_TRACE(std::string(key) + " = " + value);
    expect_load_error(tb, path, ErrorKind::Format, needle);
  };
  meta_case("version.safetensors", "forge.version", "2", "version \"2\"");
  meta_case("version_empty.safetensors", "forge.version", "", "version");
  meta_case("updates.safetensors", "forge.updates", "3", "bad step counts");  // 2 steps taken
  meta_case("step_neg.safetensors", "forge.step", "-1", "bad step counts");
  meta_case("step_text.safetensors", "forge.step", "two", "bad step counts");
  meta_case("step_huge.safetensors", "forge.step", "99999999999999999999", "bad step counts");
  meta_case("hyper_json.safetensors", "forge.hyper", "{not json", "hyper");
  meta_case("hyper_type.safetensors", "forge.hyper", "[1, 2]", "hyper");
  meta_case("hyper_field.safetensors", "forge.hyper", R"({"steps": 10})", "hyperparameter");
  meta_case("config_json.safetensors", "forge.config", "{\"n_layer\": ", "forge.config");
  meta_case("config_bad.safetensors", "forge.config",
            R"({"n_layer": 2, "n_head": 3, "n_embd": 32, "n_positions": 16, "vocab_size": 64})",
            "forge.config");
  {
    const std::string path = dir + "/no_step.safetensors";
    rewrite_state(good, path, [](NamedTensors&, Meta& meta) { meta.erase("forge.step"); });
    expect_load_error(tb, path, ErrorKind::Format, "forge.step");
  }
  // A tensor of the wrong dtype, one tensor too many, one too few.
  {
    const std::string path = dir + "/dtype.safetensors";
    rewrite_state(good, path, [&](NamedTensors& t, Meta&) {
      Tensor& m = tensor_named(t, "optim.exp_avg." + wte);
      m = Tensor::from_vector(std::vector<uint32_t>(static_cast<size_t>(m.numel()), 1u), m.shape());
    });
    expect_load_error(tb, path, ErrorKind::Format, "does not match the model's F32");
  }
  {
    const std::string path = dir + "/extra.safetensors";
    rewrite_state(good, path, [](NamedTensors& t, Meta&) {
      t.emplace_back("optim.extra", Tensor::full({3}, 1.0f));
    });
    expect_load_error(tb, path, ErrorKind::Format, "tensors, which does not match");
  }
  {
    const std::string path = dir + "/fewer.safetensors";
    rewrite_state(good, path, [](NamedTensors& t, Meta&) { t.pop_back(); });
    expect_load_error(tb, path, ErrorKind::Format, "tensors, which does not match");
  }
  // Values AdamW cannot resume from: NaN, an infinity or a negative number in the second
  // moment (also after the first element, and in the last parameter); NaN in the first
  // moment or a weight.
  struct ValueCase {
    std::string tensor;
    size_t index;
    float value;
    const char* needle;
  };
  const std::string last = ta.params().back().name();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<ValueCase> value_cases = {
      {"optim.exp_avg_sq." + wte, 0, nan, "second moment"},
      {"optim.exp_avg_sq." + wte, 17, inf, "second moment"},
      {"optim.exp_avg_sq." + last, 5, -1e-8f, "second moment"},
      {"optim.exp_avg_sq." + last, 0, -inf, "second moment"},
      {"optim.exp_avg." + wte, 3, nan, "finite"},
      {"optim.exp_avg." + last, 1, -inf, "finite"},
      {wte, 9, inf, "finite"},
      {last, 2, nan, "finite"}};
  for (size_t k = 0; k < value_cases.size(); ++k) {
    const ValueCase& c = value_cases[k];
    const std::string path = dir + "/value" + std::to_string(k) + ".safetensors";
    rewrite_state(good, path, [&](NamedTensors& t, Meta&) {
      Tensor& x = tensor_named(t, c.tensor);
      std::vector<float> v = x.to_vector<float>();
      ASSERT_LT(c.index, v.size());
      v[c.index] = c.value;
      x = Tensor::from_vector(v, x.shape());
    });
    SCOPED_TRACE(c.tensor + "[" + std::to_string(c.index) + "] = " + std::to_string(c.value));
    expect_load_error(tb, path, ErrorKind::Format, c.needle);
  }
  // A second moment of exactly 0 and -0 is fine (a parameter whose gradient was always 0).
  {
    const std::string path = dir + "/zero_v.safetensors";
    rewrite_state(good, path, [&](NamedTensors& t, Meta&) {
      Tensor& x = tensor_named(t, "optim.exp_avg_sq." + wte);
      std::vector<float> v = x.to_vector<float>();
      v[0] = 0.0f;
      v[1] = -0.0f;
      x = Tensor::from_vector(v, x.shape());
    });
    gpt2::Model z = gpt2::Model::random(tiny_config(), 5);
    train::Trainer tz(z, resume_hyper());
    EXPECT_NO_THROW(tz.load_state(path));
  }
  // None of the failed loads changed the trainer; the good file still loads.
  EXPECT_EQ(values(b.weights().wpe), wpe_before);
  EXPECT_EQ(tb.step_count(), 0);
  EXPECT_NO_THROW(tb.load_state(good));
  EXPECT_EQ(tb.step_count(), 2);
  fs::remove_all(dir);
}

TEST(TrainState, KillDuringSaveLeavesLoadableState) {
  // A child process saves the state over and over and is killed with SIGKILL at several
  // moments of a save (mid-write, mid-fsync, mid-rename): the path must always hold a
  // complete state. The child reports each finished save through a pipe; the parent waits
  // for the first report (a blocking read: no timeout to outlast on a slow or sanitized
  // build), then kills it a few milliseconds later, a different delay each trial, inside
  // one of its later saves.
  const std::string dir = temp_dir("kill");
  const std::string path = dir + "/state.safetensors";
  gpt2::Config cfg = tiny_config();
  cfg.n_embd = 128;
  cfg.n_head = 4;
  cfg.vocab_size = 4000;  // ~11 MB per save: long enough to be killed inside one
  gpt2::Model model = gpt2::Model::random(cfg, 6);
  train::Trainer trainer(model, train::Hyper{});
  trainer.save_state(path, {{"round", "0"}});
  for (int trial = 0; trial < 4; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    int report[2];
    ASSERT_EQ(pipe(report), 0);
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {  // never returns into the test runner
      close(report[0]);
      try {
        for (int r = 1;; ++r) {
          trainer.save_state(path, {{"round", std::to_string(r)}});
          const char done = 1;
          if (write(report[1], &done, 1) != 1) _exit(1);
        }
      } catch (...) {
        _exit(2);
      }
    }
    close(report[1]);
    char done = 0;
    const ssize_t got = read(report[0], &done, 1);
    if (got == 1) {
      // Readable while the child goes on replacing it.
      EXPECT_NO_THROW((void)SafeTensorsFile::open(path).metadata().at("round"));
      usleep(static_cast<useconds_t>(1000 + 3000 * trial));
    }
    kill(pid, SIGKILL);
    int status = 0;
    waitpid(pid, &status, 0);
    close(report[0]);
    ASSERT_EQ(got, 1) << "the child ended before it finished a save";
    EXPECT_TRUE(WIFSIGNALED(status));
    gpt2::Model other = gpt2::Model::random(cfg, 7);
    train::Trainer loaded(other, train::Hyper{});
    std::map<std::string, std::string> meta;
    ASSERT_NO_THROW(meta = loaded.load_state(path));
    ASSERT_TRUE(meta.count("round"));
    // The child had finished a save of its own: the file is one of those, whole.
    EXPECT_NE(meta.at("round"), "0");
    EXPECT_TRUE(bits_equal(other.weights().wte, model.weights().wte));
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace forge::test
