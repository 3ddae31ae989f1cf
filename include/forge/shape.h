// Shape: the dimensions of a row-major tensor.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace forge {

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(std::vector<int64_t> dims);

  /// Throws Error(Shape) if any dimension is negative or the element count overflows.
  static Shape checked(std::vector<int64_t> dims, const char* op);

  size_t rank() const { return dims_.size(); }
  int64_t operator[](size_t i) const { return dims_[i]; }
  /// Dimension counted from the end: dim(-1) is the last one. Requires |i| <= rank.
  int64_t dim(int i) const;
  int64_t numel() const;
  /// Product of all dimensions but the last (1 for rank 0/1): the "rows" of a row op.
  int64_t rows() const;
  /// Last dimension (1 for rank 0): the "columns" of a row op.
  int64_t cols() const;
  const std::vector<int64_t>& dims() const { return dims_; }

  bool operator==(const Shape& o) const { return dims_ == o.dims_; }
  bool operator!=(const Shape& o) const { return dims_ != o.dims_; }

  std::string str() const;  // "[2, 3, 4]"

 private:
  std::vector<int64_t> dims_;
};

}  // namespace forge
