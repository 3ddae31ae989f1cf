#include "backend/cuda/gemm.h"

#include <string>

#include "backend/cuda/cublaslt_api.h"
#include "backend/cuda/shared_library.h"
#include "forge/error.h"

namespace forge::cuda {
namespace {

struct Lt {
  cublasLtCreate_t create = nullptr;
  cublasLtDestroy_t destroy = nullptr;
  cublasLtGetVersion_t get_version = nullptr;
  cublasLtGetStatusString_t status_string = nullptr;
  cublasLtMatmulDescCreate_t desc_create = nullptr;
  cublasLtMatmulDescDestroy_t desc_destroy = nullptr;
  cublasLtMatmulDescSetAttribute_t desc_set = nullptr;
  cublasLtMatrixLayoutCreate_t layout_create = nullptr;
  cublasLtMatrixLayoutDestroy_t layout_destroy = nullptr;
  cublasLtMatrixLayoutSetAttribute_t layout_set = nullptr;
  cublasLtMatmulPreferenceCreate_t pref_create = nullptr;
  cublasLtMatmulPreferenceDestroy_t pref_destroy = nullptr;
  cublasLtMatmulPreferenceSetAttribute_t pref_set = nullptr;
  cublasLtMatmulAlgoGetHeuristic_t heuristic = nullptr;
  cublasLtMatmul_t matmul = nullptr;
};

struct LoadedLt {
  std::unique_ptr<SharedLibrary> library;
  Lt api;
  std::string error;
};

const LoadedLt& loaded() {
  // Loaded once and kept until exit, as the driver is.
  static const LoadedLt& l = *new LoadedLt([] {
    LoadedLt out;
    try {
      out.library = std::make_unique<SharedLibrary>(SharedLibrary::open_first(
          {"libcublasLt.so.13", "libcublasLt.so.12"}, "cuBLASLt (CUDA's matrix-product library)"));
      const SharedLibrary& lib = *out.library;
      Lt& a = out.api;
      a.create = lib.get<cublasLtCreate_t>("cublasLtCreate");
      a.destroy = lib.get<cublasLtDestroy_t>("cublasLtDestroy");
      a.get_version = lib.get<cublasLtGetVersion_t>("cublasLtGetVersion");
      a.status_string = lib.get<cublasLtGetStatusString_t>("cublasLtGetStatusString");
      a.desc_create = lib.get<cublasLtMatmulDescCreate_t>("cublasLtMatmulDescCreate");
      a.desc_destroy = lib.get<cublasLtMatmulDescDestroy_t>("cublasLtMatmulDescDestroy");
      a.desc_set = lib.get<cublasLtMatmulDescSetAttribute_t>("cublasLtMatmulDescSetAttribute");
      a.layout_create = lib.get<cublasLtMatrixLayoutCreate_t>("cublasLtMatrixLayoutCreate");
      a.layout_destroy = lib.get<cublasLtMatrixLayoutDestroy_t>("cublasLtMatrixLayoutDestroy");
      a.layout_set =
          lib.get<cublasLtMatrixLayoutSetAttribute_t>("cublasLtMatrixLayoutSetAttribute");
      a.pref_create = lib.get<cublasLtMatmulPreferenceCreate_t>("cublasLtMatmulPreferenceCreate");
      a.pref_destroy =
          lib.get<cublasLtMatmulPreferenceDestroy_t>("cublasLtMatmulPreferenceDestroy");
      a.pref_set =
          lib.get<cublasLtMatmulPreferenceSetAttribute_t>("cublasLtMatmulPreferenceSetAttribute");
      a.heuristic = lib.get<cublasLtMatmulAlgoGetHeuristic_t>("cublasLtMatmulAlgoGetHeuristic");
      a.matmul = lib.get<cublasLtMatmul_t>("cublasLtMatmul");
    } catch (const Error& e) {
      out.error = e.what();
      out.library.reset();
    }
    return out;
  }());
  return l;
}

const Lt& lt() {
  const LoadedLt& l = loaded();
  if (!l.library) throw Error(ErrorKind::Device, "cuda: " + l.error);
  return l.api;
}

void lt_check(cublasStatus_t s, const char* call) {
  if (s == CUBLAS_STATUS_SUCCESS) return;
  const char* text = lt().status_string ? lt().status_string(s) : nullptr;
  throw Error(ErrorKind::Backend, std::string("cuda: ") + call + ": " +
                                      (text ? text : "cuBLAS status " + std::to_string(s)));
}

// A column-major layout of `rows` x `cols` with leading dimension ld, batched.
cublasLtMatrixLayout_t make_layout(int type, uint64_t rows, uint64_t cols, int64_t ld,
                                   int32_t batch, int64_t stride) {
  cublasLtMatrixLayout_t l = nullptr;
  lt_check(lt().layout_create(&l, type, rows, cols, ld), "cublasLtMatrixLayoutCreate");
  if (batch > 1) {
    lt_check(lt().layout_set(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof batch),
             "cublasLtMatrixLayoutSetAttribute");
    lt_check(
        lt().layout_set(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof stride),
        "cublasLtMatrixLayoutSetAttribute");
  }
  return l;
}

// The largest power of two (at most 256) dividing every address: cuBLASLt's heuristic
// assumes 256-byte aligned operands unless told otherwise, and a view may start anywhere.
unsigned alignment_of(std::initializer_list<CUdeviceptr> addresses) {
  unsigned a = 256;
  for (CUdeviceptr p : addresses)
    while (a > 4 && p % a != 0) a >>= 1;
  return a;
}

}  // namespace

bool cublaslt_available(std::string* why_not) {
  const LoadedLt& l = loaded();
  if (why_not) *why_not = l.error;
  return l.library != nullptr;
}

struct Gemm::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, out = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~Plan() {
    if (out) lt().layout_destroy(out);
    if (b) lt().layout_destroy(b);
    if (a) lt().layout_destroy(a);
    if (desc) lt().desc_destroy(desc);
  }
};

