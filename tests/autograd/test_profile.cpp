// The step profiler: nothing is recorded when it is off or outside a step; inside a step every
// op's forward and backward land in its row, and the rows never exceed the step's wall time.
#include <gtest/gtest.h>

#include "autograd/ops.h"
#include "tensor/profile.h"

namespace seqtape {
namespace {

const profile::Row* find_row(const profile::Summary& s, const std::string& name) {
  for (const auto& r : s.rows)
    if (r.name == name) return &r;
  return nullptr;
}

// y = sum(softmax(x·W)): one matmul, one softmax, one sum, forward and backward.
void one_step() {
  Tape& tape = Tape::current();
  tape.clear();
  Var x(Tensor::full({4, 3}, 0.5, DType::F32), true);
  Var w(Tensor::full({3, 5}, 0.25, DType::F32), true);
  Var y = sum(softmax(matmul(x, w)));
  tape.backward(y);
  tape.clear();
}

class ProfileTest : public ::testing::Test {
 protected:
  void SetUp() override { profile::reset(); }
  void TearDown() override {
    profile::set_enabled(false);
    profile::reset();
  }
};

TEST_F(ProfileTest, OffRecordsNothing) {
  profile::begin_step();
  one_step();
  profile::end_step();
  EXPECT_FALSE(profile::active());
  const profile::Summary s = profile::summary();
  EXPECT_EQ(s.steps, 0);
  EXPECT_TRUE(s.rows.empty());
}

TEST_F(ProfileTest, OnlyInsideAStep) {
  profile::set_enabled(true);
  one_step();  // enabled but no step begun: not counted
  EXPECT_TRUE(profile::summary().rows.empty());
  profile::begin_step();
  EXPECT_TRUE(profile::active());
  one_step();
  profile::end_step();
  EXPECT_FALSE(profile::active());
  EXPECT_EQ(profile::summary().steps, 1);
}

TEST_F(ProfileTest, ForwardAndBackwardPerOpKind) {
  profile::set_enabled(true);
  for (int i = 0; i < 3; ++i) {
    profile::begin_step();
    one_step();
    profile::end_step();
  }
  const profile::Summary s = profile::summary();
  EXPECT_EQ(s.steps, 3);
  for (const char* op : {"matmul", "softmax", "sum"}) {
    const profile::Row* r = find_row(s, op);
    ASSERT_NE(r, nullptr) << op;
    EXPECT_EQ(r->calls[0], 3) << op;  // one forward per step
    EXPECT_EQ(r->calls[1], 3) << op;  // one backward per step
    EXPECT_GE(r->ns[0], 0) << op;
  }
  const profile::Row* alloc = find_row(s, "alloc");
  ASSERT_NE(alloc, nullptr);
  EXPECT_GT(alloc->calls[2], 0);
  // Exclusive times: the rows add up to at most the steps' wall time.
  EXPECT_LE(s.tracked_ns, s.step_ns * 1.0001);
  const std::string table = profile::report("t");
  EXPECT_NE(table.find("matmul"), std::string::npos);
  EXPECT_NE(table.find("3 steps"), std::string::npos);
}

}  // namespace
}  // namespace seqtape
