#pragma once
// Quantized exports (`seqtape export --compute-type int8|bf16`): the decoder's matrices written
// as the quantized values decoding uses, and read back into QuantWeights without a float32 copy.
// See docs/quantization.md ("Quantized exports") for the file layout.
//
// Every quantized matrix keeps its parameter's name and shape (Linear weights [in, out], the
// embedding [V, C]):
//   int8: "<param>" I8, q = round(W·s) per output, and "<param>.scale" F32 [outputs], the s of
//         each output (s = 127 / max|W_j|, so W ≈ q / s): [out] for a Linear weight (its last
//         dimension), [V] for the embedding (its first).
//   bf16: "<param>" BF16, W rounded to nearest even.
// Everything else (biases, norms, learned positions) stays F32. The metadata key
// kComputeTypeKey says "int8" or "bf16"; an f32 export has no such key.
//
// Dimension key: V vocabulary, C d_model.

#include <map>
#include <string>
#include <vector>

#include "infer/quant.h"
#include "io/checkpoint.h"  // NamedTensor
#include "io/safetensors.h"
#include "model/config.h"

namespace seqtape {

inline constexpr char kComputeTypeKey[] = "compute_type";
inline constexpr char kScaleSuffix[] = ".scale";

// Whether decoding quantizes parameter `name`: the embedding, the output projection's weight
// and every attention and feed-forward matrix.
bool is_quantized_matrix(const std::string& name);

// A checkpoint's parameters ready to write: F32 tensors (the float32 ones, and the int8 scales)
// and the stored I8 or BF16 matrices, quantized exactly as decoding at type t quantizes them.
struct QuantizedTensors {
  std::vector<NamedTensor> tensors;
  std::vector<StoredTensor> stored;
};
QuantizedTensors quantize_for_export(const std::vector<NamedTensor>& params, ComputeType t);

// What a quantized export's weights become: the float32 parameters by name, and the matrices
// as decoding stores them (no float32 copy).
struct QuantizedParams {
  ComputeType type = ComputeType::F32;
  std::vector<NamedTensor> params;
  std::map<std::string, QuantWeight> matrices;
};
// The file's weights as its metadata says: float32 ones as they are (no kComputeTypeKey), or a
// quantized export checked tensor by tensor. A missing scale, a scale of the wrong dtype or
// shape, a non-finite or non-positive scale, an int8 value of -128, I8/BF16 data for a
// parameter that stays float32, a matrix stored in the wrong dtype, or a compute type the file
// cannot hold are Errors naming `where` and the tensor. Shapes against the configuration are
// checked by the model (check_parameters).
QuantizedParams read_quantized(SafetensorsFile file, const std::string& where);

// The parameter's shape as the file holds it, from its matrix ([V, C] for the embedding,
// [in, out] for the others).
Shape stored_shape(const std::string& name, const QuantMatrix& m);

// float32 tensors of the quantized matrices, as stored (for eval's teacher-forced loss, which
// runs the float32 training model).
std::vector<NamedTensor> dequantized(const std::map<std::string, QuantWeight>& matrices);

}  // namespace seqtape
