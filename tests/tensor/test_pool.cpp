// The buffer pool's free lists per thread (tensor/tensor.cpp): a thread reuses the buffers it
// released itself, never another thread's, and the counts add up over the threads.
#include <gtest/gtest.h>

#include <thread>

#include "tensor/tensor.h"

namespace seqtape {
namespace {

// A size no other test of this program allocates, so that no cached buffer of it exists yet.
constexpr int64_t kOdd = (int64_t{1} << 25) + 7;  // floats: a 256 MiB bucket, never touched

TEST(Pool, AThreadReusesItsOwnBuffersAndNotAnotherThreads) {
  const void* first = nullptr;
  uint64_t fresh_here = 0;
  std::thread([&] {
    const PoolCounts c0 = pool_counts();
    { first = Tensor::empty({kOdd}, DType::F32).raw(); }  // released into this thread's lists
    const void* again = Tensor::empty({kOdd}, DType::F32).raw();
    EXPECT_EQ(again, first);  // its own buffer back
    fresh_here = pool_counts().mallocs - c0.mallocs;
  }).join();
  EXPECT_EQ(fresh_here, 1u);
  // This thread finds nothing of that size in its own lists: a fresh buffer, not the other
  // thread's (whose lines would sit in the other core's caches).
  const PoolCounts c1 = pool_counts();
  Tensor mine = Tensor::empty({kOdd}, DType::F32);
  EXPECT_NE(mine.raw(), first);
  EXPECT_EQ(pool_counts().mallocs - c1.mallocs, 1u);
}

TEST(Pool, ABufferReleasedOnAnotherThreadIsCountedBackAndReusedThere) {
  const size_t in_use = pool_bytes_in_use();
  Tensor t = Tensor::empty({kOdd + 64}, DType::F32);
  const void* p = t.raw();
  EXPECT_GT(pool_bytes_in_use(), in_use);
  const void* reused = nullptr;
  std::thread([&] {
    t = Tensor();  // the last reference goes on this thread: into its lists
    reused = Tensor::empty({kOdd + 64}, DType::F32).raw();
  }).join();
  EXPECT_EQ(reused, p);
  EXPECT_EQ(pool_bytes_in_use(), in_use);  // taken in one thread's lists, given back in another's
}

}  // namespace
}  // namespace seqtape
