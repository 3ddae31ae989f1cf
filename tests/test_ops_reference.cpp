// The generic op harness: every case of tests/op_cases.cpp on every device of
// forge::list_devices() against its float64 reference, then every non-CPU device against
// the CPU (cross-backend parity). A new backend gets all of these tests by registering
// itself; a new op gets them by adding cases to op_cases.cpp.
//
// Also here: matmul on every tile kernel of a GPU, the ops that bind large tensors in
// windows with small windows forced, and per device the exact check that a tolerance cannot
// express (the dropout mask bit-identical to an independent hash).
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <ostream>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "ci.h"
#include "forge/backend.h"
#include "forge/forge.h"
#include "op_cases.h"
#include "reference.h"
#include "scoped_setting.h"

namespace forge::test {
namespace {

std::string sanitize(const std::string& s) {
  std::string out;
  for (char c : s) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return out;
}

/// Compares one output; reports the worst elements. An element passes when
/// |got - want| <= tol (NaN never passes).
::testing::AssertionResult close(const std::string& what, const std::vector<float>& got,
                                 const Expected& want) {
  if (got.size() != want.value.size())
    return ::testing::AssertionFailure()
           << what << ": " << got.size() << " elements, expected " << want.value.size();
  size_t bad = 0, worst = 0;
  double worst_excess = -1.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::fabs(static_cast<double>(got[i]) - want.value[i]);
    if (!(err <= want.tol[i])) {
      ++bad;
      const double excess = std::isnan(err) ? INFINITY : err - want.tol[i];
      if (excess > worst_excess) {
        worst_excess = excess;
        worst = i;
      }
    }
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": " << bad << " of " << got.size() << " elements off; worst at " << worst
         << ": got " << got[worst] << ", want " << want.value[worst] << " (error "
         << std::fabs(got[worst] - want.value[worst]) << ", tolerance " << want.tol[worst] << ")";
}

/// The harness's own guard against tests that pass by construction: an all-zero output
/// must fail wherever the reference is not all zeros.
::testing::AssertionResult tolerance_meaningful(const Expected& want) {
  bool any_nonzero = false;
  for (size_t i = 0; i < want.value.size(); ++i) {
    if (want.value[i] != 0.0) any_nonzero = true;
    if (std::fabs(want.value[i]) > want.tol[i]) return ::testing::AssertionSuccess();
  }
  if (!any_nonzero) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "tolerance is so loose that zeros would pass";
}

// Whether `be` has the case's op and every kernel of other dtypes it needs.
bool supports_case(const Backend& be, const OpCase& c) {
  if (!be.supports(op_of_function(c.op))) return false;
  for (const auto& [op, key] : c.needs)
    if (!be.supports(op, key)) return false;
  return true;
}

/// Uploads a case's inputs to `device`, runs it, and checks that inputs the op does not own
/// came back untouched. Unsupported skips only where the device's backend declares that it
/// lacks the op (Backend::supports); anywhere else, the CPU (which defines the semantics)
/// included, it fails.
bool run_case(const OpCase& c, const std::vector<HostTensor>& inputs, Device device,
              std::vector<std::vector<float>>& outputs, bool& skipped) {
  skipped = false;
  std::vector<Tensor> tensors;
  for (const HostTensor& h : inputs) tensors.push_back(h.to(device));
  try {
    outputs = c.run(tensors);
  } catch (const Error& e) {
    if (e.kind() == ErrorKind::Unsupported && !supports_case(backend_for(device), c)) {
      skipped = true;
      return false;
    }
    ADD_FAILURE() << c.name << " on " << device.str() << " threw: " << e.what();
    return false;
  }
  EXPECT_TRUE(supports_case(backend_for(device), c))
      << device.str() << " ran " << c.name << ", which its backend declares it lacks";
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (std::find(c.mutates.begin(), c.mutates.end(), static_cast<int>(i)) != c.mutates.end())
      continue;
    const HostTensor& h = inputs[i];
    // Bits, not values: NaN inputs (argmax_rows) compare unequal to themselves.
    bool same = false;
    if (h.dtype != DType::F32 && !h.is_u32) {
      same = tensors[i].to_bytes() == h.raw;
    } else if (h.is_u32) {
      same = tensors[i].to_vector<uint32_t>() == h.u32;
    } else {
      const std::vector<float> now = tensors[i].to_vector<float>();
      same =
          now.size() == h.f32.size() &&
          (now.empty() || std::memcmp(now.data(), h.f32.data(), now.size() * sizeof(float)) == 0);
    }
    EXPECT_TRUE(same) << c.name << ": input " << i << " was modified on " << device.str();
  }
  return true;
}

// ---------------------------------------------------------------------------------------
// Every case x every device against float64
// ---------------------------------------------------------------------------------------

/// Runs case c on `device` and compares every output with its float64 reference (skips
/// where the device's backend declares it lacks the op).
void expect_matches_reference(const OpCase& c, const std::vector<HostTensor>& inputs,
                              const std::vector<Expected>& want, Device device) {
  std::vector<std::vector<float>> got;
  bool skipped = false;
  if (!run_case(c, inputs, device, got, skipped)) {
    if (skipped) GTEST_SKIP() << c.op << " is not supported on " << device.str();
    return;
  }
  ASSERT_EQ(got.size(), want.size()) << "number of outputs";
  for (size_t o = 0; o < want.size(); ++o) {
    const std::string what = "output " + std::to_string(o);
    ASSERT_EQ(want[o].tol.size(), want[o].value.size()) << what << ": tolerance per element";
    EXPECT_TRUE(tolerance_meaningful(want[o])) << what;
    EXPECT_TRUE(close(what, got[o], want[o]));
  }
}

struct CaseOnDevice {
  size_t index = 0;  // into op_cases()
  Device device;
  bool placeholder = false;  // parity with no second device: one visible skip
};

// Readable parameter values in failure messages (instead of a byte dump).
void PrintTo(const CaseOnDevice& p, std::ostream* os) {
  if (p.placeholder) {
    *os << "(no device besides the CPU)";
    return;
  }
  *os << op_cases()[p.index].name << " on " << p.device.str();
}

std::vector<CaseOnDevice> reference_params() {
  std::vector<CaseOnDevice> ps;
  for (const DeviceInfo& d : list_devices())
    for (size_t i = 0; i < op_cases().size(); ++i) ps.push_back({i, d.device, false});
  return ps;
}

std::vector<CaseOnDevice> parity_params() {
  std::vector<CaseOnDevice> ps;
  for (const DeviceInfo& d : list_devices()) {
    if (d.device.is_cpu()) continue;
    for (size_t i = 0; i < op_cases().size(); ++i) ps.push_back({i, d.device, false});
  }
  if (ps.empty()) ps.push_back({0, Device::cpu(), true});
  return ps;
}

std::string param_name(const ::testing::TestParamInfo<CaseOnDevice>& info) {
  if (info.param.placeholder) return "only_cpu";
  return sanitize(info.param.device.str() + "_" + op_cases()[info.param.index].name);
}

class OpReference : public ::testing::TestWithParam<CaseOnDevice> {};

TEST_P(OpReference, MatchesFloat64) {
  const OpCase& c = op_cases()[GetParam().index];
  const Device device = GetParam().device;
  SCOPED_TRACE(c.name + " on " + device.str());
  const std::vector<HostTensor> inputs = c.inputs();
  expect_matches_reference(c, inputs, c.reference(inputs), device);
}

INSTANTIATE_TEST_SUITE_P(AllOps, OpReference, ::testing::ValuesIn(reference_params()), param_name);

class OpParity : public ::testing::TestWithParam<CaseOnDevice> {};

TEST_P(OpParity, MatchesCpu) {
  if (GetParam().placeholder) FORGE_SKIP_NO_DEVICE("no device besides the CPU: nothing to compare");
  const OpCase& c = op_cases()[GetParam().index];
  const Device device = GetParam().device;
  SCOPED_TRACE(c.name + ": " + device.str() + " vs cpu");
  const std::vector<HostTensor> inputs = c.inputs();
  const std::vector<Expected> want = c.reference(inputs);
  std::vector<std::vector<float>> cpu, dev;
  bool skipped = false;
  ASSERT_TRUE(run_case(c, inputs, Device::cpu(), cpu, skipped));
  if (!run_case(c, inputs, device, dev, skipped)) {
    if (skipped) GTEST_SKIP() << c.op << " is not supported on " << device.str();
    return;
  }
  ASSERT_EQ(cpu.size(), dev.size());
  for (size_t o = 0; o < cpu.size(); ++o) {
    // The CPU result stands in for the reference, with the reference's tolerances (exact
    // stays exact: dropout masks and data movement must be bit-identical across backends).
    Expected cpu_as_ref;
    cpu_as_ref.value.assign(cpu[o].begin(), cpu[o].end());
    cpu_as_ref.tol = want[o].tol;
    EXPECT_TRUE(close("output " + std::to_string(o), dev[o], cpu_as_ref));
  }
}

INSTANTIATE_TEST_SUITE_P(AllOps, OpParity, ::testing::ValuesIn(parity_params()), param_name);

// ---------------------------------------------------------------------------------------
// Every matmul flag combination on every tile kernel of a GPU, with and without split k
// ---------------------------------------------------------------------------------------

// A backend's settings matmul_tile and split_k (a GPU's) force a tile kernel and a number of
// k splits on every product; matmul_flag_cases() runs under each against float64 (its
// shapes are small enough for lavapipe). Backends without them skip.
const char* const kTiles[] = {"128x128", "64x128", "128x64", "64x64"};
const char* const kSplits[] = {"1", "3"};

struct TileCase {
  size_t index = 0;  // into matmul_flag_cases()
  Device device;
  const char* tile = "";
  const char* split = "";
  bool placeholder = false;  // no GPU: one visible skip
};

void PrintTo(const TileCase& p, std::ostream* os) {
  if (p.placeholder) {
    *os << "(no device besides the CPU)";
    return;
  }
  *os << matmul_flag_cases()[p.index].name << " on " << p.device.str() << ", tile " << p.tile
      << ", split k " << p.split;
}

std::vector<TileCase> tile_params() {
  std::vector<TileCase> ps;
  for (const DeviceInfo& d : list_devices()) {
    if (d.device.is_cpu()) continue;
    for (const char* tile : kTiles)
      for (const char* split : kSplits)
        for (size_t i = 0; i < matmul_flag_cases().size(); ++i)
          ps.push_back({i, d.device, tile, split, false});
  }
  if (ps.empty()) ps.push_back({0, Device::cpu(), "", "", true});
  return ps;
}

std::string tile_param_name(const ::testing::TestParamInfo<TileCase>& info) {
  const TileCase& p = info.param;
  if (p.placeholder) return "only_cpu";
  return sanitize(p.device.str() + "_tile" + p.tile + "_split" + p.split + "_" +
                  matmul_flag_cases()[p.index].name);
}

class OpTiles : public ::testing::TestWithParam<TileCase> {};

TEST_P(OpTiles, MatchFloat64) {
  const TileCase& p = GetParam();
  if (p.placeholder) FORGE_SKIP_NO_DEVICE("no device besides the CPU: no tile kernels to force");
  const OpCase& c = matmul_flag_cases()[p.index];
  SCOPED_TRACE(c.name + " on " + p.device.str() + ", tile " + p.tile + ", split k " + p.split);
  const ScopedSetting tile(p.device, "matmul_tile", p.tile);
  const ScopedSetting split(p.device, "split_k", p.split);
  if (!tile.active() || !split.active())
    GTEST_SKIP() << p.device.str() << " has no matmul_tile and split_k settings";
  const std::vector<HostTensor> inputs = c.inputs();
  expect_matches_reference(c, inputs, c.reference(inputs), p.device);
}

INSTANTIATE_TEST_SUITE_P(MatmulTiles, OpTiles, ::testing::ValuesIn(tile_params()), tile_param_name);

// ---------------------------------------------------------------------------------------
// The ops that bind a tensor larger than one binding in windows, with small windows
// ---------------------------------------------------------------------------------------

// A GPU backend may bind tensors larger than one storage binding (GPT-2's wte, its gradient and
// moments, big logits on a 128 MiB device) in windows: matmul over blocks of out and
// windows of k, embedding and scatter_add_rows over rows of the table, the flat ops over
// runs of elements. The setting window_bytes shrinks the windows to about a third of each
// case's largest tensor, so that every case of those ops runs in several windows against
// float64. Backends without it skip.
const std::set<std::string> kWindowedOps = {
    "matmul", "matmul_add_", "embedding", "scatter_add_rows", "add",   "add_",
    "scale",  "scale_",      "gelu",      "gelu_bwd",         "adamw", "sumsq"};

std::vector<CaseOnDevice> window_params() {
  std::vector<CaseOnDevice> ps;
  for (const DeviceInfo& d : list_devices()) {
    if (d.device.is_cpu()) continue;
    for (size_t i = 0; i < op_cases().size(); ++i)
      if (kWindowedOps.count(op_cases()[i].op)) ps.push_back({i, d.device, false});
  }
  if (ps.empty()) ps.push_back({0, Device::cpu(), true});
  return ps;
}

class OpWindows : public ::testing::TestWithParam<CaseOnDevice> {};

TEST_P(OpWindows, MatchFloat64) {
  if (GetParam().placeholder) FORGE_SKIP_NO_DEVICE("no device besides the CPU: no windows");
  const OpCase& c = op_cases()[GetParam().index];
  const Device device = GetParam().device;
  const std::vector<HostTensor> inputs = c.inputs();
  const std::vector<Expected> want = c.reference(inputs);
  size_t largest = 0;  // elements
  for (const HostTensor& t : inputs) largest = std::max(largest, t.f32.size() + t.u32.size());
  for (const Expected& e : want) largest = std::max(largest, e.value.size());
  const std::string bytes = std::to_string(std::max<size_t>(4, largest / 3 * 4));
  SCOPED_TRACE(c.name + " on " + device.str() + " in windows of " + bytes + " bytes");
  const ScopedSetting window(device, "window_bytes", bytes);
  if (!window.active()) GTEST_SKIP() << device.str() << " has no window_bytes setting";
  expect_matches_reference(c, inputs, want, device);
}

INSTANTIATE_TEST_SUITE_P(BindingWindows, OpWindows, ::testing::ValuesIn(window_params()),
                         param_name);

// ---------------------------------------------------------------------------------------
// The case list itself
// ---------------------------------------------------------------------------------------

TEST(OpCases, NamesAreUniqueAfterSanitizing) {
  std::set<std::string> names;
  for (const OpCase& c : op_cases())
    EXPECT_TRUE(names.insert(sanitize(c.name)).second) << "duplicate case " << c.name;
}

TEST(OpCases, CoverEveryOpOfTheOpTable) {
  // Every public function of every op in forge/op_table.def has a case (argmax_rows_into
  // runs inside argmax_rows's cases), and every case runs a function of the table.
  std::set<std::string> covered = {"argmax_rows_into"};
  for (const OpCase& c : op_cases()) {
    covered.insert(c.op);
    EXPECT_NO_THROW(op_of_function(c.op)) << c.name << ": " << c.op << " is not in the op table";
  }
  const std::vector<std::string> functions = op_functions();
  for (const std::string& f : functions) EXPECT_TRUE(covered.count(f)) << "no case for " << f;
  EXPECT_EQ(covered.size(), functions.size());
  EXPECT_EQ(op_table().size(), static_cast<size_t>(kOpCount));
}

TEST(OpCases, InputsAreDeterministic) {
  for (const OpCase& c : op_cases()) {
    if (c.op != "scatter_add_rows" && c.op != "adamw") continue;
    const auto a = c.inputs(), b = c.inputs();
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].f32, b[i].f32) << c.name;
      EXPECT_EQ(a[i].u32, b[i].u32) << c.name;
    }
  }
}

