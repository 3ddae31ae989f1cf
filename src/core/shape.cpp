#include "forge/shape.h"

#include <limits>

#include "forge/error.h"

namespace forge {

Shape::Shape(std::initializer_list<int64_t> dims) : dims_(dims) {}
Shape::Shape(std::vector<int64_t> dims) : dims_(std::move(dims)) {}

Shape Shape::checked(std::vector<int64_t> dims, const char* op) {
  // Bound the element count so that byte sizes cannot overflow either.
  constexpr int64_t kMaxElements = std::numeric_limits<int64_t>::max() / 16;
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0) throw Error(ErrorKind::Shape, std::string(op) + ": negative dimension in " +
                                                 Shape(dims).str());
    if (d != 0 && n > kMaxElements / d)
      throw Error(ErrorKind::Shape, std::string(op) + ": shape " + Shape(dims).str() +
                                        " has too many elements");
    n *= d;
  }
  return Shape(std::move(dims));
}

int64_t Shape::dim(int i) const {
  const int r = static_cast<int>(dims_.size());
  return dims_[static_cast<size_t>(i < 0 ? r + i : i)];
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int64_t d : dims_) n *= d;
  return n;
}

int64_t Shape::cols() const { return dims_.empty() ? 1 : dims_.back(); }

int64_t Shape::rows() const {
  int64_t n = 1;
  for (size_t i = 0; i + 1 < dims_.size(); ++i) n *= dims_[i];
  return n;
}

std::string Shape::str() const {
  std::string s = "[";
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(dims_[i]);
  }
  return s + "]";
}

}  // namespace forge
