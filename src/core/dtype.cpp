#include "forge/dtype.h"

namespace forge {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::F32: return 4;
    case DType::U32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
  }
  return 0;
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32: return "f32";
    case DType::U32: return "u32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
  }
  return "?";
}

}  // namespace forge
