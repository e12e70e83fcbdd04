#pragma once
// --compute-type for the decoding commands (generate, eval, serve): the one flag and the one
// choice, so that all three read it alike. See docs/quantization.md.

#include <CLI/CLI.hpp>
#include <string>

#include "infer/load.h"
#include "infer/quant.h"

namespace seqtape::cli {

// Adds --compute-type f32|bf16|int8|auto to `sub`, stored in `value` ("" when not given: f32,
// or a quantized export's own type).
void add_compute_type_option(CLI::App* sub, std::string& value);

// The type `value` names as it runs on this CPU, for a model stored as `stored` (f32, or a
// quantized export's int8 or bf16). auto says what it chose in one line on stderr; int8 or
// bf16 on a CPU without their units is a UsageError naming what is missing. A quantized export
// decodes as its own type: "" and auto take it, any other type is a UsageError naming both.
ComputeType chosen_compute_type(const std::string& value, ComputeType stored = ComputeType::F32);

// The model at `path` (read_model_files) for decoding, as chosen_compute_type says.
InferenceModel load_decoding_model(const std::string& path, const std::string& value);

}  // namespace seqtape::cli
