#pragma once
// The catalogue of gradient checks over every op: several shapes each, including
// broadcasting, transposed and batched matmul, masks and ignored targets. The test suite
// and `seqtape gradcheck` both run this list, so the report and the tests cannot disagree.

#include <string>
#include <vector>

#include "autograd/gradcheck.h"

namespace seqtape {

struct OpCheck {
  std::string op;     // the op under test
  std::string case_;  // shapes and flags, for the report
  GradFn fn;
  std::vector<Tensor> inputs;  // float64
};

std::vector<OpCheck> op_checks(uint64_t seed = 1234);

}  // namespace seqtape
