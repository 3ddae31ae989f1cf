// forge bench --op NAME for every op of the op table but matmul (which has its own flags,
// cmd_bench.cpp): the op at GPT-2 124M's shapes (C = 768, 12 heads of 64, V = 50257) over
// --rows tokens, inputs made once on the device, timed like matmul (median of --repeat
// samples). Reports the time, the bytes the op reads and writes per second, and for the
// ops that compute more than they move, GFLOP/s.
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/bench_timing.h"
#include "cli/commands.h"
#include "forge/device_queue.h"
#include "forge/devices.h"
#include "forge/error.h"
#include "forge/op_table.h"
#include "forge/ops.h"

namespace forge::cli {
namespace {

constexpr int64_t kC = 768, kHeads = 12, kHd = 64, kV = 50257;

/// One op ready to time: its inputs live in the closure.
struct OpRun {
  std::string shape;  // the main operand's shape, for the report
  double bytes = 0;   // read and written per call
  double flops = 0;   // 0: the op is about moving bytes
  std::function<void()> run;
};

class Inputs {
 public:
  explicit Inputs(Device d) : d_(d) {}
  Tensor f(const Shape& s) {
    Tensor t = Tensor::empty(s, DType::F32);
    fill_random(t, seed_++);
    bytes_ += static_cast<double>(t.nbytes());
    return d_.is_cpu() ? t : t.to(d_);
  }
  /// Ids in [0, limit), on the host (the index ops take host ids, as the model passes them).
  Tensor ids(int64_t n, int64_t limit) {
    std::vector<uint32_t> v(static_cast<size_t>(n));
    for (size_t i = 0; i < v.size(); ++i)
      v[i] = static_cast<uint32_t>(dropout_hash(seed_, i) % static_cast<uint64_t>(limit));
    ++seed_;
    bytes_ += 4.0 * static_cast<double>(n);
    return Tensor::from_vector(v, {n});
  }
  /// Positive values (AdamW's second moment).
  Tensor positive(const Shape& s) {
    Tensor t = Tensor::full(s, 0.25f);
    bytes_ += static_cast<double>(t.nbytes());
    return d_.is_cpu() ? t : t.to(d_);
  }
  /// Bytes of the inputs made so far, plus `out_elems` f32 outputs.
  double bytes(double out_elems) const { return bytes_ + 4.0 * out_elems; }

