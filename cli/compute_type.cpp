// --compute-type: the flag of generate, eval and serve, and what it resolves to on this CPU.
#include "cli/compute_type.h"

#include <cstdio>

#include "cli/commands.h"
#include "tensor/tensor.h"  // Error

namespace seqtape::cli {

void add_compute_type_option(CLI::App* sub, std::string& value) {
  sub->add_option("--compute-type", value,
                  "weights and products while decoding: f32; int8 (per-row scales, AVX-512 VNNI "
                  "or AVX2); bf16 (AVX-512 BF16); auto (int8 where the CPU has VNNI, else f32; "
                  "says which on stderr). See docs/quantization.md")
      ->capture_default_str();
}

ComputeType chosen_compute_type(const std::string& value) {
  const std::optional<ComputeType> t = parse_compute_type(value);
  if (!t) throw UsageError("--compute-type must be f32, bf16, int8 or auto, got '" + value + "'");
  ComputeType chosen = ComputeType::F32;
  try {
    chosen = resolve_compute_type(*t);
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
  if (*t == ComputeType::Auto)
    std::fprintf(stderr, "compute type: auto chose %s (%s)\n", to_string(chosen),
                 compute_kernel_name(chosen));
  return chosen;
}

}  // namespace seqtape::cli