const OpCase& case_named(const std::string& name) {
  for (const OpCase& c : op_cases())
    if (c.name == name) return c;
  throw std::runtime_error("no op case " + name);
}

std::vector<float> narrow(const ref::Vec& v) { return std::vector<float>(v.begin(), v.end()); }

// The tolerances must fail what a wrong kernel would output, not only pass a right one.
// Mutants of the 50257-column cases: a softmax whose row sums miss one partial of 512
// columns (its outputs ~1% too large: under the absolute floor of 1e-6 the bound had
// before, every one of these probabilities of ~2e-5 passed), and ce_bwd with its scale 2%
// off.
TEST(OpCases, TolerancesRejectWrongKernels) {
  {
    const OpCase& c = case_named("softmax/plain/2x50257");
    const std::vector<HostTensor> in = c.inputs();
    const Expected want = c.reference(in)[0];
    EXPECT_TRUE(close("the reference rounded to float", narrow(want.value), want));
    constexpr size_t V = 50257;
    ref::Vec mutant(want.value.size());
    for (size_t r = 0; r < 2; ++r) {
      const float* x = in[0].f32.data() + r * V;
      const double mx = *std::max_element(x, x + V);
      double sum = 0.0, partial = 0.0;
      for (size_t j = 0; j < V; ++j) {
        const double e = std::exp(x[j] - mx);
        sum += e;
        if (j >= 512 && j < 1024) partial += e;
      }
      for (size_t j = 0; j < V; ++j) mutant[r * V + j] = std::exp(x[j] - mx) / (sum - partial);
    }
    EXPECT_FALSE(close("softmax missing a 512-column partial", narrow(mutant), want));
  }
  for (const char* name : {"ce_bwd/scale=0.333333/3x50257", "ce_bwd/scale=2.5/3x50257"}) {
    const OpCase& c = case_named(name);
    const Expected want = c.reference(c.inputs())[0];
    EXPECT_TRUE(close("the reference rounded to float", narrow(want.value), want)) << name;
    ref::Vec mutant = want.value;
    for (double& v : mutant) v *= 1.02;
    EXPECT_FALSE(close("ce_bwd with its scale 2% off", narrow(mutant), want)) << name;
  }
}

