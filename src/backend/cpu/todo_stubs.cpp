// Kernels not yet written: each throws Unsupported. (Owned by the CPU-kernels work; entries
// are removed as their real implementations land.)
#include "backend/cpu/cpu_backend.h"
#include "forge/error.h"

namespace forge::cpu {
namespace {
[[noreturn]] void todo(const char* op) {
  throw Error(ErrorKind::Unsupported, std::string(op) + ": not implemented on cpu yet");
}
}  // namespace

void CpuBackend::add(const Tensor&, const Tensor&, Tensor&) { todo("add"); }
void CpuBackend::gelu(const Tensor&, Tensor&) { todo("gelu"); }
void CpuBackend::softmax(const Tensor&, bool, int64_t, Tensor&) { todo("softmax"); }
void CpuBackend::layernorm(const Tensor&, const Tensor&, const Tensor&, float, Tensor&) { todo("layernorm"); }
void CpuBackend::embedding(const Tensor&, const Tensor&, int64_t, Tensor&) { todo("embedding"); }
void CpuBackend::split_heads(const Tensor&, int64_t, int, Tensor&) { todo("split_heads"); }
void CpuBackend::merge_heads(const Tensor&, int64_t, Tensor&) { todo("merge_heads"); }
void CpuBackend::kv_append(Tensor&, const Tensor&, int64_t) { todo("kv_append"); }
void CpuBackend::gelu_bwd(const Tensor&, const Tensor&, Tensor&) { todo("gelu_bwd"); }
void CpuBackend::softmax_bwd(const Tensor&, const Tensor&, Tensor&) { todo("softmax_bwd"); }
void CpuBackend::layernorm_bwd(const Tensor&, const Tensor&, const Tensor&, float, Tensor&, Tensor&, Tensor&) { todo("layernorm_bwd"); }
void CpuBackend::sum_rows(const Tensor&, Tensor&) { todo("sum_rows"); }
void CpuBackend::scatter_add_rows(const Tensor&, const Tensor&, Tensor&) { todo("scatter_add_rows"); }
void CpuBackend::gather_nll(const Tensor&, const Tensor&, Tensor&) { todo("gather_nll"); }
void CpuBackend::ce_bwd(const Tensor&, const Tensor&, float, Tensor&) { todo("ce_bwd"); }
void CpuBackend::dropout(const Tensor&, uint64_t, uint32_t, float, Tensor&) { todo("dropout"); }
void CpuBackend::unsplit_head(const Tensor&, const Tensor&, const Tensor&, int64_t, Tensor&) { todo("unsplit_head"); }
void CpuBackend::unmerge_heads(const Tensor&, int64_t, Tensor&) { todo("unmerge_heads"); }
void CpuBackend::sumsq(const Tensor&, Tensor&) { todo("sumsq"); }
void CpuBackend::scale(const Tensor&, float, Tensor&) { todo("scale"); }
void CpuBackend::adamw(Tensor&, const Tensor&, Tensor&, Tensor&, const AdamWParams&) { todo("adamw"); }

}  // namespace forge::cpu
