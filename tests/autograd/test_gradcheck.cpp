// Every op of the catalogue passes the float64 Jacobian check (eps 1e-6, atol 1e-5, rtol 1e-3).
#include <gtest/gtest.h>

#include <set>

#include "autograd/op_checks.h"
#include "autograd/ops.h"

namespace seqtape {
namespace {

class OpGradcheck : public ::testing::TestWithParam<size_t> {};

TEST_P(OpGradcheck, AnalyticMatchesNumeric) {
  static const std::vector<OpCheck> checks = op_checks();
  const OpCheck& c = checks[GetParam()];
  GradcheckResult r = gradcheck(c.fn, c.inputs);
  EXPECT_TRUE(r.pass) << c.op << " " << c.case_ << ": " << r.worst;
  EXPECT_GT(r.entries, 0);
  EXPECT_LE(r.max_abs_err, 1e-5 + 1e-3 * 10) << c.op << " " << c.case_;
}

std::string case_name(const ::testing::TestParamInfo<size_t>& info) {
  static const std::vector<OpCheck> checks = op_checks();
  return checks[info.param].op + "_" + std::to_string(info.param);
}

INSTANTIATE_TEST_SUITE_P(AllOps, OpGradcheck, ::testing::Range<size_t>(0, op_checks().size()),
                         case_name);

TEST(Gradcheck, CatchesAWrongGradient) {
  // A deliberately wrong backward must fail the check: the check itself is tested.
  GradFn wrong = [](const std::vector<Var>& v) {
    // x·x computed as mul(x, detached copy of x): the analytic gradient misses half.
    Var c(v[0].value().clone(), false);
    return mul(v[0], c);
  };
  Tensor x = Tensor::from(std::vector<double>{0.5, -1.0, 2.0}, {3});
  GradcheckResult r = gradcheck(wrong, {x});
  EXPECT_FALSE(r.pass);
  EXPECT_GT(r.max_abs_err, 0.4);
}

TEST(Gradcheck, CoversEveryOpOfTheIssue) {
  std::set<std::string> ops;
  for (const auto& c : op_checks()) ops.insert(c.op);
  for (const char* want : {"matmul",     "add",           "sub",
                           "mul",        "div",           "neg",
                           "exp",        "log",           "sqrt",
                           "tanh",       "relu",          "gelu",
                           "sum",        "mean",          "reshape",
                           "transpose",  "permute",       "concat",
                           "slice",      "embedding",     "masked_fill",
                           "softmax",    "log_softmax",   "layer_norm",
                           "dropout",    "cross_entropy", "add_layer_norm",
                           "add_dropout"})
    EXPECT_TRUE(ops.count(want)) << "no gradient check for " << want;
}

}  // namespace
}  // namespace seqtape
