// The op cases of the training ops: sum_rows, scatter_add_rows, gather_nll, ce_bwd,
// softmax_xent_, dropout, sumsq, adamw and the head layouts' inverses (see op_cases.h).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>

#include "op_case_util.h"

namespace forge::test::cases {

void add_training(Cases& cs) {
  for (const Dims& d : std::vector<Dims>{
           {17}, {1, 1}, {1, 17}, {33, 17}, {785, 3}, {5, 785}, {2, 50257}, {3, 5, 33}}) {
    const int64_t C = d.back();
    cs.add(
        "sum_rows", "", dims_str(d), [d](CaseRng& r) { return Inputs{F(r, d)}; },
        [](const std::vector<Tensor>& t) { return Outputs{host(sum_rows(t[0]))}; },
        [C](const Inputs& x) {
          Vec mag;
          Expected e;
          e.value = ref::sum_rows(W(x[0]), C, &mag);
          for (double s : mag) e.tol.push_back(reduction_tol(kFwdTol, s));
          return Exp{e};
        });
  }

  struct ScatterCase {
    Dims ids;
    int64_t C, rows;
    uint32_t id_limit;  // ids drawn below this (small: many repeats; rows above stay 0)
  };
  const std::vector<ScatterCase> scatter = {{{7}, 17, 3, 3},     {{33}, 1, 5, 4},
                                            {{3, 11}, 17, 4, 4}, {{9}, 3, 50257, 50257},
                                            {{1}, 785, 1, 1},    {{40}, 33, 7, 2}};
  for (const ScatterCase& c : scatter) {
    const Dims idd = c.ids;
    Dims sd = idd;
    sd.push_back(c.C);
    const int64_t C = c.C, rows = c.rows;
    const uint32_t limit = c.id_limit;
    cs.add(
        "scatter_add_rows", "id_limit=" + std::to_string(limit),
        "ids=" + dims_str(idd) + ",C=" + std::to_string(C) + ",rows=" + std::to_string(rows),
        [idd, sd, limit](CaseRng& r) {
          return Inputs{U(idd, ids_with_ends(r, sz(numel(idd)), limit)), F(r, sd)};
        },
        [rows](const std::vector<Tensor>& t) {
          return Outputs{host(scatter_add_rows(t[0], t[1], rows))};
        },
        [C, rows](const Inputs& x) {
          Vec mag;
          Expected e;
          e.value = ref::scatter_add_rows(x[0].u32, W(x[1]), rows, C, &mag);
          for (double s : mag) e.tol.push_back(reduction_tol(kFwdTol, s));
          return Exp{e};
        });
  }

  struct NllCase {
    Dims logits;
    float range = 2.0f;
  };
  const std::vector<NllCase> nll = {{{1, 1}},     {{3, 17}},    {{7, 33}},       {{5, 785}},
                                    {{3, 50257}}, {{2, 3, 17}}, {{4, 33}, 50.0f}};
  for (const NllCase& c : nll) {
    const Dims d = c.logits;
    const int64_t V = d.back(), N = numel(d) / V;
    const float range = c.range;
    const std::string variant = range != 2.0f ? "range=" + num(range) : "";
    auto inputs = [d, N, V, range](CaseRng& r) {
      const Dims td(d.begin(), d.end() - 1);
      return Inputs{F(r, d, -range, range),
                    U(td, ids_with_ends(r, sz(N), static_cast<uint32_t>(V)))};
    };
    cs.add(
        "gather_nll", variant, dims_str(d), inputs,
        [](const std::vector<Tensor>& t) { return Outputs{host(gather_nll(t[0], t[1]))}; },
        [V](const Inputs& x) {
          return Exp{abs_tol(ref::gather_nll(W(x[0]), x[1].u32, V), kBwdTol)};
        });
    for (float s : {1.0f / static_cast<float>(N), 2.5f}) {
      cs.add(
          "ce_bwd", (variant.empty() ? "" : variant + ",") + "scale=" + num(s), dims_str(d), inputs,
          [s](const std::vector<Tensor>& t) { return Outputs{host(ce_bwd(t[0], t[1], s))}; },
          [V, s](const Inputs& x) {
            Expected e;
            e.value = ref::ce_bwd(W(x[0]), x[1].u32, V, s);
            // Relative to the probability; at the target the onehot's -1 adds one rounding
            // at magnitude 1 (2^-24, twice for the scale's product).
            for (size_t i = 0; i < e.value.size(); ++i) {
              const bool target = static_cast<int64_t>(i) % V == x[1].u32[i / sz(V)];
              const double p = e.value[i] / s + (target ? 1.0 : 0.0);
              e.tol.push_back(std::fabs(s) * (kBwdTol * p + (target ? 0x1p-23 : 0.0)) +
                              kUnderflowFloor);
            }
            return Exp{e};
          });
    }
    // The fused classifier: gather_nll's nll, and the logits overwritten by ce_bwd at scale 1.
    cs.add(
        "softmax_xent_", variant, dims_str(d), inputs,
        [](const std::vector<Tensor>& t) {
          Tensor logits = t[0];
          const Tensor nll = softmax_xent_(logits, t[1]);
          return Outputs{host(nll), host(logits)};
        },
        [V](const Inputs& x) {
          Expected g;
          g.value = ref::ce_bwd(W(x[0]), x[1].u32, V, 1.0);
          for (size_t i = 0; i < g.value.size(); ++i) {
            const bool target = static_cast<int64_t>(i) % V == x[1].u32[i / sz(V)];
            const double p = g.value[i] + (target ? 1.0 : 0.0);
            g.tol.push_back(kBwdTol * p + (target ? 0x1p-23 : 0.0) + kUnderflowFloor);
          }
          return Exp{abs_tol(ref::gather_nll(W(x[0]), x[1].u32, V), kBwdTol), g};
        },
        {0});
  }

  for (const Dims& d : std::vector<Dims>{{1}, {17}, {33, 785}, {3, 50257}}) {
    for (float p : {0.0f, 0.1f, 0.5f, 0.9f}) {
      for (uint64_t seed : {uint64_t{0}, uint64_t{42}, uint64_t{0xDEADBEEF12345678ull}}) {
        if (d.size() == 1 && d[0] == 1 && seed != 42) continue;
        cs.add(
            "dropout", "p=" + num(p) + ",seed=" + std::to_string(seed), dims_str(d),
            [d](CaseRng& r) { return Inputs{F(r, d)}; },
            [p, seed](const std::vector<Tensor>& t) {
              return Outputs{host(dropout(t[0], p, seed))};
            },
            [p, seed](const Inputs& x) {
              Expected e;
              e.value = ref::dropout(W(x[0]), p, seed);
              for (double v : e.value) e.tol.push_back(v == 0.0 ? 0.0 : kFwdTol);
              return Exp{e};
            });
      }
    }
  }
  // A slice of a larger batch's mask (index0): offsets that carry into the index's high
  // word mid-tensor (2^32 - 100), and one far into it (a global batch of many sequences).
  for (const Dims& d : std::vector<Dims>{{7}, {33, 785}}) {
    for (uint64_t index0 :
         {uint64_t{1}, uint64_t{12345}, (uint64_t{1} << 32) - 100, uint64_t{0x123456789ABull}}) {
      float p = 0.3f;  // not const: clang would call their captures needless
      uint64_t seed = 77;
      cs.add(
          "dropout", "p=0.3,seed=77,index0=" + std::to_string(index0), dims_str(d),
          [d](CaseRng& r) { return Inputs{F(r, d)}; },
          [p, seed, index0](const std::vector<Tensor>& t) {
            return Outputs{host(dropout(t[0], p, seed, index0))};
          },
          [p, seed, index0](const Inputs& x) {
            Expected e;
            e.value = ref::dropout(W(x[0]), p, seed, index0);
            for (double v : e.value) e.tol.push_back(v == 0.0 ? 0.0 : kFwdTol);
            return Exp{e};
          });
    }
  }

  for (const Dims& d : std::vector<Dims>{{1}, {17}, {1, 1}, {33, 785}, {3, 50257}}) {
    cs.add(
        "sumsq", "", dims_str(d), [d](CaseRng& r) { return Inputs{F(r, d)}; },
        [](const std::vector<Tensor>& t) { return Outputs{host(sumsq(t[0]))}; },
        [](const Inputs& x) {
          const double s = ref::sumsq(W(x[0]));  // every term is positive: sum|terms| = s
          return Exp{abs_tol({s}, reduction_tol(kFwdTol, s))};
        });
  }

  struct AdamCase {
    Dims shape;
    AdamWParams p;  // p.step = the first step
    int steps;
    bool warm;  // m, v start from earlier steps instead of zeros
  };
  auto params = [](float lr, float b1, float b2, float eps, float wd, int64_t step) {
    AdamWParams p;
    p.lr = lr;
    p.beta1 = b1;
    p.beta2 = b2;
    p.eps = eps;
    p.weight_decay = wd;
    p.step = step;
    return p;
  };
  const std::vector<AdamCase> adam = {
      {{17}, params(1e-2f, 0.9f, 0.999f, 1e-8f, 0.0f, 1), 3, false},
      {{33, 785}, params(3e-3f, 0.8f, 0.99f, 1e-6f, 0.1f, 1), 3, false},
      {{1}, params(5e-2f, 0.9f, 0.95f, 1e-8f, 0.01f, 10), 2, true},
      {{5, 33}, params(1e-2f, 0.0f, 0.5f, 1e-3f, 0.5f, 4), 3, true},
  };
  for (const AdamCase& c : adam) {
    const Dims d = c.shape;
    const AdamWParams p0 = c.p;
    const int steps = c.steps;
    const bool warm = c.warm;
    // Outputs hold parameters moved by ~lr per step: tolerate 1e-5, far below one step.
    const std::string variant = "lr=" + num(p0.lr) + ",b1=" + num(p0.beta1) +
                                ",b2=" + num(p0.beta2) + ",eps=" + num(p0.eps) +
                                ",wd=" + num(p0.weight_decay) + ",step=" + std::to_string(p0.step) +
                                "+" + std::to_string(steps) + (warm ? ",warm" : "");
    cs.add(
        "adamw", variant, dims_str(d),
        [d, steps, warm](CaseRng& r) {
          Inputs in{F(r, d)};
          if (warm) {
            in.push_back(F(r, d, -0.5f, 0.5f));
            in.push_back(F(r, d, 0.0f, 1.0f));  // v >= 0
          } else {
            in.push_back(F(r, d, 0.0f, 0.0f));
            in.push_back(F(r, d, 0.0f, 0.0f));
          }
          for (int s = 0; s < steps; ++s) in.push_back(F(r, d));
          return in;
        },
        [p0, steps](const std::vector<Tensor>& t) {
          Tensor param = t[0], m = t[1], v = t[2];
          for (int s = 0; s < steps; ++s) {
            AdamWParams p = p0;
            p.step = p0.step + s;
            adamw(param, t[3 + static_cast<size_t>(s)], m, v, p);
          }
          return Outputs{host(param), host(m), host(v)};
        },
        [p0, steps](const Inputs& x) {
          ref::AdamWState st{W(x[0]), W(x[1]), W(x[2])};
          for (int s = 0; s < steps; ++s)
            ref::adamw(st, W(x[3 + static_cast<size_t>(s)]), p0.lr, p0.beta1, p0.beta2, p0.eps,
                       p0.weight_decay, p0.step + s);
          return Exp{abs_tol(st.param, 1e-5), abs_tol(st.m, 1e-5), abs_tol(st.v, 1e-5)};
        },
        {0, 1, 2});
  }
}

}  // namespace forge::test::cases
