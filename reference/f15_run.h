#pragma once
// The F15 run written out number by number, as the document promises ("all parameters and
// intermediate values are published with it"): every parameter of the model, and for every
// round of the greedy run from 我爱 every intermediate of the one-layer forward over the fed
// positions — embeddings, q/k/v, the K/V cache after the round, scaled scores, attention
// weights, context, attention output, residual, FFN pre-activation, tanh, FFN output, final
// hidden state, logits, probabilities — computed by a deliberately plain KV-cached
// implementation (double precision, loops, no BLAS) and compared with recomputing the whole
// prefix on the training model.
//
// Dimension key: N positions fed in a round, K cache length after it, C d_model = 4,
//                F d_ff = 8, V vocabulary = 7.

#include <nlohmann/json.hpp>

#include "nn/transformer.h"

namespace seqtape::reference {

// Parameters appear with their exact float values (shortest round-trip decimal); intermediates
// are rounded to 6 decimals. `rounds[i].max_abs_delta_recompute` is the largest difference
// between the plain cached logits and the training model's full-prefix logits, and
// `max_abs_delta_cached_engine` the one with infer/'s KV-cached decoder (float32).
nlohmann::json f15_run_json(DecoderOnly& model);

// The largest |a - b| over every number of two JSON documents of the same structure, or +inf
// when the structures (keys, array lengths, non-numbers) differ.
double json_max_abs_diff(const nlohmann::json& a, const nlohmann::json& b);

}  // namespace seqtape::reference