// ---------------------------------------------------------------------------------------
// Exact checks, per device
// ---------------------------------------------------------------------------------------

std::vector<Device> devices() {
  std::vector<Device> ds;
  for (const DeviceInfo& d : list_devices()) ds.push_back(d.device);
  return ds;
}

std::string device_name(const ::testing::TestParamInfo<Device>& info) {
  return sanitize(info.param.str());
}

class OpExact : public ::testing::TestWithParam<Device> {};

// The header's dropout_hash against the independent re-derivation in reference.cpp,
// including indices past 2^32 that only the high-word term of the hash reaches.
TEST(DropoutHash, HeaderMatchesIndependentDerivation) {
  const uint64_t seeds[] = {0, 1, 42, 0xFFFFFFFFull, 0x100000000ull, 0xDEADBEEF12345678ull, ~0ull};
  const uint64_t bases[] = {0, 1000, 0xFFFFFF00ull, 0x100000000ull, 0x7FFFFFFFFFFFull};
  for (uint64_t s : seeds)
    for (uint64_t b : bases)
      for (uint64_t i = b; i < b + 300; ++i)
        ASSERT_EQ(dropout_hash(s, i), ref::dropout_hash(s, i)) << "seed " << s << " index " << i;
  // Worked by hand from the formula: the mixer maps 0 to 0, so seed 0, index 0 hashes to 0
  // (and is dropped for every p >= 2^-24).
  EXPECT_EQ(ref::dropout_hash(0, 0), 0u);
  EXPECT_FALSE(ref::dropout_keep(0, 0, 0.1f));
  EXPECT_TRUE(ref::dropout_keep(0, 0, 0.0f));
  EXPECT_EQ(dropout_threshold(0.5f), 1u << 23);
  EXPECT_EQ(dropout_threshold(0.0f), 0u);
  // Site seeds must differ per site (else every layer would drop the same units).
  std::set<uint64_t> site_seeds;
  for (uint64_t site = 0; site < 1000; ++site) site_seeds.insert(dropout_site_seed(7, site));
  EXPECT_EQ(site_seeds.size(), 1000u);
}