 private:
  Device d_;
  uint64_t seed_ = 1;
  double bytes_ = 0;
};

double n(const Shape& s) { return static_cast<double>(s.numel()); }

OpRun make_run(const std::string& op, int64_t R, Device d) {
  Inputs in(d);
  OpRun r;
  const Shape rc{R, kC}, r4c{R, 4 * kC}, heads{kHeads, R, kHd};
  if (op == "add") {
    const Tensor a = in.f(rc), b = in.f(rc);
    r = {rc.str(), in.bytes(n(rc)), 0, [=] { (void)add(a, b); }};
  } else if (op == "gelu") {
    const Tensor x = in.f(r4c);
    r = {r4c.str(), in.bytes(n(r4c)), 0, [=] { (void)gelu(x); }};
  } else if (op == "layernorm_matmul") {
    const Tensor x = in.f(rc), g = in.f({kC}), be = in.f({kC}), w = in.f({kC, 3 * kC}),
                 b = in.f({3 * kC});
    r = {rc.str() + " @ [768, 2304]", in.bytes(3.0 * R * kC), 2.0 * R * kC * 3 * kC,
         [=] { (void)layernorm_matmul(x, g, be, 1e-5f, w, {}, b); }};
  } else if (op == "matmul_add_layernorm_matmul") {
    // The seam after attention: x += y @ W_proj + b, then gelu(ln_2(x) @ W_fc + b).
    const Tensor x = in.f(rc), y = in.f(rc), w1 = in.f({kC, kC}), b1 = in.f({kC}), g = in.f({kC}),
                 be = in.f({kC}), w2 = in.f({kC, 4 * kC}), b2 = in.f({4 * kC});
    r = {rc.str(), in.bytes(5.0 * R * kC), 2.0 * R * (kC * kC + kC * 4 * kC), [=] {
           (void)matmul_add_layernorm_matmul(x, y, w1, b1, g, be, 1e-5f, w2, {.gelu = true}, b2);
         }};
  } else if (op == "softmax") {
    const Shape s{kHeads, R, R};
    const Tensor x = in.f(s);
    r = {s.str() + " causal", in.bytes(n(s)), 0, [=] { (void)softmax(x, true); }};
  } else if (op == "argmax_rows") {
    const Shape s{R, kV};
    const Tensor x = in.f(s);
    r = {s.str(), in.bytes(R), 0, [=] { (void)argmax_rows(x); }};
  } else if (op == "layernorm") {
    const Tensor x = in.f(rc), g = in.f({kC}), b = in.f({kC});
    r = {rc.str(), in.bytes(n(rc)), 0, [=] { (void)layernorm(x, g, b); }};
  } else if (op == "embedding") {
    const Tensor ids = in.ids(R, kV);
    const Tensor table = in.f({kV, kC});
    // The table's rows that are read, not the whole table.
    r = {"ids [" + std::to_string(R) + "] of [50257, 768]", 4.0 * R + 8.0 * R * kC, 0,
         [=] { (void)embedding(ids, table); }};
  } else if (op == "split_heads") {
    const Shape s{1, R, 3 * kC};
    const Tensor qkv = in.f(s);
    r = {s.str(), 4.0 * 2 * R * kC, 0, [=] { (void)split_heads(qkv, kHeads, 0); }};
  } else if (op == "merge_heads") {
    const Tensor x = in.f(heads);
    r = {heads.str(), in.bytes(n(heads)), 0, [=] { (void)merge_heads(x, kHeads); }};
  } else if (op == "attention") {
    const Shape s{1, R, 3 * kC};
    const Tensor qkv = in.f(s);
    // Causal: half the T x T scores, q k^T and p v each 2 hd flops per score.
    r = {s.str() + " causal", in.bytes(R * kC), 2.0 * 2 * kHeads * kHd * R * (R + 1) / 2.0,
         [=] { (void)attention(qkv, kHeads); }};
  } else if (op == "attention_bwd") {
    const Shape s{1, R, 3 * kC};
    const Tensor qkv = in.f(s);
    const Tensor y = attention(qkv, kHeads), dy = in.f({1, R, kC});
    // Five products over half the T x T scores, 2 hd flops each: q k^T (recomputed), dy v^T,
    // P^T dy, dS k and dS^T q.
    r = {s.str() + " causal", in.bytes(4 * R * kC), 5.0 * 2 * kHeads * kHd * R * (R + 1) / 2.0,
         [=] { (void)attention_bwd(qkv, y, dy, kHeads); }};
  } else if (op == "attention_at") {
    // One decode step at position R over a cache of R + 1 rows.
    const Tensor qkv = in.f({1, 1, 3 * kC});
    Tensor kc = in.f({kHeads, R + 1, kHd}), vc = in.f({kHeads, R + 1, kHd});
    Tensor pos = Tensor::from_vector(std::vector<uint32_t>{static_cast<uint32_t>(R)}, {1});
    if (!d.is_cpu()) pos = pos.to(d);
    r = {"step at " + std::to_string(R) + ", cache [12, " + std::to_string(R + 1) + ", 64]",
         in.bytes(kC), 2.0 * 2 * kHeads * kHd * (R + 1),
         [=]() mutable { (void)attention_at(qkv, kHeads, kc, vc, pos); }};
  } else if (op == "gelu_bwd") {
    const Tensor x = in.f(r4c), dy = in.f(r4c);
    r = {r4c.str(), in.bytes(n(r4c)), 0, [=] { (void)gelu_bwd(x, dy); }};
  } else if (op == "softmax_bwd") {
    const Shape s{kHeads, R, R};
    const Tensor y = in.f(s), dy = in.f(s);
    r = {s.str(), in.bytes(n(s)), 0, [=] { (void)softmax_bwd(y, dy); }};
  } else if (op == "layernorm_bwd") {
    const Tensor x = in.f(rc), g = in.f({kC}), dy = in.f(rc);
    r = {rc.str(), in.bytes(n(rc) + 2 * kC), 0, [=] { (void)layernorm_bwd(x, g, dy); }};
  } else if (op == "sum_rows") {
    const Tensor x = in.f(r4c);
    r = {r4c.str(), in.bytes(4 * kC), 0, [=] { (void)sum_rows(x); }};
  } else if (op == "scatter_add_rows") {
    // The embedding's backward into a [50257, 768] gradient (zeroed, then the rows added).
    const Tensor ids = in.ids(R, kV), src = in.f(rc);
    r = {"ids [" + std::to_string(R) + "] into [50257, 768]", in.bytes(double(kV) * kC), 0,
         [=] { (void)scatter_add_rows(ids, src, kV); }};
  } else if (op == "gather_nll" || op == "ce_bwd" || op == "softmax_xent") {
    const Shape s{R, kV};
    const Tensor logits = in.f(s), targets = in.ids(R, kV);
    if (op == "gather_nll")
      r = {s.str(), in.bytes(R), 0, [=] { (void)gather_nll(logits, targets); }};
    else if (op == "softmax_xent")  // in place: later runs take the gradients as logits
      r = {s.str(), in.bytes(R + n(s)), 0, [=] {
             Tensor l = logits;
             (void)softmax_xent_(l, targets);
           }};
    else
      r = {s.str(), in.bytes(n(s)), 0, [=] { (void)ce_bwd(logits, targets, 1.0f / R); }};
  } else if (op == "dropout") {
    const Tensor x = in.f(r4c);
    r = {r4c.str() + " p=0.1", in.bytes(n(r4c)), 0, [=] { (void)dropout(x, 0.1f, 7); }};
  } else if (op == "unsplit_head") {
    const Tensor dq = in.f(heads), dk = in.f(heads), dv = in.f(heads);
    r = {"3 x " + heads.str(), in.bytes(3.0 * R * kC), 0,
         [=] { (void)unsplit_head(dq, dk, dv, kHeads); }};
  } else if (op == "unmerge_heads") {
    const Shape s{1, R, kC};
    const Tensor x = in.f(s);
    r = {s.str(), in.bytes(n(s)), 0, [=] { (void)unmerge_heads(x, kHeads); }};
  } else if (op == "sumsq") {
    const Tensor x = in.f(rc);
    r = {rc.str(), in.bytes(1), 0, [=] { (void)sumsq(x); }};
  } else if (op == "scale") {
    const Tensor x = in.f(r4c);
    r = {r4c.str(), in.bytes(n(r4c)), 0, [=] { (void)scale(x, 0.5f); }};
  } else if (op == "adamw") {
    // An update of R x 768 parameters (param, m and v read and written, grad read).
    Tensor p = in.f(rc), m = in.f(rc), v = in.positive(rc);
    const Tensor g = in.f(rc);
    AdamWParams hp;
    hp.lr = 1e-9f;  // the values barely move over many calls
    r = {rc.str(), in.bytes(3 * n(rc)), 0, [=]() mutable { adamw(p, g, m, v, hp); }};
  } else {
    std::string names;
    for (const OpInfo& i : op_table()) names += (names.empty() ? "" : ", ") + i.name;
    throw Error(ErrorKind::Format, "bench: no op \"" + op + "\" (ops: " + names + ")");
  }
  return r;
}

}  // namespace

std::vector<std::string> bench_op_names() {
  std::vector<std::string> out;
  for (const OpInfo& i : op_table()) out.push_back(i.name);
  return out;
}

int bench_op(const OpBenchOptions& o) {
  if (o.rows < 1 || o.rows > 65536)
    throw Error(ErrorKind::Range, "bench: --rows " + std::to_string(o.rows) + " outside 1..65536");
  const Device device = parse_device(o.device);
  const OpRun r = make_run(o.op, o.rows, device);
  const double sec = median_seconds(r.run, o.repeat, [device] { synchronize(device); });
  const double gbps = r.bytes / sec * 1e-9;
  if (o.json) {
    nlohmann::ordered_json j = {
        {"op", o.op},
        {"device", device.str()},
        {"precision", device_precision(device)},
        {"rows", o.rows},
        {"shape", r.shape},
        {"repeat", o.repeat},
        {"ms", sec * 1e3},
        {"gbps", gbps},
        {"gflops", r.flops > 0 ? nlohmann::ordered_json(r.flops / sec * 1e-9)
                               : nlohmann::ordered_json(nullptr)}};
    std::printf("%s\n", j.dump().c_str());
    return 0;
  }
  std::printf("%s %s on %s: %.4f ms (median of %d), %.1f GB/s", o.op.c_str(), r.shape.c_str(),
              device.str().c_str(), sec * 1e3, o.repeat, gbps);
  if (r.flops > 0) std::printf(", %.1f GFLOP/s", r.flops / sec * 1e-9);
  std::printf("\n");
  return 0;
}

}  // namespace forge::cli
