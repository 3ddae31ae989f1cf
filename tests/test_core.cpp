#include <gtest/gtest.h>

#include "forge/forge.h"

using namespace forge;

TEST(Tensor, FromVectorRoundTrip) {
  Tensor t = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(t.shape(), Shape({2, 3}));
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5, 6}));
}

TEST(Tensor, ViewsShareStorage) {
  Tensor t = Tensor::from_vector(std::vector<float>{1, 2, 3, 4, 5, 6}, {3, 2});
  Tensor r = t.narrow_rows(1, 2);
  EXPECT_EQ(r.to_vector<float>(), (std::vector<float>{3, 4, 5, 6}));
  EXPECT_EQ(r.storage(), t.storage());
  Tensor v = t.reshape({6});
  v.data<float>()[0] = 42;
  EXPECT_EQ(t.to_vector<float>()[0], 42);
  EXPECT_THROW(t.reshape({4}), Error);
  EXPECT_THROW(t.narrow_rows(2, 2), Error);
}
