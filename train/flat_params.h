#pragma once
// One flat buffer for the values of all parameters and one for their gradients:
// every parameter's value and gradient become views into them, back to back in parameter
// order. The optimizer and clipping then make single passes over each buffer
// (train/optim.h detects the layout), and the gradient is one contiguous array.
//
// Gradients stay pinned to their views across steps (VarImpl::grad_pinned): zero_grad() only
// marks them stale and the next backward writes them in place, so a step allocates none and
// has_grad() keeps its meaning (a parameter that got no gradient this step has none).

#include <cstdint>

#include "train/optim.h"

namespace seqtape {

class FlatParams {
 public:
  // Moves the parameters' values into one buffer (their contents unchanged) and pins a gradient
  // view for each. All parameters must have the same dtype.
  explicit FlatParams(const NamedParams& params);
  const Tensor& values() const { return values_; }
  const Tensor& grads() const { return grads_; }

 private:
  Tensor values_, grads_;
};

// The first element of params' values (grads = false) or gradients (grads = true) when they lie
// back to back in parameter order in one buffer, and, for gradients, every parameter has one;
// otherwise nullptr. *numel is then the total element count.
const void* flat_span(const NamedParams& params, bool grads, int64_t* numel);

}  // namespace seqtape
