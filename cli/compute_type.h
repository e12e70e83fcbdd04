#pragma once
// --compute-type for the decoding commands (generate, eval, serve): the one flag and the one
// choice, so that all three read it alike. See docs/quantization.md.

#include <CLI/CLI.hpp>
#include <string>

#include "infer/quant.h"

namespace seqtape::cli {

// Adds --compute-type f32|bf16|int8|auto (default f32) to `sub`, stored in `value`.
void add_compute_type_option(CLI::App* sub, std::string& value);

// The type `value` names as it runs on this CPU. auto says what it chose in one line on stderr;
// int8 or bf16 on a CPU without their units is a UsageError naming what is missing.
ComputeType chosen_compute_type(const std::string& value);

}  // namespace seqtape::cli
