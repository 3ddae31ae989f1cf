// The part of cuBLASLt (cublasLt.h) that forge calls, declared here so that forge builds
// without CUDA's headers (as driver_api.h does for the driver). Values are NVIDIA's, from
// cublasLt.h and library_types.h of CUDA 12.6 and 13.0 (docs/CUDA_PLAN.md, 2.3).
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cuda/driver_api.h"

namespace forge::cuda {

using cublasStatus_t = int;
using cublasLtHandle_t = struct cublasLtContext*;
using cublasLtMatmulDesc_t = struct cublasLtMatmulDescOpaque_t*;
using cublasLtMatrixLayout_t = struct cublasLtMatrixLayoutOpaque_t*;
using cublasLtMatmulPreference_t = struct cublasLtMatmulPreferenceOpaque_t*;
struct cublasLtMatmulAlgo_t {
  uint64_t data[8];
};
struct cublasLtMatmulHeuristicResult_t {
  cublasLtMatmulAlgo_t algo;
  size_t workspace_size;
  cublasStatus_t state;
  float waves_count;
  int reserved[4];
};
static_assert(sizeof(cublasLtMatmulHeuristicResult_t) == 96, "cuBLASLt's heuristic result");

inline constexpr cublasStatus_t CUBLAS_STATUS_SUCCESS = 0;

// cudaDataType and cublasComputeType_t.
inline constexpr int CUDA_R_32F = 0;
inline constexpr int CUDA_R_16BF = 14;
inline constexpr int CUBLAS_COMPUTE_32F = 68;
inline constexpr int CUBLAS_COMPUTE_32F_FAST_TF32 = 77;

// cublasOperation_t.
inline constexpr int32_t CUBLAS_OP_N = 0;
inline constexpr int32_t CUBLAS_OP_T = 1;

// cublasLtMatmulDescAttributes_t.
inline constexpr int CUBLASLT_MATMUL_DESC_TRANSA = 3;
inline constexpr int CUBLASLT_MATMUL_DESC_TRANSB = 4;
inline constexpr int CUBLASLT_MATMUL_DESC_EPILOGUE = 7;
inline constexpr int CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8;

// cublasLtEpilogue_t.
inline constexpr uint32_t CUBLASLT_EPILOGUE_DEFAULT = 1;
inline constexpr uint32_t CUBLASLT_EPILOGUE_BIAS = 4;
inline constexpr uint32_t CUBLASLT_EPILOGUE_GELU = 32;
inline constexpr uint32_t CUBLASLT_EPILOGUE_GELU_BIAS = 36;

// cublasLtMatrixLayoutAttribute_t.
inline constexpr int CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT = 5;
inline constexpr int CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET = 6;

// cublasLtMatmulPreferenceAttributes_t.
inline constexpr int CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1;
inline constexpr int CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5;
inline constexpr int CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6;
inline constexpr int CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7;
inline constexpr int CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8;

using cublasLtCreate_t = cublasStatus_t (*)(cublasLtHandle_t*);
using cublasLtDestroy_t = cublasStatus_t (*)(cublasLtHandle_t);
using cublasLtGetVersion_t = size_t (*)();
using cublasLtGetStatusString_t = const char* (*)(cublasStatus_t);
using cublasLtMatmulDescCreate_t = cublasStatus_t (*)(cublasLtMatmulDesc_t*, int compute_type,
                                                      int scale_type);
using cublasLtMatmulDescDestroy_t = cublasStatus_t (*)(cublasLtMatmulDesc_t);
using cublasLtMatmulDescSetAttribute_t = cublasStatus_t (*)(cublasLtMatmulDesc_t, int attribute,
                                                            const void* value, size_t bytes);
using cublasLtMatrixLayoutCreate_t = cublasStatus_t (*)(cublasLtMatrixLayout_t*, int type,
                                                        uint64_t rows, uint64_t cols, int64_t ld);
using cublasLtMatrixLayoutDestroy_t = cublasStatus_t (*)(cublasLtMatrixLayout_t);
using cublasLtMatrixLayoutSetAttribute_t = cublasStatus_t (*)(cublasLtMatrixLayout_t, int attribute,
                                                              const void* value, size_t bytes);
using cublasLtMatmulPreferenceCreate_t = cublasStatus_t (*)(cublasLtMatmulPreference_t*);
using cublasLtMatmulPreferenceDestroy_t = cublasStatus_t (*)(cublasLtMatmulPreference_t);
using cublasLtMatmulPreferenceSetAttribute_t = cublasStatus_t (*)(cublasLtMatmulPreference_t,
                                                                  int attribute, const void* value,
                                                                  size_t bytes);
using cublasLtMatmulAlgoGetHeuristic_t = cublasStatus_t (*)(
    cublasLtHandle_t, cublasLtMatmulDesc_t, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
    cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d, cublasLtMatmulPreference_t, int requested,
    cublasLtMatmulHeuristicResult_t* results, int* returned);
using cublasLtMatmul_t = cublasStatus_t (*)(cublasLtHandle_t, cublasLtMatmulDesc_t,
                                            const void* alpha, const void* a,
                                            cublasLtMatrixLayout_t, const void* b,
                                            cublasLtMatrixLayout_t, const void* beta, const void* c,
                                            cublasLtMatrixLayout_t, void* d, cublasLtMatrixLayout_t,
                                            const cublasLtMatmulAlgo_t* algo, void* workspace,
                                            size_t workspace_bytes, CUstream);

}  // namespace forge::cuda
