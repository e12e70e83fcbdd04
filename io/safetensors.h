#pragma once
// Weights in the standard safetensors format (https://github.com/huggingface/safetensors), so
// that other tools can read what seqtape trains and seqtape can read their F32/F64 weights.
//
//   u64 little-endian N, the header length in bytes
//   N bytes of JSON, padded with spaces so that 8 + N is a multiple of 8:
//     {"__metadata__":{"key":"value",...},                  (only if there is metadata)
//      "<name>":{"dtype":"F32"|"F64"|"I8"|"BF16","shape":[d0,...],"data_offsets":[begin,end]}, ...}
//   the data section: raw row-major little-endian tensors, contiguous, without padding
//
// Offsets are relative to the data section. The writer lays tensors out in the given order and
// lists them in the header in that order. The reader accepts any header order but requires the
// spans, sorted by offset, to tile the data section exactly: the first starts at 0, each starts
// where the previous ends, each is dtype size x numel long, and the last ends at the file end.
// The header is read only after its length is checked against the file (and a 100 MB cap);
// tensors are allocated only after all spans are checked, so memory stays within the file size
// (plus the parsed header).
//
// F32 and F64 tensors are Tensors. I8 and BF16 ones (the matrices of a quantized export,
// infer/quant_io.h) are StoredTensors: their raw bytes, which only the quantized loader reads.
// Other dtypes are refused by name.

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "io/checkpoint.h"  // NamedTensor

namespace seqtape {

inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

// The "linear_layout" metadata of a seqtape export: Linear weights [in, out]. Loaders refuse an
// export saying anything else, since a transposed square matrix has the same shape.
inline constexpr std::string_view kLinearLayout = "[in, out]: y = x @ W + b";

enum class StoredDType : uint8_t { I8, BF16 };
const char* to_string(StoredDType d);  // "I8", "BF16"
size_t stored_dtype_size(StoredDType d);

// A tensor kept as its little-endian bytes: numel x stored_dtype_size(dtype) of them.
struct StoredTensor {
  std::string name;
  StoredDType dtype = StoredDType::I8;
  Shape shape;
  std::vector<uint8_t> bytes;
};

struct SafetensorsFile {
  std::vector<NamedTensor> tensors;  // F32 and F64, in data-offset order
  std::vector<StoredTensor> stored;  // I8 and BF16, in data-offset order
  std::map<std::string, std::string> metadata;
};

// Written atomically (write_file_atomic): `tensors`, then `stored`. Throws Error for an
// undefined tensor, a stored tensor whose bytes do not fit its shape, a duplicate name or the
// reserved name "__metadata__".
void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {},
                       const std::vector<StoredTensor>& stored = {});
// The exact bytes write_safetensors writes.
std::string safetensors_to_bytes(const std::vector<NamedTensor>& tensors,
                                 const std::map<std::string, std::string>& metadata = {},
                                 const std::vector<StoredTensor>& stored = {});

// Every error names the path and, where one is involved, the tensor.
SafetensorsFile read_safetensors(const std::string& path);
// `name` stands for the path in error messages.
SafetensorsFile read_safetensors_from_memory(std::string_view bytes, const std::string& name);

}  // namespace seqtape
