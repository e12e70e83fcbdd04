#pragma once
// The sequence loss: token-level cross-entropy over a batch of logits.
//
// Dimension key: B batch, T positions, V vocabulary.

#include <cstdint>
#include <vector>

#include "autograd/ops.h"

namespace seqtape {

// logits [B, T, V], labels [B·T] row-major (-100 = ignored, e.g. padding) → scalar mean over
// the non-ignored positions. label_smoothing e mixes the target with the uniform e/V.
Var sequence_loss(const Var& logits, const std::vector<int32_t>& labels,
                  double label_smoothing = 0.0);

}  // namespace seqtape
