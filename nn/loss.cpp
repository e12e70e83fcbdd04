#include "nn/loss.h"

#include <string>

namespace seqtape {

Var sequence_loss(const Var& logits, const std::vector<int32_t>& labels, double label_smoothing) {
  if (logits.ndim() != 3)
    fail("sequence_loss", "logits must be [B, T, V], got " + shape_str(logits.shape()));
  const int64_t B = logits.dim(0), T = logits.dim(1), V = logits.dim(2);
  if (static_cast<int64_t>(labels.size()) != B * T)
    fail("sequence_loss", std::to_string(labels.size()) + " labels for logits " +
                              shape_str(logits.shape()) +
                              ", expected B*T = " + std::to_string(B * T));
  for (size_t i = 0; i < labels.size(); ++i)
    if (labels[i] != -100 && (labels[i] < 0 || labels[i] >= V))
      fail("sequence_loss", "label " + std::to_string(labels[i]) + " at [" +
                                std::to_string(static_cast<int64_t>(i) / T) + "," +
                                std::to_string(static_cast<int64_t>(i) % T) + "] is outside [0, " +
                                std::to_string(V) + ") and not the ignore index -100");
  if (!(label_smoothing >= 0.0 && label_smoothing < 1.0))
    fail("sequence_loss", "label_smoothing " + std::to_string(label_smoothing) + " outside [0, 1)");
  Var flat = reshape(logits, {B * T, V});  // [B·T, V]
  CrossEntropyOptions opt;
  opt.ignore_index = -100;
  opt.label_smoothing = label_smoothing;
  return cross_entropy(flat, labels, opt);  // []
}

}  // namespace seqtape
