#pragma once
// Weights into a training model: the one loader behind --resume, reference/f15 and the tests.
// The checks are io/weights.h's (tape-free, shared with export and infer/); this half writes
// into the model's parameters, so it lives with the tape.

#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "nn/transformer.h"

namespace seqtape {

// Checks `params` against the model's configuration (check_parameters: names, shapes, finite
// values; an Error naming `where`), then copies each into the parameter of that name,
// converted to the model's dtype.
void load_params_into(TransformerModel& model, const std::vector<NamedTensor>& params,
                      const std::string& where);

// The model's parameters as named tensors, in its order, sharing their storage (no copy): what a
// checkpoint saves and what infer/'s InferenceModel takes.
std::vector<NamedTensor> named_tensors(const Module& model);

}  // namespace seqtape
