#pragma once
// The sinusoidal positional-encoding table, shared by nn/ (training) and infer/ (decoding);
// it needs no tape.
//
// Dimension key: P positions, C d_model.

#include "tensor/tensor.h"

namespace seqtape {

// PE(p, 2i) = sin(p / base^(2i/d)), PE(p, 2i+1) = cos(p / base^(2i/d)) → [positions, d].
// infer/ uses the same table so training and decoding add identical numbers.
// Throws Error unless 0 <= positions <= INT32_MAX, 1 <= d <= INT32_MAX and base > 1.
Tensor sinusoidal_table(int64_t positions, int64_t d, double base, DType dtype);

}  // namespace seqtape