Gemm::Gemm(const Context& context, Allocator& allocator)
    : context_(context), allocator_(allocator) {
  const Lt& api = lt();
  context_.make_current();
  cublasLtHandle_t h = nullptr;
  lt_check(api.create(&h), "cublasLtCreate");
  handle_ = h;
  workspace_bytes_ = size_t{32} << 20;  // llm.c's size for Hopper
  workspace_ = allocator_.take(workspace_bytes_);
}

Gemm::~Gemm() {
  plans_.clear();
  allocator_.give(workspace_, workspace_bytes_);
  lt().destroy(static_cast<cublasLtHandle_t>(handle_));
}

const Gemm::Plan& Gemm::plan(const GemmShape& s, unsigned alignment) {
  auto key = std::tuple(s.key(), alignment);
  auto it = plans_.find(key);
  if (it != plans_.end()) return *it->second;
  const Lt& api = lt();
  auto p = std::make_unique<Plan>();
  using P = GemmShape::Precision;
  const int compute = s.precision == P::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  lt_check(api.desc_create(&p->desc, compute, CUDA_R_32F), "cublasLtMatmulDescCreate");
  // Lt's A is forge's b, Lt's B is forge's a (out^T = op(b)^T op(a)^T).
  const int32_t op_a = s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int32_t op_b = s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  lt_check(api.desc_set(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a),
           "cublasLtMatmulDescSetAttribute");
  lt_check(api.desc_set(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b),
           "cublasLtMatmulDescSetAttribute");
  const uint32_t epilogue = s.gelu ? (s.bias ? CUBLASLT_EPILOGUE_GELU_BIAS : CUBLASLT_EPILOGUE_GELU)
                                   : (s.bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT);
  lt_check(api.desc_set(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue),
           "cublasLtMatmulDescSetAttribute");
  const auto m = static_cast<uint64_t>(s.m), n = static_cast<uint64_t>(s.n),
             k = static_cast<uint64_t>(s.k);
  const auto batch = static_cast<int32_t>(s.batch);
  // b stored [k, n] is column-major [n, k] (ld n); stored [n, k] is [k, n] (ld k), used as T.
  const int in = s.precision == P::bf16 ? CUDA_R_16BF : CUDA_R_32F;
  const int64_t ld_b = s.ld_b ? s.ld_b : static_cast<int64_t>(s.trans_b ? k : n);
  const int64_t ld_a = s.ld_a ? s.ld_a : static_cast<int64_t>(s.trans_a ? m : k);
  p->a = s.trans_b ? make_layout(in, k, n, ld_b, batch, s.stride_b)
                   : make_layout(in, n, k, ld_b, batch, s.stride_b);
  p->b = s.trans_a ? make_layout(in, m, k, ld_a, batch, s.stride_a)
                   : make_layout(in, k, m, ld_a, batch, s.stride_a);
  const int64_t ld_out = s.ld_out ? s.ld_out : static_cast<int64_t>(n);
  p->out = make_layout(CUDA_R_32F, n, m, ld_out, batch, s.stride_out);

  cublasLtMatmulPreference_t pref = nullptr;
  lt_check(api.pref_create(&pref), "cublasLtMatmulPreferenceCreate");
  const uint64_t ws = workspace_bytes_;
  const uint32_t align = alignment;
  api.pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  for (int attr :
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    api.pref_set(pref, attr, &align, sizeof align);
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  const cublasStatus_t st = api.heuristic(static_cast<cublasLtHandle_t>(handle_), p->desc, p->a,
                                          p->b, p->out, p->out, pref, 1, &result, &returned);
  api.pref_destroy(pref);
  lt_check(st, "cublasLtMatmulAlgoGetHeuristic");
  if (returned == 0)
    throw Error(ErrorKind::Backend, "cuda: cuBLASLt has no algorithm for a product of [" +
                                        std::to_string(s.m) + ", " + std::to_string(s.k) + "] x [" +
                                        std::to_string(s.k) + ", " + std::to_string(s.n) +
                                        "], batch " + std::to_string(s.batch));
  p->algo = result.algo;
  return *plans_.emplace(std::move(key), std::move(p)).first->second;
}

void Gemm::run(const GemmShape& s, CUdeviceptr a, CUdeviceptr b, CUdeviceptr bias, CUdeviceptr out,
               float alpha, float beta) {
  std::lock_guard<std::mutex> lock(mutex_);
  context_.make_current();
  const Plan& p = plan(s, alignment_of({a, b, out}));
  const Lt& api = lt();
  if (s.bias) {
    const void* ptr = reinterpret_cast<const void*>(bias);
    lt_check(api.desc_set(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &ptr, sizeof ptr),
             "cublasLtMatmulDescSetAttribute");
  }
  Profiler& prof = context_.profiler();
  using P = GemmShape::Precision;
  prof.begin(s.precision == P::tf32   ? "cublasLt_matmul_tf32"
             : s.precision == P::bf16 ? "cublasLt_matmul_bf16"
                                      : "cublasLt_matmul");
  lt_check(api.matmul(static_cast<cublasLtHandle_t>(handle_), p.desc, &alpha,
                      reinterpret_cast<const void*>(b), p.a, reinterpret_cast<const void*>(a), p.b,
                      &beta, reinterpret_cast<const void*>(out), p.out,
                      reinterpret_cast<void*>(out), p.out, &p.algo,
                      reinterpret_cast<void*>(workspace_), workspace_bytes_, context_.stream()),
           "cublasLtMatmul");
  prof.end();
}

}  // namespace forge::cuda
