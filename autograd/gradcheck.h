#pragma once
// Gradient checking: the framework's proof. Compares the tape's analytic Jacobian with
// central differences in float64, entry by entry, with PyTorch gradcheck's tolerance:
// |analytic − numeric| ≤ atol + rtol·|numeric|.

#include <functional>
#include <string>
#include <vector>

#include "autograd/tape.h"

namespace seqtape {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
};

struct GradcheckResult {
  bool pass = true;
  double max_abs_err = 0;  // max |analytic − numeric| over all entries
  double max_rel_err = 0;  // max |analytic − numeric| / |numeric| over entries with numeric ≠ 0
  int64_t entries = 0;     // Jacobian entries compared
  std::string worst;       // where the largest violation (or error) was
};

using GradFn = std::function<Var(const std::vector<Var>&)>;

// Inputs must be float64. Every input is differentiated unless `wrt` says otherwise.
GradcheckResult gradcheck(const GradFn& f, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& opt = {}, std::vector<bool> wrt = {});

}  // namespace seqtape
