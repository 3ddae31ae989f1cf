#include "forge/error.h"

namespace forge {

const char* to_string(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::Shape: return "shape";
    case ErrorKind::Device: return "device";
    case ErrorKind::DType: return "dtype";
    case ErrorKind::Io: return "io";
    case ErrorKind::Format: return "format";
    case ErrorKind::Tokenizer: return "tokenizer";
    case ErrorKind::Backend: return "backend";
    case ErrorKind::Unsupported: return "unsupported";
    case ErrorKind::Range: return "range";
  }
  return "unknown";
}

}  // namespace forge
