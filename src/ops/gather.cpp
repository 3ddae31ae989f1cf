// Index-driven ops: embedding, scatter_add_rows, gather_nll, ce_bwd, softmax_xent_.
// Every id/target is range-checked here, on the host, before any kernel runs, so kernels
// never index out of bounds.
#include <cstdint>
#include <string>
#include <vector>

#include "forge/ops.h"
#include "ops/check.h"

namespace forge {
using namespace ops_detail;

namespace {

// Every element of `ids` (U32) is < limit; names the first offender otherwise. Returns the
// ids on `device`: host ids are checked where they are and uploaded (no readback); ids on a
// GPU are read back to be checked, unless `trusted`. Error(Device) for ids on another GPU.
Tensor checked_ids_on(const char* op, const char* name, const Tensor& ids, int64_t limit,
                      const char* limit_name, Device device,
                      DeviceIds device_ids = DeviceIds::check) {
  if (ids.device() != device && ids.device() != Device::cpu())
    fail(ErrorKind::Device, op,
         std::string(name) + "s are on " + ids.device().str() + ", the data on " + device.str());
  if (device_ids == DeviceIds::trusted && ids.device() == device && !device.is_cpu()) return ids;
  const std::vector<uint32_t> v = ids.to_vector<uint32_t>();
  for (size_t i = 0; i < v.size(); ++i) {
    if (static_cast<int64_t>(v[i]) >= limit)
      fail(ErrorKind::Range, op,
           std::string(name) + " " + std::to_string(v[i]) + " at index " + std::to_string(i) +
               " is out of range for " + limit_name + " " + std::to_string(limit));
  }
  return ids.device() == device ? ids : Tensor::from_vector(v, ids.shape(), device);
}

// out shape = ids.shape + [C].
Shape gathered_shape(const char* op, const Tensor& ids, int64_t C) {
  std::vector<int64_t> dims = ids.shape().dims();
  dims.push_back(C);
  return Shape::checked(dims, op);
}

// logits [..., V] with N rows and targets with N elements, every target < V; returns the
// targets on the logits' device.
Tensor check_logits_targets(const char* op, const Tensor& logits, const Tensor& targets) {
  check_f32(op, "logits", logits);
  check_u32(op, "targets", targets);
  check_min_rank(op, "logits", logits, 1);
  if (targets.numel() != logits.shape().rows())
    fail(ErrorKind::Shape, op,
         "targets " + targets.shape().str() + " must hold one target per row of logits " +
             logits.shape().str() + " (" + std::to_string(logits.shape().rows()) + " rows)");
  return checked_ids_on(op, "target", targets, logits.dim(-1), "vocab size", logits.device());
}

}  // namespace

Tensor embedding(const Tensor& ids_in, const Tensor& table, DeviceIds device_ids) {
  const char* op = "embedding";
  check_u32(op, "ids", ids_in);
  if (!table.defined()) fail(ErrorKind::Shape, op, "table is an undefined tensor");
  // A table of the dtypes the op table accepts; the kernel is looked up by them (every
  // backend gathers f32 tables).
  check_input_dtype(Op::embedding, 1, op, table.dtype(), table.shape().str());
  check_rank(op, "table", table, 2, 2);
  const Tensor ids =
      checked_ids_on(op, "id", ids_in, table.dim(0), "table rows", table.device(), device_ids);
  Tensor out = Tensor::empty(gathered_shape(op, ids, table.dim(1)), DType::F32, table.device());
  if (out.numel() > 0) run(backend_for(table.device()), op, Op::embedding, {&ids, &table}, {&out});
  return out;
}

Tensor scatter_add_rows(const Tensor& ids, const Tensor& src, int64_t num_rows) {
  const char* op = "scatter_add_rows";
  check_u32(op, "ids", ids);
  check_f32(op, "src", src);
  check_min_rank(op, "src", src, 1);
  if (src.shape().rows() != ids.numel())
    fail(ErrorKind::Shape, op,
         "src " + src.shape().str() + " has " + std::to_string(src.shape().rows()) +
             " rows but ids " + ids.shape().str() + " has " + std::to_string(ids.numel()) +
             " elements");
  // Rows past 2^32 could never be addressed by a U32 id.
  constexpr int64_t kMaxRows = int64_t{1} << 32;
  if (num_rows < 0 || num_rows > kMaxRows)
    fail(ErrorKind::Range, op, "num_rows " + std::to_string(num_rows) + " outside [0, 2^32]");
  const Tensor dev_ids = checked_ids_on(op, "id", ids, num_rows, "num_rows", src.device());
  Tensor out = Tensor::zeros(Shape::checked({num_rows, src.dim(-1)}, op), DType::F32, src.device());
  if (src.numel() > 0 && out.numel() > 0)
    run(backend_for(src.device()), op, Op::scatter_add_rows, {&dev_ids, &src}, {&out});
  return out;
}

Tensor gather_nll(const Tensor& logits, const Tensor& targets) {
  const char* op = "gather_nll";
  const Tensor tg = check_logits_targets(op, logits, targets);
  Tensor out = Tensor::empty({logits.shape().rows()}, DType::F32, logits.device());
  if (out.numel() > 0)
    run(backend_for(logits.device()), op, Op::gather_nll, {&logits, &tg}, {&out});
  return out;
}

Tensor ce_bwd(const Tensor& logits, const Tensor& targets, float scale) {
  const char* op = "ce_bwd";
  const Tensor tg = check_logits_targets(op, logits, targets);
  Tensor out = Tensor::empty(logits.shape(), DType::F32, logits.device());
  if (out.numel() > 0) {
    OpAttrs at;
    at.scale = scale;
    run(backend_for(logits.device()), op, Op::ce_bwd, {&logits, &tg}, {&out}, at);
  }
  return out;
}

Tensor softmax_xent_(Tensor& logits, const Tensor& targets) {
  const char* op = "softmax_xent_";
  const Tensor tg = check_logits_targets(op, logits, targets);
  Tensor nll = Tensor::empty({logits.shape().rows()}, DType::F32, logits.device());
  if (nll.numel() > 0 && logits.numel() > 0)
    run(backend_for(logits.device()), op, Op::softmax_xent, {&tg}, {&logits, &nll});
  return nll;
}

}  // namespace forge
