// The differentiable functions: each runs the forward op of ops.h and, when an input
// requires grad, records the backward rule built from the training ops.
#include <initializer_list>
#include <unordered_map>
#include <utility>

#include "autograd/node.h"
#include "forge/ops.h"

namespace forge::ag {
using detail::Access;
using detail::BackwardCtx;
using detail::fail;
using detail::Node;
using detail::TapeState;
using NodePtr = std::shared_ptr<Node>;

namespace {

struct Named {
  const char* name;
  const Var* var;
};

/// The one live tape all `vars` belong to. Throws for undefined Vars, Vars of different
/// tapes, a destroyed tape, or a tape that already ran backward.
std::shared_ptr<TapeState> tape_of(const char* op, std::initializer_list<Named> vars) {
  std::shared_ptr<TapeState> tape;
  for (const Named& v : vars) {
    const NodePtr& n = Access::node(*v.var);
    if (!n) fail(ErrorKind::Shape, op, std::string(v.name) + " is an undefined Var");
    std::shared_ptr<TapeState> t = n->tape.lock();
    if (!t) fail(ErrorKind::Shape, op, std::string(v.name) + " belongs to a destroyed Tape");
    if (!tape) {
      tape = std::move(t);
    } else if (t != tape) {
      fail(ErrorKind::Shape, op, std::string(v.name) + " belongs to another Tape");
    }
  }
  if (tape->backward_done)
    fail(ErrorKind::Shape, op, "the tape already ran backward; record on a new Tape");
  return tape;
}

const Tensor& val(const Var& v) { return Access::node(v)->value; }
bool rg(const Var& v) { return Access::node(v)->requires_grad; }

/// Creates the output nodes; records the rule only when some input requires grad (so
/// inference through Vars keeps no saved tensors).
std::vector<Var> emit_many(const char* op, const std::shared_ptr<TapeState>& tape,
                           std::vector<NodePtr> inputs, std::vector<Tensor> values,
                           std::function<void(BackwardCtx&)> rule) {
  bool any = false;
  for (const NodePtr& n : inputs) any = any || n->requires_grad;
  std::vector<NodePtr> outputs;
  std::vector<Var> vars;
  for (Tensor& v : values) {
    auto n = std::make_shared<Node>();
    n->value = std::move(v);
    n->requires_grad = any;
    n->tape = tape;
    vars.push_back(Access::make_var(n));
    outputs.push_back(std::move(n));
  }
  if (any)
    tape->records.push_back({op, tape->fused, tape->fused_call, std::move(inputs),
                             std::move(outputs), std::move(rule)});
  return vars;
}

Var emit(const char* op, const std::shared_ptr<TapeState>& tape, std::vector<NodePtr> inputs,
         Tensor value, std::function<void(BackwardCtx&)> rule) {
  std::vector<Tensor> values;
  values.push_back(std::move(value));
  return emit_many(op, tape, std::move(inputs), std::move(values), std::move(rule))[0];
}

/// x [B, R, C] -> [R, C]: the sum over the batch of a rank-2 operand that every batch shared.
Tensor sum_batch(const Tensor& x) {
  const int64_t B = x.dim(0), R = x.dim(1), C = x.dim(2);
  return sum_rows(x.reshape({B, R * C})).reshape({R, C});
}

/// d(out)/da for out = alpha * op(a) @ op(b). With A = op(a) [M, K], B = op(b) [K, N]:
/// dA = alpha * dy @ B^T, and da = dA (or dA^T when a is stored transposed).
Tensor matmul_grad_a(size_t a_rank, const Tensor& b, const Tensor& dy, const MatmulSpec& s) {
  Tensor bb = b;
  int64_t b_rows = s.b_rows;
  if (b_rows > 0 && b.rank() == 2) {  // a rank-2 prefix of rows is a free view
    bb = b.narrow_rows(0, b_rows);
    b_rows = 0;
  }
  Tensor da;
  if (!s.trans_a) {
    // [M, N] @ B^T: B^T is b read with the opposite transpose flag (b_rows still applies
    // to b's stored rows, which hold B's rows either way).
    MatmulSpec m;
    m.trans_b = !s.trans_b;
    m.alpha = s.alpha;
    m.b_rows = b_rows;
    if (dy.rank() == 3 && bb.rank() == 2) {
      // A shared b (a linear layer): fold the batch into the rows, one large GEMM.
      const Tensor dy2 = dy.reshape({dy.dim(0) * dy.dim(1), dy.dim(2)});
      const Tensor d2 = matmul(dy2, bb, m);  // [B*M, K]
      da = d2.reshape({dy.dim(0), dy.dim(1), d2.dim(1)});
    } else {
      da = matmul(dy, bb, m);  // [(B,) M, K]
    }
  } else {
    // a stored [K, M]: da = B @ dy^T, with B = b or b^T. (b_rows > 0 with a rank-3 b was
    // rejected when recording.)
    MatmulSpec m;
    m.trans_a = s.trans_b;
    m.trans_b = true;
    m.alpha = s.alpha;
    da = matmul(bb, dy, m);  // [(B,) K, M]
  }
  if (a_rank == 2 && da.rank() == 3) da = sum_batch(da);
  return da;
}

/// d(out)/db: dB = alpha * A^T @ dy; db = dB (or dB^T = alpha * dy^T @ A with trans_b).
Tensor matmul_grad_b(const Tensor& a, size_t b_rank, const Tensor& dy, const MatmulSpec& s) {
  Tensor aa = a, dd = dy;
  if (b_rank == 2 && a.rank() == 3 && !s.trans_a) {
    // A shared b: fold the batch into the rows, so the batch sum happens inside one GEMM.
    aa = a.reshape({a.dim(0) * a.dim(1), a.dim(2)});
    dd = dy.reshape({dy.dim(0) * dy.dim(1), dy.dim(2)});
  }
  MatmulSpec m;
  m.alpha = s.alpha;
  Tensor db;
  if (!s.trans_b) {
    m.trans_a = !s.trans_a;  // A^T is a read with the opposite flag
    db = matmul(aa, dd, m);  // [(B,) K, N]
  } else {
    m.trans_a = true;
    m.trans_b = s.trans_a;
    db = matmul(dd, aa, m);  // [(B,) N, K]
  }
  if (b_rank == 2 && db.rank() == 3) db = sum_batch(db);
  return db;
}

/// The embedding backward into a gradient that already exists (the tied wte, whose LM-head
/// gradient comes first in the backward walk): adds the rows of dy [N, C] into `buf`
/// ([V, C]) in place, touching only the rows of `ids` instead of scattering into a dense
/// zero [V, C] table and adding all of it (154 MB each for GPT-2's wte). Duplicates are
/// summed first by one scatter_add_rows over the distinct ids, in index order as the dense
/// scatter does, so every touched row gets the same float value as the dense path.
void add_rows_into(Tensor& buf, const std::vector<uint32_t>& ids, const Tensor& dy2) {
  std::unordered_map<uint32_t, uint32_t> slot_of;
  std::vector<uint32_t> distinct, slots;
  slots.reserve(ids.size());
  for (uint32_t id : ids) {
    auto [it, fresh] = slot_of.try_emplace(id, static_cast<uint32_t>(distinct.size()));
    if (fresh) distinct.push_back(id);
    slots.push_back(it->second);
  }
  const int64_t U = static_cast<int64_t>(distinct.size());
  // On the host: scatter_add_rows range-checks them there and uploads them (ids on the
  // device would be read back to be checked).
  const Tensor slot_ids = Tensor::from_vector(slots, {static_cast<int64_t>(slots.size())});
  const Tensor sums = scatter_add_rows(slot_ids, dy2, U);  // [U, C]
  for (int64_t j = 0; j < U; ++j) {
    Tensor dst = buf.narrow_rows(distinct[static_cast<size_t>(j)], 1);
    add_(dst, sums.narrow_rows(j, 1));
  }
}

/// The sparse path pays one op call per distinct id; the dense one touches all V rows.
bool sparse_pays(int64_t n_ids, int64_t V) { return n_ids * 4 <= V; }

}  // namespace

// ---- elementwise and row ops -------------------------------------------------------------

Var add(const Var& a, const Var& b) {
  const char* op = "ag::add";
  auto tape = tape_of(op, {{"a", &a}, {"b", &b}});
  Tensor out = forge::add(val(a), val(b));
  const bool row_broadcast = val(a).shape() != val(b).shape();
  return emit(op, tape, {Access::node(a), Access::node(b)}, std::move(out),
              [row_broadcast](BackwardCtx& c) {
                c.give(0, c.dy());
                if (c.needs(1)) c.give(1, row_broadcast ? sum_rows(c.dy()) : c.dy());
              });
}

Var gelu(const Var& x) {
  const char* op = "ag::gelu";
  auto tape = tape_of(op, {{"x", &x}});
  Tensor in = val(x);
  return emit(op, tape, {Access::node(x)}, forge::gelu(in),
              [in](BackwardCtx& c) { c.give(0, gelu_bwd(in, c.dy())); });
}

Var softmax(const Var& x, bool causal, int64_t offset) {
  const char* op = "ag::softmax";
  auto tape = tape_of(op, {{"x", &x}});
  Tensor y = forge::softmax(val(x), causal, offset);
  // softmax_bwd needs only y: masked entries are exact zeros, so the mask needs no flag.
  return emit(op, tape, {Access::node(x)}, y,
              [y](BackwardCtx& c) { c.give(0, softmax_bwd(y, c.dy())); });
}

Var layernorm(const Var& x, const Var& gamma, const Var& beta, float eps) {
  const char* op = "ag::layernorm";
  auto tape = tape_of(op, {{"x", &x}, {"gamma", &gamma}, {"beta", &beta}});
  Tensor in = val(x), g = val(gamma);
  return emit(op, tape, {Access::node(x), Access::node(gamma), Access::node(beta)},
              forge::layernorm(in, g, val(beta), eps), [in, g, eps](BackwardCtx& c) {
                LayerNormGrads d = layernorm_bwd(in, g, c.dy(), eps);
                c.give(0, std::move(d.dx));
                c.give(1, std::move(d.dgamma));
                c.give(2, std::move(d.dbeta));
              });
}

Var dropout(const Var& x, float p, uint64_t seed, uint64_t index0) {
  const char* op = "ag::dropout";
  auto tape = tape_of(op, {{"x", &x}});
  if (p == 0.0f) return x;  // identity: no copy, no record
  return emit(
      op, tape, {Access::node(x)}, forge::dropout(val(x), p, seed, index0),
      [p, seed, index0](BackwardCtx& c) { c.give(0, forge::dropout(c.dy(), p, seed, index0)); });
}

Var scale(const Var& x, float s) {
  const char* op = "ag::scale";
  auto tape = tape_of(op, {{"x", &x}});
  return emit(op, tape, {Access::node(x)}, forge::scale(val(x), s),
              [s](BackwardCtx& c) { c.give(0, forge::scale(c.dy(), s)); });
}

Var reshape(const Var& x, const Shape& shape) {
  const char* op = "ag::reshape";
  auto tape = tape_of(op, {{"x", &x}});
  const Shape in_shape = val(x).shape();
  return emit(op, tape, {Access::node(x)}, val(x).reshape(shape),
              [in_shape](BackwardCtx& c) { c.give(0, c.dy().reshape(in_shape)); });
}

// ---- matmul ------------------------------------------------------------------------------

Var matmul(const Var& a, const Var& b, const MatmulSpec& spec, const Var& bias) {
  const char* op = "ag::matmul";
  auto tape = bias.defined() ? tape_of(op, {{"a", &a}, {"b", &b}, {"bias", &bias}})
                             : tape_of(op, {{"a", &a}, {"b", &b}});
  const Tensor& A = val(a);
  const Tensor& B = val(b);
  // The fused GELU epilogue is an inference kernel: training composes ag::gelu, whose
  // backward needs the pre-activation this product would not keep.
  if (spec.gelu)
    fail(ErrorKind::Unsupported, op, "no gradient through the gelu epilogue; use ag::gelu");
  // Gradients through a row prefix of b (the KV-cache read) are an inference-only feature.
  if (spec.b_rows > 0 && rg(b))
    fail(ErrorKind::Unsupported, op,
         "no gradient for b with b_rows > 0 (b_rows reads a prefix of b's rows); pass a b "
         "that does not require grad");
  if (spec.b_rows > 0 && spec.trans_a && B.rank() == 3 && rg(a))
    fail(ErrorKind::Unsupported, op,
         "no gradient for a trans_a a with b_rows > 0 and a batched b " + B.shape().str());
  Tensor out = forge::matmul(A, B, spec, bias.defined() ? val(bias) : Tensor());
  std::vector<NodePtr> inputs{Access::node(a), Access::node(b)};
  if (bias.defined()) inputs.push_back(Access::node(bias));
  // Save only what the needed gradients read: da reads b, db reads a.
  Tensor saved_a = rg(b) ? A : Tensor();
  Tensor saved_b = rg(a) ? B : Tensor();
  const bool has_bias = bias.defined();
  const size_t a_rank = A.rank(), b_rank = B.rank();
  return emit(op, tape, std::move(inputs), std::move(out),
              [saved_a, saved_b, a_rank, b_rank, spec, has_bias](BackwardCtx& c) {
                const Tensor& dy = c.dy();  // [(B,) M, N]
                if (c.needs(0)) c.give(0, matmul_grad_a(a_rank, saved_b, dy, spec));
                if (c.needs(1)) c.give(1, matmul_grad_b(saved_a, b_rank, dy, spec));
                if (has_bias && c.needs(2)) c.give(2, sum_rows(dy));
              });
}

// ---- gathers and the tied LM head --------------------------------------------------------

Var embedding(const Tensor& ids, const Var& table) {
  const char* op = "ag::embedding";
  auto tape = tape_of(op, {{"table", &table}});
  const int64_t V = val(table).rank() == 2 ? val(table).dim(0) : 0;
  return emit(
      op, tape, {Access::node(table)}, forge::embedding(ids, val(table)), [ids, V](BackwardCtx& c) {
        Tensor* buf = c.grad_buffer(0);
        if (buf && sparse_pays(ids.numel(), V)) {
          const Tensor& dy = c.dy();  // ids.shape + [C]
          add_rows_into(*buf, ids.to_vector<uint32_t>(), dy.reshape({ids.numel(), dy.dim(-1)}));
          return;
        }
        c.give(0, scatter_add_rows(ids, c.dy(), V));
      });
}

namespace {

/// The backward of out = a2 @ W^T (a2: [R, K], W: [V, K], the LM head) for dy2 = g * s
/// ([R, V], g given, the scale s folded into the products): gives W (input 1) its gradient
/// s g^T @ a2 and returns da = s g @ W when input 0 needs it (else undefined).
Tensor head_backward(BackwardCtx& c, const Tensor& a2, const Tensor& w, const Tensor& g, float s) {
  MatmulSpec tn;
  tn.trans_a = true;
  tn.alpha = s;
  if (c.needs(1)) c.give(1, matmul(g, a2, tn));
  MatmulSpec nn;
  nn.alpha = s;
  return c.needs(0) ? matmul(g, w, nn) : Tensor();
}

}  // namespace

Var lm_head_loss(const Var& h, const Var& head, const Tensor& targets, int64_t block_rows) {
  const char* op = "ag::lm_head_loss";
  auto tape = tape_of(op, {{"h", &h}, {"head", &head}});
  const Tensor H = val(h);
  if (H.rank() != 2) fail(ErrorKind::Shape, op, "h must be [N, C], got " + H.shape().str());
  const int64_t N = H.dim(0);
  if (N == 0) fail(ErrorKind::Shape, op, "no rows in h " + H.shape().str());
  if (targets.numel() != N)
    fail(ErrorKind::Shape, op,
         "targets " + targets.shape().str() + " must hold one target per row of h " +
             H.shape().str());
  if (block_rows < 1)
    fail(ErrorKind::Range, op, "block_rows must be >= 1, got " + std::to_string(block_rows));
  const Tensor W = val(head);
  MatmulSpec nt;
  nt.trans_b = true;
  const Tensor tg = targets.reshape({N});
  // Per block of rows: logits [rows, V] and their nll, gathered into one [N] so that the
  // mean is the unblocked op's exactly. The fused classifier leaves in each block the
  // gradient of its summed nll, softmax - onehot, kept for the backward.
  std::vector<Tensor> grads;
  Tensor nll = Tensor::zeros({N}, DType::F32, H.device());
  for (int64_t r = 0; r < N; r += block_rows) {
    const int64_t rows = std::min(block_rows, N - r);
    grads.push_back(forge::matmul(H.narrow_rows(r, rows), W, nt));
    Tensor dst = nll.narrow_rows(r, rows);
    add_(dst, softmax_xent_(grads.back(), tg.narrow_rows(r, rows)));
  }
  Tensor loss = forge::scale(sum_rows(nll.reshape({N, 1})), 1.0f / static_cast<float>(N));
  return emit(op, tape, {Access::node(h), Access::node(head)}, std::move(loss),
              [H, W, grads, block_rows, N](BackwardCtx& c) {
                const float dloss = c.dy_value();
                const float s = dloss / static_cast<float>(N);
                Tensor dh;
                if (c.needs(0) && grads.size() > 1)
                  dh = Tensor::zeros(H.shape(), DType::F32, H.device());
                for (size_t i = 0; i < grads.size(); ++i) {
                  const int64_t r = static_cast<int64_t>(i) * block_rows;
                  const int64_t rows = grads[i].dim(0);
                  const Tensor da = head_backward(c, H.narrow_rows(r, rows), W, grads[i], s);
                  if (!c.needs(0)) continue;
                  if (grads.size() == 1) {
                    dh = da;
                  } else {
                    Tensor dst = dh.narrow_rows(r, rows);
                    add_(dst, da);
                  }
                }
                if (c.needs(0)) c.give(0, dh);
              });
}

// ---- attention layout --------------------------------------------------------------------

Var split_heads(const Var& qkv, int64_t n_head, int part) {
  const char* op = "ag::split_heads";
  auto tape = tape_of(op, {{"qkv", &qkv}});
  const Shape in_shape = val(qkv).shape();
  return emit(op, tape, {Access::node(qkv)}, forge::split_heads(val(qkv), n_head, part),
              [in_shape, n_head, part](BackwardCtx& c) {
                const Tensor& dy = c.dy();  // [B*n_head, T, hd]
                const Tensor z = Tensor::zeros(dy.shape(), DType::F32, dy.device());
                const Tensor d = unsplit_head(part == 0 ? dy : z, part == 1 ? dy : z,
                                              part == 2 ? dy : z, n_head);  // [B, T, 3C]
                c.give(0, d.reshape(in_shape));
              });
}

std::array<Var, 3> split_qkv(const Var& qkv, int64_t n_head) {
  const char* op = "ag::split_qkv";
  auto tape = tape_of(op, {{"qkv", &qkv}});
  const Shape in_shape = val(qkv).shape();
  std::vector<Tensor> parts;
  for (int p = 0; p < 3; ++p) parts.push_back(forge::split_heads(val(qkv), n_head, p));
  std::vector<Var> v = emit_many(
      op, tape, {Access::node(qkv)}, std::move(parts), [in_shape, n_head](BackwardCtx& c) {
        const Tensor d = unsplit_head(c.dy_or_zeros(0), c.dy_or_zeros(1), c.dy_or_zeros(2),
                                      n_head);  // [B, T, 3C]
        c.give(0, d.reshape(in_shape));
      });
  return {v[0], v[1], v[2]};
}

Var merge_heads(const Var& x, int64_t n_head) {
  const char* op = "ag::merge_heads";
  auto tape = tape_of(op, {{"x", &x}});
  return emit(op, tape, {Access::node(x)}, forge::merge_heads(val(x), n_head),
              [n_head](BackwardCtx& c) { c.give(0, unmerge_heads(c.dy(), n_head)); });
}

namespace detail {

Var attention_no_dropout(const Var& qkv, int64_t n_head) {
  const char* op = "ag::attention";
  auto tape = tape_of(op, {{"qkv", &qkv}});
  const Tensor in = val(qkv);
  Tensor y = forge::attention(in, n_head);  // [B, T, C]
  const Tensor out = y;
  return emit(op, tape, {Access::node(qkv)}, std::move(y), [in, out, n_head](BackwardCtx& c) {
    c.give(0, attention_bwd(in, out, c.dy(), n_head));
  });
}

}  // namespace detail

// ---- loss --------------------------------------------------------------------------------

Var cross_entropy(const Var& logits, const Tensor& targets) {
  const char* op = "ag::cross_entropy";
  auto tape = tape_of(op, {{"logits", &logits}});
  const Tensor L = val(logits);
  const Tensor nll = gather_nll(L, targets);  // [N]; validates shapes, dtypes and ranges
  const int64_t N = nll.numel();
  if (N == 0) fail(ErrorKind::Shape, op, "no rows in logits " + L.shape().str());
  // mean = sum over the N rows of an [N, 1] column, times 1/N; stays on the device.
  Tensor loss = forge::scale(sum_rows(nll.reshape({N, 1})), 1.0f / static_cast<float>(N));
  return emit(op, tape, {Access::node(logits)}, std::move(loss), [L, targets, N](BackwardCtx& c) {
    const float dloss = c.dy_value();
    c.give(0, ce_bwd(L, targets, dloss / static_cast<float>(N)));
  });
}

}  // namespace forge::ag
