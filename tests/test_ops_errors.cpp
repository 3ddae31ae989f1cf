// Every op's error paths: bad input must throw forge::Error of the right kind, with a message
// that starts with "<op>: ". Device mismatches cannot be produced in a CPU-only build (every
// tensor is on the CPU); check.h's same_device is exercised by the other backends' tests.
// Quick sanity checks of the CPU kernels: test_cpu_kernels.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "forge/forge.h"

using namespace forge;

namespace {

// Runs f and checks it throws forge::Error of `kind` whose message starts with "<op>: ".
template <typename F>
void expect_error(F&& f, ErrorKind kind, const std::string& op, const char* expr) {
  try {
    f();
    ADD_FAILURE() << expr << ": no error thrown (expected " << to_string(kind) << ")";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.kind(), kind) << expr << ": wrong kind, message: " << msg;
    EXPECT_EQ(msg.rfind(op + ": ", 0), 0u)
        << expr << ": message does not start with '" << op << ": ': " << msg;
  } catch (const std::exception& e) {
    ADD_FAILURE() << expr << ": threw a non-forge exception: " << e.what();
  }
}

#define EXPECT_OP_ERROR(stmt, kind, op) \
  expect_error([&] { (void)(stmt); }, ErrorKind::kind, op, #stmt)

Tensor f32(const Shape& s, float v = 0.5f) { return Tensor::full(s, v); }
Tensor u32(const std::vector<uint32_t>& v, const Shape& s) { return Tensor::from_vector(v, s); }
Tensor u32(const Shape& s) { return Tensor::zeros(s, DType::U32); }

// The message of the error f throws ("" if none).
template <typename F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

// ---------------------------------------------------------------------------------------
// Error paths
// ---------------------------------------------------------------------------------------

TEST(OpsErrors, Add) {
  const Tensor a = f32({2, 3});
  EXPECT_OP_ERROR(add(a, f32({2, 4})), Shape, "add");
  EXPECT_OP_ERROR(add(a, f32({3, 2})), Shape, "add");
  EXPECT_OP_ERROR(add(a, f32({2})), Shape, "add");     // row vector of the wrong width
  EXPECT_OP_ERROR(add(a, f32({1, 3})), Shape, "add");  // only a rank-1 [C] broadcasts
  EXPECT_OP_ERROR(add(f32({3}), f32({2, 3})), Shape, "add");
  EXPECT_OP_ERROR(add(a, u32({2, 3})), DType, "add");
  EXPECT_OP_ERROR(add(u32({2, 3}), a), DType, "add");
  EXPECT_OP_ERROR(add(Tensor(), a), Shape, "add");
  EXPECT_OP_ERROR(add(a, Tensor()), Shape, "add");
  EXPECT_NE(message_of([&] { add(a, f32({2, 4})); }).find("[2, 4]"), std::string::npos);
}

TEST(OpsErrors, AddInPlace) {
  Tensor a = f32({2, 3});
  Tensor undefined;
  EXPECT_OP_ERROR(add_(a, f32({4})), Shape, "add_");
  EXPECT_OP_ERROR(add_(a, f32({2, 2})), Shape, "add_");
  EXPECT_OP_ERROR(add_(a, u32({3})), DType, "add_");
  EXPECT_OP_ERROR(add_(undefined, a), Shape, "add_");
  // a was not touched by any failed call.
  for (float v : a.to_vector<float>()) EXPECT_EQ(v, 0.5f);
}

TEST(OpsErrors, ElementwiseDTypesAndUndefined) {
  Tensor undefined;
  Tensor ids = u32({4});
  EXPECT_OP_ERROR(gelu(ids), DType, "gelu");
  EXPECT_OP_ERROR(gelu(undefined), Shape, "gelu");
  EXPECT_OP_ERROR(scale(ids, 2.0f), DType, "scale");
  EXPECT_OP_ERROR(scale(undefined, 2.0f), Shape, "scale");
  EXPECT_OP_ERROR(scale_(ids, 2.0f), DType, "scale_");
  EXPECT_OP_ERROR(scale_(undefined, 2.0f), Shape, "scale_");
  EXPECT_OP_ERROR(sumsq(ids), DType, "sumsq");
  EXPECT_OP_ERROR(sumsq(undefined), Shape, "sumsq");
}

TEST(OpsErrors, GeluBwd) {
  EXPECT_OP_ERROR(gelu_bwd(f32({2, 3}), f32({3, 2})), Shape, "gelu_bwd");
  EXPECT_OP_ERROR(gelu_bwd(f32({6}), f32({2, 3})), Shape, "gelu_bwd");
  EXPECT_OP_ERROR(gelu_bwd(f32({2, 3}), u32({2, 3})), DType, "gelu_bwd");
  EXPECT_OP_ERROR(gelu_bwd(Tensor(), f32({2, 3})), Shape, "gelu_bwd");
}

TEST(OpsErrors, Softmax) {
  EXPECT_OP_ERROR(softmax(f32({})), Shape, "softmax");         // rank 0
  EXPECT_OP_ERROR(softmax(f32({4}), true), Shape, "softmax");  // causal needs rank >= 2
  EXPECT_OP_ERROR(softmax(f32({4, 4}), true, -1), Range, "softmax");
  EXPECT_OP_ERROR(softmax(u32({4, 4})), DType, "softmax");
  EXPECT_OP_ERROR(softmax(Tensor()), Shape, "softmax");
  // A large offset is allowed: nothing is masked.
  EXPECT_NO_THROW(softmax(f32({2, 3}), true, std::numeric_limits<int64_t>::max()));
  // Non-causal ignores the offset, even a negative one.
  EXPECT_NO_THROW(softmax(f32({2, 3}), false, -5));
}

TEST(OpsErrors, SoftmaxBwd) {
  EXPECT_OP_ERROR(softmax_bwd(f32({2, 3}), f32({2, 4})), Shape, "softmax_bwd");
  EXPECT_OP_ERROR(softmax_bwd(f32({}), f32({})), Shape, "softmax_bwd");
  EXPECT_OP_ERROR(softmax_bwd(f32({2, 3}), u32({2, 3})), DType, "softmax_bwd");
  EXPECT_OP_ERROR(softmax_bwd(Tensor(), f32({2, 3})), Shape, "softmax_bwd");
}

TEST(OpsErrors, LayerNorm) {
  const Tensor x = f32({2, 4}), g = f32({4}), b = f32({4});
  EXPECT_OP_ERROR(layernorm(x, f32({3}), b), Shape, "layernorm");
  EXPECT_OP_ERROR(layernorm(x, g, f32({5})), Shape, "layernorm");
  EXPECT_OP_ERROR(layernorm(x, f32({1, 4}), b), Shape, "layernorm");
  EXPECT_OP_ERROR(layernorm(f32({}), f32({1}), f32({1})), Shape, "layernorm");
  EXPECT_OP_ERROR(layernorm(u32({2, 4}), g, b), DType, "layernorm");
  EXPECT_OP_ERROR(layernorm(x, u32({4}), b), DType, "layernorm");
  EXPECT_OP_ERROR(layernorm(x, g, u32({4})), DType, "layernorm");
  EXPECT_OP_ERROR(layernorm(x, Tensor(), b), Shape, "layernorm");
  EXPECT_OP_ERROR(layernorm(x, g, b, -1e-5f), Range, "layernorm");
  EXPECT_OP_ERROR(layernorm(x, g, b, std::nanf("")), Range, "layernorm");
  EXPECT_OP_ERROR(layernorm(x, g, b, std::numeric_limits<float>::infinity()), Range, "layernorm");
}

TEST(OpsErrors, LayerNormBwd) {
  const Tensor x = f32({2, 4}), g = f32({4});
  EXPECT_OP_ERROR(layernorm_bwd(x, g, f32({2, 3})), Shape, "layernorm_bwd");
  EXPECT_OP_ERROR(layernorm_bwd(x, f32({3}), f32({2, 4})), Shape, "layernorm_bwd");
  EXPECT_OP_ERROR(layernorm_bwd(f32({}), f32({1}), f32({})), Shape, "layernorm_bwd");
  EXPECT_OP_ERROR(layernorm_bwd(x, g, u32({2, 4})), DType, "layernorm_bwd");
  EXPECT_OP_ERROR(layernorm_bwd(x, Tensor(), x), Shape, "layernorm_bwd");
  EXPECT_OP_ERROR(layernorm_bwd(x, g, x, -1.0f), Range, "layernorm_bwd");
}

TEST(OpsErrors, SumRows) {
  EXPECT_OP_ERROR(sum_rows(f32({})), Shape, "sum_rows");
  EXPECT_OP_ERROR(sum_rows(u32({2, 3})), DType, "sum_rows");
  EXPECT_OP_ERROR(sum_rows(Tensor()), Shape, "sum_rows");
  EXPECT_OP_ERROR(argmax_rows(f32({})), Shape, "argmax_rows");
  EXPECT_OP_ERROR(argmax_rows(u32({2, 3})), DType, "argmax_rows");
  EXPECT_OP_ERROR(argmax_rows(f32({3, 0})), Shape, "argmax_rows");  // rows of nothing
  Tensor ids = u32({3}), f = f32({3}), few = u32({2}), none;
  EXPECT_OP_ERROR(argmax_rows_into(f32({3, 4}), few), Shape, "argmax_rows_into");
  EXPECT_OP_ERROR(argmax_rows_into(f32({3, 4}), f), DType, "argmax_rows_into");
  EXPECT_OP_ERROR(argmax_rows_into(f32({3, 4}), none), Shape, "argmax_rows_into");
  EXPECT_OP_ERROR(argmax_rows_into(f32({3, 0}), ids), Shape, "argmax_rows_into");
  EXPECT_OP_ERROR(argmax_rows_into(u32({3, 4}), ids), DType, "argmax_rows_into");
}

TEST(OpsErrors, Embedding) {
  const Tensor table = f32({5, 3});
  EXPECT_OP_ERROR(embedding(u32({0, 5}, {2}), table), Range, "embedding");
  EXPECT_OP_ERROR(embedding(u32({0xFFFFFFFFu}, {1}), table), Range, "embedding");
  EXPECT_OP_ERROR(embedding(u32({0}, {1}), f32({0, 3})), Range, "embedding");  // empty table
  EXPECT_OP_ERROR(embedding(f32({2}), table), DType, "embedding");             // f32 ids
  EXPECT_OP_ERROR(embedding(u32({0}, {1}), u32({5, 3})), DType, "embedding");  // u32 table
  EXPECT_OP_ERROR(embedding(u32({0}, {1}), f32({15})), Shape, "embedding");
  EXPECT_OP_ERROR(embedding(u32({0}, {1}), f32({1, 5, 3})), Shape, "embedding");
  EXPECT_OP_ERROR(embedding(Tensor(), table), Shape, "embedding");
  const std::string msg = message_of([&] { embedding(u32({1, 2, 7}, {3}), table); });
  EXPECT_NE(msg.find("7"), std::string::npos) << msg;  // names the bad id
}

TEST(OpsErrors, ScatterAddRows) {
  const Tensor ids = u32({0, 3}, {2});
  const Tensor src = f32({2, 4});
  EXPECT_OP_ERROR(scatter_add_rows(ids, src, 3), Range, "scatter_add_rows");  // id 3 >= 3
  EXPECT_OP_ERROR(scatter_add_rows(ids, src, -1), Range, "scatter_add_rows");
  EXPECT_OP_ERROR(scatter_add_rows(ids, src, (int64_t{1} << 32) + 1), Range, "scatter_add_rows");
  EXPECT_OP_ERROR(scatter_add_rows(ids, f32({3, 4}), 5), Shape, "scatter_add_rows");
  EXPECT_OP_ERROR(scatter_add_rows(ids, f32({}), 5), Shape, "scatter_add_rows");
  EXPECT_OP_ERROR(scatter_add_rows(f32({2}), src, 5), DType, "scatter_add_rows");
  EXPECT_OP_ERROR(scatter_add_rows(ids, u32({2, 4}), 5), DType, "scatter_add_rows");
  EXPECT_OP_ERROR(scatter_add_rows(Tensor(), src, 5), Shape, "scatter_add_rows");
}

TEST(OpsErrors, GatherNllCeBwdAndSoftmaxXent) {
  const Tensor logits = f32({2, 5});
  for (const char* op : {"gather_nll", "ce_bwd", "softmax_xent_"}) {
    auto run = [&](const Tensor& l, const Tensor& t) {
      const std::string o = op;
      if (o == "softmax_xent_") {
        Tensor in_place = l;
        return softmax_xent_(in_place, t);
      }
      return o == "gather_nll" ? gather_nll(l, t) : ce_bwd(l, t, 0.5f);
    };
    EXPECT_OP_ERROR(run(logits, u32({0, 5}, {2})), Range, op);  // target 5 >= V
    EXPECT_OP_ERROR(run(logits, u32({0, 1, 2}, {3})), Shape, op);
    EXPECT_OP_ERROR(run(logits, u32({0}, {1})), Shape, op);
    EXPECT_OP_ERROR(run(f32({}), u32({0}, {1})), Shape, op);
    EXPECT_OP_ERROR(run(logits, f32({2})), DType, op);
    EXPECT_OP_ERROR(run(u32({2, 5}), u32({0, 1}, {2})), DType, op);
    EXPECT_OP_ERROR(run(Tensor(), u32({0, 1}, {2})), Shape, op);
    EXPECT_OP_ERROR(run(logits, Tensor()), Shape, op);
    EXPECT_OP_ERROR(run(f32({2, 0}), u32({0, 0}, {2})), Range, op);  // V = 0: no valid target
  }
}

TEST(OpsErrors, Dropout) {
  const Tensor x = f32({8});
  EXPECT_OP_ERROR(dropout(x, 1.0f, 1), Range, "dropout");
  EXPECT_OP_ERROR(dropout(x, -0.1f, 1), Range, "dropout");
  EXPECT_OP_ERROR(dropout(x, 1.5f, 1), Range, "dropout");
  EXPECT_OP_ERROR(dropout(x, std::nanf(""), 1), Range, "dropout");
  EXPECT_OP_ERROR(dropout(u32({8}), 0.1f, 1), DType, "dropout");
  EXPECT_OP_ERROR(dropout(Tensor(), 0.1f, 1), Shape, "dropout");
}

TEST(OpsErrors, SplitHeads) {
  const Tensor qkv = f32({2, 3, 12});                             // C = 4
  EXPECT_OP_ERROR(split_heads(qkv, 3, 0), Shape, "split_heads");  // 3 does not divide 4
  EXPECT_OP_ERROR(split_heads(qkv, 2, 3), Range, "split_heads");  // part not in 0..2
  EXPECT_OP_ERROR(split_heads(qkv, 2, -1), Range, "split_heads");
  EXPECT_OP_ERROR(split_heads(qkv, 0, 0), Range, "split_heads");
  EXPECT_OP_ERROR(split_heads(qkv, -2, 0), Range, "split_heads");
  EXPECT_OP_ERROR(split_heads(f32({2, 3, 10}), 1, 0), Shape, "split_heads");  // not 3C
  EXPECT_OP_ERROR(split_heads(f32({12}), 2, 0), Shape, "split_heads");
  EXPECT_OP_ERROR(split_heads(f32({1, 2, 3, 12}), 2, 0), Shape, "split_heads");
  EXPECT_OP_ERROR(split_heads(u32({2, 3, 12}), 2, 0), DType, "split_heads");
  EXPECT_OP_ERROR(split_heads(Tensor(), 2, 0), Shape, "split_heads");
  // C = 0 would let any n_head divide it: a huge one must not overflow B * n_head.
  EXPECT_OP_ERROR(split_heads(f32({4, 3, 0}), int64_t{1} << 62, 0), Shape, "split_heads");
}

TEST(OpsErrors, MergeHeads) {
  EXPECT_OP_ERROR(merge_heads(f32({6, 3, 4}), 4), Shape, "merge_heads");  // 6 % 4 != 0
  EXPECT_OP_ERROR(merge_heads(f32({6, 4}), 2), Shape, "merge_heads");
  EXPECT_OP_ERROR(merge_heads(f32({6, 3, 4}), 0), Range, "merge_heads");
  EXPECT_OP_ERROR(merge_heads(u32({6, 3, 4}), 2), DType, "merge_heads");
  EXPECT_OP_ERROR(merge_heads(Tensor(), 2), Shape, "merge_heads");
  EXPECT_OP_ERROR(merge_heads(f32({0, 3, 4}), int64_t{1} << 62), Shape, "merge_heads");
}

TEST(OpsErrors, UnsplitHead) {
  const Tensor d = f32({4, 3, 2});
  EXPECT_OP_ERROR(unsplit_head(d, d, f32({4, 3, 3}), 2), Shape, "unsplit_head");
  EXPECT_OP_ERROR(unsplit_head(d, f32({4, 2, 2}), d, 2), Shape, "unsplit_head");
  EXPECT_OP_ERROR(unsplit_head(d, d, d, 3), Shape, "unsplit_head");  // 4 % 3 != 0
  EXPECT_OP_ERROR(unsplit_head(d, d, d, 0), Range, "unsplit_head");
  EXPECT_OP_ERROR(unsplit_head(f32({4, 6}), f32({4, 6}), f32({4, 6}), 2), Shape, "unsplit_head");
  EXPECT_OP_ERROR(unsplit_head(d, u32({4, 3, 2}), d, 2), DType, "unsplit_head");
  EXPECT_OP_ERROR(unsplit_head(d, d, Tensor(), 2), Shape, "unsplit_head");
}

TEST(OpsErrors, UnmergeHeads) {
  EXPECT_OP_ERROR(unmerge_heads(f32({2, 3, 10}), 4), Shape, "unmerge_heads");  // 4 !| 10
  EXPECT_OP_ERROR(unmerge_heads(f32({10}), 2), Shape, "unmerge_heads");
  EXPECT_OP_ERROR(unmerge_heads(f32({1, 2, 3, 4}), 2), Shape, "unmerge_heads");
  EXPECT_OP_ERROR(unmerge_heads(f32({2, 3, 8}), 0), Range, "unmerge_heads");
  EXPECT_OP_ERROR(unmerge_heads(u32({2, 3, 8}), 2), DType, "unmerge_heads");
  EXPECT_OP_ERROR(unmerge_heads(Tensor(), 2), Shape, "unmerge_heads");
}

TEST(OpsErrors, Attention) {
  // qkv [1, 2, 12]: C = 4, 2 heads of hd 2; caches [2, cap 4, 2].
  const Tensor qkv = f32({1, 2, 12});
  Tensor kc = f32({2, 4, 2}, 0.0f), vc = f32({2, 4, 2}, 0.0f);
  EXPECT_OP_ERROR(attention(f32({2, 11}), 1), Shape, "attention");  // 11 not 3C
  EXPECT_OP_ERROR(attention(f32({12}), 2), Shape, "attention");     // rank 1
  EXPECT_OP_ERROR(attention(f32({1, 1, 2, 12}), 2), Shape, "attention");
  EXPECT_OP_ERROR(attention(qkv, 3), Shape, "attention");  // 3 does not divide 4
  EXPECT_OP_ERROR(attention(qkv, 0), Range, "attention");
  EXPECT_OP_ERROR(attention(u32({1, 2, 12}), 2), DType, "attention");
  EXPECT_OP_ERROR(attention(Tensor(), 2), Shape, "attention");
  EXPECT_OP_ERROR(attention(qkv, 2, Tensor(), Tensor(), 1), Range, "attention");  // no cache
  EXPECT_OP_ERROR(attention(qkv, 2, kc, Tensor(), 0), Shape, "attention");        // one cache only
  EXPECT_OP_ERROR(attention(qkv, 2, Tensor(), vc, 0), Shape, "attention");
  EXPECT_OP_ERROR(attention(qkv, 2, kc, vc, -1), Range, "attention");
  EXPECT_OP_ERROR(attention(qkv, 2, kc, vc, 3), Range, "attention");  // 3 + 2 > 4
  EXPECT_OP_ERROR(attention(qkv, 2, kc, vc, std::numeric_limits<int64_t>::max()), Range,
                  "attention");
  EXPECT_OP_ERROR(attention(qkv, 2, f32({3, 4, 2}), f32({3, 4, 2}), 0), Shape, "attention");
  EXPECT_OP_ERROR(attention(qkv, 2, f32({2, 4, 3}), f32({2, 4, 3}), 0), Shape, "attention");
  EXPECT_OP_ERROR(attention(qkv, 2, kc, f32({2, 5, 2}), 0), Shape, "attention");  // shapes differ
  EXPECT_OP_ERROR(attention(qkv, 2, f32({8, 2}), f32({8, 2}), 0), Shape, "attention");
  EXPECT_OP_ERROR(attention(qkv, 2, u32({2, 4, 2}), u32({2, 4, 2}), 0), DType, "attention");
  const std::string msg = message_of([&] { attention(qkv, 2, kc, vc, 3); });
  EXPECT_NE(msg.find("kv overflow"), std::string::npos) << msg;
  // Nothing was written by the failed calls; an exact fit is fine, and so is T = 0.
  for (float v : kc.to_vector<float>()) EXPECT_EQ(v, 0.0f);
  EXPECT_NO_THROW(attention(qkv, 2, kc, vc, 2));
  EXPECT_EQ(attention(f32({1, 0, 12}), 2, kc, vc, 4).shape(), Shape({1, 0, 4}));
  EXPECT_EQ(attention(f32({3, 12}), 2).shape(), Shape({1, 3, 4}));
}

TEST(OpsErrors, LayernormMatmul) {
  const Tensor x = f32({1, 4}), g = f32({4}), b = f32({4}), w = f32({4, 3});
  EXPECT_OP_ERROR(layernorm_matmul(x, g, b, 1e-5f, f32({5, 3})), Shape, "layernorm_matmul");
  EXPECT_OP_ERROR(layernorm_matmul(x, f32({3}), b, 1e-5f, w), Shape, "layernorm_matmul");
  EXPECT_OP_ERROR(layernorm_matmul(x, g, f32({5}), 1e-5f, w), Shape, "layernorm_matmul");
  EXPECT_OP_ERROR(layernorm_matmul(x, g, b, -1.0f, w), Range, "layernorm_matmul");
  EXPECT_OP_ERROR(layernorm_matmul(x, g, b, std::nanf(""), w), Range, "layernorm_matmul");
  EXPECT_OP_ERROR(layernorm_matmul(x, u32({4}), b, 1e-5f, w), DType, "layernorm_matmul");
  EXPECT_OP_ERROR(layernorm_matmul(f32({4}), g, b, 1e-5f, w), Shape, "layernorm_matmul");
  EXPECT_OP_ERROR(layernorm_matmul(f32({4, 1}), f32({1}), f32({1}), 1e-5f, w, {.trans_a = true}),
                  Shape, "layernorm_matmul");
  EXPECT_OP_ERROR(layernorm_matmul(x, g, b, 1e-5f, w, {}, f32({4})), Shape, "layernorm_matmul");
  EXPECT_OP_ERROR(layernorm_matmul(x, g, Tensor(), 1e-5f, w), Shape, "layernorm_matmul");
  EXPECT_EQ(layernorm_matmul(x, g, b, 1e-5f, w).shape(), Shape({1, 3}));
  EXPECT_EQ(layernorm_matmul(f32({2, 1, 4}), g, b, 1e-5f, w).shape(), Shape({2, 1, 3}));
}

TEST(OpsErrors, MatmulAddLayernormMatmul) {
  // x [1, 4] += a [1, 5] @ w1 [5, 4] + b1, then layernorm(x) @ w2 [4, 3].
  const Tensor x = f32({1, 4}), a = f32({1, 5}), w1 = f32({5, 4}), b1 = f32({4});
  const Tensor g = f32({4}), b = f32({4}), w2 = f32({4, 3});
  const char* op = "matmul_add_layernorm_matmul";
  auto seam = [&](const Tensor& x_, const Tensor& a_, const Tensor& w1_, const Tensor& b1_,
                  const Tensor& g_, float eps, const Tensor& w2_) {
    return matmul_add_layernorm_matmul(x_, a_, w1_, b1_, g_, b, eps, w2_);
  };
  EXPECT_OP_ERROR(seam(f32({1, 3}), a, w1, b1, g, 1e-5f, w2), Shape, op);  // x is not a @ w1's
  EXPECT_OP_ERROR(seam(x, f32({1, 6}), w1, b1, g, 1e-5f, w2), Shape, op);  // a's k != w1's
  EXPECT_OP_ERROR(seam(x, a, w1, f32({3}), g, 1e-5f, w2), Shape, op);      // b1
  EXPECT_OP_ERROR(seam(x, a, w1, b1, f32({3}), 1e-5f, w2), Shape, op);     // gamma
  EXPECT_OP_ERROR(seam(x, a, w1, b1, g, -1.0f, w2), Range, op);            // eps
  EXPECT_OP_ERROR(seam(x, a, w1, b1, g, 1e-5f, f32({5, 3})), Shape, op);   // w2's k != 4
  EXPECT_OP_ERROR(seam(x, a, u32({5, 4}), b1, g, 1e-5f, w2), DType, op);
  // x is only read: it may share memory with anything, and it is left as it was.
  const Tensor xs = Tensor::from_vector(std::vector<float>{1, 2, 3, 4}, {1, 4});
  const ResidualProduct r = seam(xs, a, w1, b1, g, 1e-5f, w2);
  EXPECT_EQ(r.x.shape(), Shape({1, 4}));
  EXPECT_EQ(r.out.shape(), Shape({1, 3}));
  EXPECT_EQ(xs.to_vector<float>(), (std::vector<float>{1, 2, 3, 4}));
  EXPECT_EQ(seam(f32({0, 4}), f32({0, 5}), w1, b1, g, 1e-5f, w2).out.shape(), Shape({0, 3}));
  // w2 of no columns: x_new only (0.5 + 5 * 0.25 + 0.5 with inputs of 0.5).
  const ResidualProduct none = seam(x, a, w1, b1, g, 1e-5f, f32({4, 0}));
  EXPECT_EQ(none.out.shape(), Shape({1, 0}));
  EXPECT_EQ(none.x.to_vector<float>(), std::vector<float>(4, 2.25f));
}

TEST(OpsErrors, AttentionAt) {
  // qkv [1, 2, 12]: C = 4, 2 heads of hd 2; caches [2, cap 4, 2]; pos U32 [1].
  const Tensor qkv = f32({1, 2, 12});
  Tensor kc = f32({2, 4, 2}, 0.0f), vc = f32({2, 4, 2}, 0.0f);
  const Tensor pos = u32({2}, {1});
  EXPECT_OP_ERROR(attention_at(qkv, 2, Tensor(), Tensor(), pos), Shape, "attention_at");
  EXPECT_OP_ERROR(attention_at(qkv, 2, kc, Tensor(), pos), Shape, "attention_at");
  EXPECT_OP_ERROR(attention_at(qkv, 2, kc, vc, f32({1}, 2.0f)), DType, "attention_at");
  EXPECT_OP_ERROR(attention_at(qkv, 2, kc, vc, u32({1, 1}, {2})), Shape, "attention_at");
  EXPECT_OP_ERROR(attention_at(qkv, 2, kc, vc, Tensor()), Shape, "attention_at");
  EXPECT_OP_ERROR(attention_at(qkv, 2, kc, vc, u32({3}, {1})), Range, "attention_at");  // 3 + 2 > 4
  EXPECT_OP_ERROR(attention_at(qkv, 3, kc, vc, pos), Shape, "attention_at");
  EXPECT_OP_ERROR(attention_at(f32({1, 5, 12}), 2, kc, vc, pos), Range, "attention_at");  // T > cap
  EXPECT_OP_ERROR(attention_at(qkv, 2, f32({2, 4, 3}), f32({2, 4, 3}), pos), Shape, "attention_at");
  for (float v : kc.to_vector<float>()) EXPECT_EQ(v, 0.0f);
  EXPECT_EQ(attention_at(qkv, 2, kc, vc, pos).shape(), Shape({1, 2, 4}));
}

TEST(OpsErrors, AdamW) {
  Tensor p = f32({4}), m = f32({4}, 0.0f), v = f32({4}, 0.0f);
  const Tensor g = f32({4});
  Tensor wrong = f32({5}), ids = u32({4}), undefined;
  AdamWParams ok;
  EXPECT_OP_ERROR(adamw(p, wrong, m, v, ok), Shape, "adamw");
  EXPECT_OP_ERROR(adamw(p, g, wrong, v, ok), Shape, "adamw");
  EXPECT_OP_ERROR(adamw(p, g, m, wrong, ok), Shape, "adamw");
  EXPECT_OP_ERROR(adamw(ids, g, m, v, ok), DType, "adamw");
  EXPECT_OP_ERROR(adamw(p, g, ids, v, ok), DType, "adamw");
  EXPECT_OP_ERROR(adamw(undefined, g, m, v, ok), Shape, "adamw");
  auto with = [&](auto set) {
    AdamWParams q;
    set(q);
    return q;
  };
  const float nan = std::nanf("");
  const float inf = std::numeric_limits<float>::infinity();
  for (const AdamWParams& bad : {
           with([](AdamWParams& q) { q.lr = -1e-3f; }),
           with([&](AdamWParams& q) { q.lr = nan; }),
           with([&](AdamWParams& q) { q.lr = inf; }),
           with([](AdamWParams& q) { q.beta1 = 1.0f; }),
           with([](AdamWParams& q) { q.beta1 = -0.1f; }),
           with([](AdamWParams& q) { q.beta2 = 1.0f; }),
           with([&](AdamWParams& q) { q.beta2 = nan; }),
           with([](AdamWParams& q) { q.eps = 0.0f; }),
           with([](AdamWParams& q) { q.eps = -1e-8f; }),
           with([](AdamWParams& q) { q.weight_decay = -0.1f; }),
           with([](AdamWParams& q) { q.step = 0; }),
           with([](AdamWParams& q) { q.step = -3; }),
       }) {
    EXPECT_OP_ERROR(adamw(p, g, m, v, bad), Range, "adamw");
  }
  // No failed call touched the state.
  for (float x : p.to_vector<float>()) EXPECT_EQ(x, 0.5f);
  for (float x : m.to_vector<float>()) EXPECT_EQ(x, 0.0f);
}

TEST(OpsErrors, Matmul) {
  const Tensor a = f32({2, 3}), b = f32({3, 4});
  EXPECT_OP_ERROR(matmul(a, f32({4, 5})), Shape, "matmul");  // inner dims differ
  EXPECT_OP_ERROR(matmul(f32({3}), b), Shape, "matmul");
  EXPECT_OP_ERROR(matmul(f32({1, 1, 2, 3}), b), Shape, "matmul");
  EXPECT_OP_ERROR(matmul(f32({2, 2, 3}), f32({3, 3, 4})), Shape, "matmul");  // batches differ
  EXPECT_OP_ERROR(matmul(a, b, {}, f32({5})), Shape, "matmul");              // bias not [N]
  EXPECT_OP_ERROR(matmul(a, b, {}, f32({1, 4})), Shape, "matmul");
  EXPECT_OP_ERROR(matmul(u32({2, 3}), b), DType, "matmul");
  EXPECT_OP_ERROR(matmul(a, u32({3, 4})), DType, "matmul");
  EXPECT_OP_ERROR(matmul(a, b, {}, u32({4})), DType, "matmul");
  EXPECT_OP_ERROR(matmul(Tensor(), b), Shape, "matmul");
  MatmulSpec too_many;
  too_many.b_rows = 4;  // b stores 3 rows
  EXPECT_OP_ERROR(matmul(a, b, too_many), Range, "matmul");
  MatmulSpec negative;
  negative.b_rows = -1;
  EXPECT_OP_ERROR(matmul(a, b, negative), Range, "matmul");
  MatmulSpec cut;
  cut.b_rows = 2;  // K becomes 2, a has K = 3
  EXPECT_OP_ERROR(matmul(a, b, cut), Shape, "matmul");
  MatmulSpec ta;
  ta.trans_a = true;  // a used as [3, 2]: K = 2 vs b's 3
  EXPECT_OP_ERROR(matmul(a, b, ta), Shape, "matmul");
}

TEST(OpsErrors, MatmulAdd) {
  const Tensor a = f32({2, 3}), b = f32({3, 4});
  Tensor acc = f32({2, 4});
  EXPECT_OP_ERROR(matmul_add_(acc, a, f32({4, 5})), Shape, "matmul_add_");  // inner dims
  Tensor wrong_shape = f32({2, 5});
  EXPECT_OP_ERROR(matmul_add_(wrong_shape, a, b), Shape, "matmul_add_");
  Tensor transposed = f32({4, 2});
  EXPECT_OP_ERROR(matmul_add_(transposed, a, b), Shape, "matmul_add_");
  Tensor flat = f32({8});
  EXPECT_OP_ERROR(matmul_add_(flat, a, b), Shape, "matmul_add_");
  Tensor batched = f32({1, 2, 4});  // the product is unbatched [2, 4]
  EXPECT_OP_ERROR(matmul_add_(batched, a, b), Shape, "matmul_add_");
  Tensor ids = u32({2, 4});
  EXPECT_OP_ERROR(matmul_add_(ids, a, b), DType, "matmul_add_");
  Tensor undefined;
  EXPECT_OP_ERROR(matmul_add_(undefined, a, b), Shape, "matmul_add_");
  EXPECT_OP_ERROR(matmul_add_(acc, u32({2, 3}), b), DType, "matmul_add_");
  EXPECT_OP_ERROR(matmul_add_(acc, a, b, {}, f32({5})), Shape, "matmul_add_");  // bias not [N]
  MatmulSpec too_many;
  too_many.b_rows = 4;
  EXPECT_OP_ERROR(matmul_add_(acc, a, b, too_many), Range, "matmul_add_");
  // acc sharing memory with an operand: refused (it would change while being read).
  const Tensor both = f32({4, 4});
  Tensor first_rows = both.narrow_rows(0, 2);
  EXPECT_OP_ERROR(matmul_add_(first_rows, both.narrow_rows(1, 2), f32({4, 4})), Shape,
                  "matmul_add_");
  Tensor square = f32({4, 4});
  EXPECT_OP_ERROR(matmul_add_(square, f32({4, 4}), square), Shape, "matmul_add_");
  // Disjoint rows of one storage are fine; no failed call touched acc.
  matmul_add_(first_rows, both.narrow_rows(2, 2), f32({4, 4}));
  for (float x : acc.to_vector<float>()) EXPECT_EQ(x, 0.5f);
}

// Empty tensors are valid input: every op returns the right (empty or zero) result.
TEST(OpsErrors, EmptyTensorsAreFine) {
  const Tensor e = f32({0, 4});
  EXPECT_EQ(add(e, f32({4})).shape(), Shape({0, 4}));
  EXPECT_EQ(gelu(e).shape(), Shape({0, 4}));
  EXPECT_EQ(softmax(e, true).shape(), Shape({0, 4}));
  EXPECT_EQ(layernorm(e, f32({4}), f32({4})).shape(), Shape({0, 4}));
  const LayerNormGrads g = layernorm_bwd(e, f32({4}), e);
  EXPECT_EQ(g.dgamma.to_vector<float>(), std::vector<float>(4, 0.0f));
  EXPECT_EQ(g.dbeta.to_vector<float>(), std::vector<float>(4, 0.0f));
  EXPECT_EQ(sum_rows(e).to_vector<float>(), std::vector<float>(4, 0.0f));
  EXPECT_EQ(sumsq(e).to_vector<float>(), std::vector<float>{0.0f});
  EXPECT_EQ(embedding(u32({0}), f32({3, 4})).shape(), Shape({0, 4}));
  EXPECT_EQ(scatter_add_rows(u32({0}), e, 3).to_vector<float>(), std::vector<float>(12, 0.0f));
  EXPECT_EQ(gather_nll(e, u32({0})).shape(), Shape({0}));
  EXPECT_EQ(argmax_rows(e).shape(), Shape({0}));
  EXPECT_EQ(argmax_rows(f32({0, 0})).shape(), Shape({0}));
  EXPECT_EQ(split_heads(f32({0, 12}), 2, 1).shape(), Shape({2, 0, 2}));
}
