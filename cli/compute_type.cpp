// --compute-type: the flag of generate, eval and serve, and what it resolves to on this CPU.
#include "cli/compute_type.h"

#include <cstdio>

#include "cli/commands.h"
#include "tensor/tensor.h"  // Error

namespace seqtape::cli {

void add_compute_type_option(CLI::App* sub, std::string& value) {
  sub->add_option("--compute-type", value,
                  "weights and products while decoding: f32 (the default); int8 (per-row "
                  "scales, AVX-512 VNNI or AVX2); bf16 (AVX-512 BF16); auto (int8 where the CPU "
                  "has VNNI, else f32; says which on stderr). An export written with "
                  "--compute-type int8 or bf16 decodes as that type. See docs/quantization.md");
}

namespace {
ComputeType resolved(ComputeType t) {
  try {
    return resolve_compute_type(t);
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
}
}  // namespace

ComputeType chosen_compute_type(const std::string& value, ComputeType stored) {
  const std::optional<ComputeType> t =
      value.empty() ? std::optional<ComputeType>(stored) : parse_compute_type(value);
  if (!t) throw UsageError("--compute-type must be f32, bf16, int8 or auto, got '" + value + "'");
  if (stored != ComputeType::F32 && *t != ComputeType::Auto && *t != stored)
    throw UsageError("--compute-type " + value + ": the model is an export quantized as " +
                     to_string(stored) + ", which decodes only as " + to_string(stored) +
                     " (leave --compute-type out, or export the checkpoint again)");
  const ComputeType chosen = resolved(stored != ComputeType::F32 ? stored : *t);
  if (*t == ComputeType::Auto)
    std::fprintf(stderr, "compute type: auto chose %s (%s%s)\n", to_string(chosen),
                 compute_kernel_name(chosen), stored != ComputeType::F32 ? ", the export's" : "");
  return chosen;
}

InferenceModel load_decoding_model(const std::string& path, const std::string& value) {
  ModelFiles f = read_model_files(path);
  const ComputeType chosen = chosen_compute_type(value, f.compute);
  return model_from_files(std::move(f), WeightLayout::Decode, chosen);
}

}  // namespace seqtape::cli
