#include "autograd/gradcheck.h"

#include <cmath>

namespace seqtape {

GradcheckResult gradcheck(const GradFn& f, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& opt, std::vector<bool> wrt) {
  if (wrt.empty()) wrt.assign(inputs.size(), true);
  if (wrt.size() != inputs.size()) fail("gradcheck", "wrt has the wrong length");
  std::vector<Var> vars;
  for (size_t k = 0; k < inputs.size(); ++k) {
    if (inputs[k].dtype() != DType::F64)
      fail("gradcheck", "input " + std::to_string(k) + " must be float64");
    vars.emplace_back(inputs[k].clone(), wrt[k]);
  }
  Tape& tape = Tape::current();
  tape.clear();

  // Analytic Jacobian, one backward per output entry: J[i] = ∂y_i/∂x.
  Var y = f(vars);
  const int64_t m = y.numel();
  std::vector<std::vector<std::vector<double>>> ja(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) {
    for (auto& v : vars) v.zero_grad();
    Tensor up = Tensor::zeros(y.shape(), DType::F64);
    up.set(i, 1.0);
    if (y.requires_grad()) tape.backward(y, up);
    auto& row = ja[static_cast<size_t>(i)];
    for (size_t k = 0; k < vars.size(); ++k) {
      if (!wrt[k]) {
        row.emplace_back();
        continue;
      }
      row.push_back(vars[k].has_grad()
                        ? vars[k].grad().to_vector()
                        : std::vector<double>(static_cast<size_t>(vars[k].numel()), 0.0));
    }
  }
  tape.clear();

  // Numeric Jacobian by central differences, compared entry by entry.
  GradcheckResult res;
  NoGradGuard no_grad;
  double worst_excess = 0;
  for (size_t k = 0; k < vars.size(); ++k) {
    if (!wrt[k]) continue;
    Tensor& x = vars[k].mutable_value();
    for (int64_t j = 0; j < x.numel(); ++j) {
      const double x0 = x.get(j);
      x.set(j, x0 + opt.eps);
      Tensor yp = f(vars).value().clone();
      x.set(j, x0 - opt.eps);
      Tensor ym = f(vars).value().clone();
      x.set(j, x0);
      for (int64_t i = 0; i < m; ++i) {
        const double num = (yp.get(i) - ym.get(i)) / (2 * opt.eps);
        const double ana = ja[static_cast<size_t>(i)][k][static_cast<size_t>(j)];
        const double err = std::abs(ana - num);
        ++res.entries;
        if (!std::isfinite(ana) || !std::isfinite(num)) {
          res.pass = false;
          res.worst = "non-finite entry: input " + std::to_string(k) + " element " +
                      std::to_string(j) + ", output " + std::to_string(i);
          res.max_abs_err = INFINITY;
          continue;
        }
        res.max_abs_err = std::max(res.max_abs_err, err);
        if (num != 0) res.max_rel_err = std::max(res.max_rel_err, err / std::abs(num));
        const double excess = err - (opt.atol + opt.rtol * std::abs(num));
        if (excess > 0) {
          res.pass = false;
          if (excess > worst_excess) {
            worst_excess = excess;
            res.worst = "input " + std::to_string(k) + " element " + std::to_string(j) +
                        ", output " + std::to_string(i) + ": analytic " + std::to_string(ana) +
                        " vs numeric " + std::to_string(num);
          }
        }
      }
    }
  }
  return res;
}

}  // namespace seqtape