// The dropout op's mask is exactly the hash's; the kept fraction is 1 - p; kept elements are
// scaled by float(1 / (1 - p)); p = 0 copies bit for bit.
TEST_P(OpExact, DropoutMaskIsTheHash) {
  const Device dev = GetParam();
  // An inference-only backend (WebGPU) has no training ops.
  if (!backend_for(dev).supports(Op::dropout)) GTEST_SKIP() << dev.str() << " has no dropout";
  constexpr int64_t n = 100003;
  CaseRng rng("exact/dropout");
  std::vector<float> x = rng.floats(n, 0.25f, 2.0f);  // never 0, so a drop is visible
  for (size_t i = 0; i < x.size(); i += 2) x[i] = -x[i];
  const Tensor xt = Tensor::from_vector(x, {n}, dev);

  const std::vector<float> copy = dropout(xt, 0.0f, 123).to_vector<float>();
  EXPECT_EQ(std::memcmp(copy.data(), x.data(), x.size() * sizeof(float)), 0) << "p = 0";

  for (float p : {0.1f, 0.25f, 0.5f, 0.9f})
    for (uint64_t seed : {uint64_t{1}, uint64_t{0x123456789ABCDEF0ull}, uint64_t{1} << 32}) {
      SCOPED_TRACE("p " + std::to_string(p) + " seed " + std::to_string(seed));
      const std::vector<float> y = dropout(xt, p, seed).to_vector<float>();
      const float s = 1.0f / (1.0f - p);
      int64_t kept = 0, wrong = 0;
      for (int64_t i = 0; i < n; ++i) {
        const bool keep = ref::dropout_keep(seed, static_cast<uint64_t>(i), p);
        const float want = keep ? x[static_cast<size_t>(i)] * s : 0.0f;
        if (y[static_cast<size_t>(i)] != want) ++wrong;
        kept += keep;
      }
      EXPECT_EQ(wrong, 0) << "elements differing from the independent mask * scale";
      // Kept fraction: binomial, 5 standard deviations.
      const double frac = static_cast<double>(kept) / n;
      const double sd = std::sqrt(p * (1.0 - p) / n);
      EXPECT_NEAR(frac, 1.0 - p, 5 * sd);
    }
  // A different seed gives a different mask.
  const std::vector<float> a = dropout(xt, 0.5f, 1).to_vector<float>();
  const std::vector<float> b = dropout(xt, 0.5f, 2).to_vector<float>();
  EXPECT_NE(a, b);
}

INSTANTIATE_TEST_SUITE_P(AllDevices, OpExact, ::testing::ValuesIn(devices()), device_name);

}  // namespace
}  // namespace forge::test
