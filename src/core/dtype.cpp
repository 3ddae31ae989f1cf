#include "forge/dtype.h"

#include "forge/error.h"

namespace forge {

int64_t dtype_block(DType dtype) { return dtype_is_block(dtype) ? 32 : 1; }

size_t dtype_block_bytes(DType dtype) {
  switch (dtype) {
    case DType::F32: return 4;
    case DType::U32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::Q8_0: return 34;  // f16 scale + 32 x int8
    case DType::Q4_0: return 18;  // f16 scale + 32 x 4 bits
  }
  return 0;
}

bool dtype_is_block(DType dtype) { return dtype == DType::Q8_0 || dtype == DType::Q4_0; }

size_t dtype_bytes(DType dtype, int64_t n) {
  const int64_t block = dtype_block(dtype);
  if (n < 0 || n % block != 0)
    throw Error(ErrorKind::Shape, std::to_string(n) + " elements of " + dtype_name(dtype) +
                                      " are not whole blocks of " + std::to_string(block));
  return static_cast<size_t>(n / block) * dtype_block_bytes(dtype);
}

size_t dtype_size(DType dtype) {
  if (dtype_is_block(dtype))
    throw Error(ErrorKind::DType, std::string(dtype_name(dtype)) +
                                      " has no bytes per element: it is stored in blocks of 32");
  return dtype_block_bytes(dtype);
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32: return "f32";
    case DType::U32: return "u32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::Q8_0: return "q8_0";
    case DType::Q4_0: return "q4_0";
  }
  return "?";
}

}  // namespace forge
