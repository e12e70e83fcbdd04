// Tensor::adopt: a tensor over memory its caller owns (the Python module's NumPy arrays).
#include <gtest/gtest.h>

#include <vector>

#include "tensor/tensor.h"

namespace seqtape {
namespace {

struct Owner {
  std::vector<double> data = std::vector<double>(6, 1.5);
  int releases = 0;
};

void release(void* owner) {
  ++static_cast<Owner*>(owner)->releases;
}

TEST(Adopt, SharesTheMemoryAndReleasesItOnceWhenTheLastTensorGoes) {
  Owner owner;
  const size_t pooled = pool_bytes_in_use();
  {
    Tensor t = Tensor::adopt(owner.data.data(), Shape{2, 3}, DType::F64, release, &owner);
    EXPECT_EQ(t.raw(), owner.data.data());
    EXPECT_EQ(pool_bytes_in_use(), pooled);  // not the pool's memory
    Tensor view = t.reshape(Shape{3, 2});
    owner.data[4] = -2;
    EXPECT_EQ(view.get(4), -2);
    t = Tensor();
    EXPECT_EQ(owner.releases, 0);  // the reshape still uses it
    Tensor copy = view.clone();    // a pooled copy, not another reference
    view = Tensor();
    EXPECT_EQ(owner.releases, 1);
    EXPECT_EQ(copy.get(4), -2);
  }
  EXPECT_EQ(owner.releases, 1);
  EXPECT_EQ(pool_bytes_in_use(), pooled);
}

TEST(Adopt, ABadShapeIsRefusedAndTheMemoryGivenBack) {
  Owner owner;
  EXPECT_THROW(Tensor::adopt(owner.data.data(), Shape{-1, 3}, DType::F64, release, &owner), Error);
  EXPECT_EQ(owner.releases, 1);
  EXPECT_THROW(Tensor::adopt(owner.data.data(), Shape{6}, DType::F64, nullptr, &owner), Error);
}

}  // namespace
}  // namespace seqtape
