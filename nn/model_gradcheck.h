#pragma once
// Whole-model gradient check: for every parameter tensor, compare the tape's gradient of a
// scalar loss with a central difference (L(w+eps) - L(w-eps)) / 2eps at sampled coordinates.
// Runs in float64 with dropout off; the numeric forwards run under NoGradGuard.
//
// Dimension key: none (works on any Module and any scalar loss).

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "model/config.h"
#include "nn/module.h"

namespace seqtape {

struct ModelGradcheckOptions {
  double eps = 1e-6;
  int64_t coords_per_param = 20;  // all coordinates when a tensor has fewer
  double atol = 1e-5;             // pass: |analytic - numeric| <= atol + rtol·|numeric|
  double rtol = 1e-3;
  uint64_t seed = 0;  // coordinate sampling (and the batch of gradcheck_config)
};

struct ModelGradcheckRow {
  std::string name;
  Shape shape;
  int64_t coords_checked = 0;
  double max_abs_err = 0.0;  // max |analytic - numeric|
  double max_rel_err = 0.0;  // max |analytic - numeric| / |numeric| over numeric != 0
  bool pass = true;
};

// loss_fn runs a full forward and returns a one-element loss. Every parameter must be float64.
// Parameters with requires_grad = false are skipped. Training mode is switched off for the
// check and restored afterwards; the current tape is cleared before and after.
std::vector<ModelGradcheckRow> model_gradcheck(Module& model, const std::function<Var()>& loss_fn,
                                               const ModelGradcheckOptions& opt = {});

// Builds cfg's model in float64 (dropout forced to 0) and checks it on a fixed random batch of
// two sequences, the second one padded.
std::vector<ModelGradcheckRow> gradcheck_config(const ModelConfig& cfg,
                                                const ModelGradcheckOptions& opt = {});

// The tiny model the whole-model checks use (vocabulary 7, d_model 4, 2 heads, 1 layer per
// stack, d_ff 8, seed 1), shared by the test suite and `seqtape gradcheck`.
ModelConfig tiny_gradcheck_config(Arch arch, NormPlacement norm);

bool all_passed(const std::vector<ModelGradcheckRow>& rows);
// A fixed-width table: name, shape, coords, max abs err, max rel err, ok/FAIL.
std::string format_gradcheck(const std::vector<ModelGradcheckRow>& rows);

}  // namespace seqtape
