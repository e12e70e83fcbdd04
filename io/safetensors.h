#pragma once
// Weights in the standard safetensors format (https://github.com/huggingface/safetensors), so
// that other tools can read what seqtape trains and seqtape can read their F32/F64 weights.
//
//   u64 little-endian N, the header length in bytes
//   N bytes of JSON, padded with spaces so that 8 + N is a multiple of 8:
//     {"__metadata__":{"key":"value",...},                  (only if there is metadata)
//      "<name>":{"dtype":"F32"|"F64","shape":[d0,...],"data_offsets":[begin,end]}, ...}
//   the data section: raw row-major little-endian tensors, contiguous, without padding
//
// Offsets are relative to the data section. The writer lays tensors out in the given order and
// lists them in the header in that order. The reader accepts any header order but requires the
// spans, sorted by offset, to tile the data section exactly: the first starts at 0, each starts
// where the previous ends, each is dtype size x numel long, and the last ends at the file end.
// The header is read only after its length is checked against the file (and a 100 MB cap);
// tensors are allocated only after all spans are checked, so memory stays within the file size
// (plus the parsed header).

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

struct SafetensorsFile {
  std::vector<NamedTensor> tensors;  // in data-offset order
  std::map<std::string, std::string> metadata;
};

// Written atomically (write_file_atomic). Throws Error for an undefined tensor, a duplicate
// name or the reserved name "__metadata__".
void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});
// The exact bytes write_safetensors writes.
std::string safetensors_to_bytes(const std::vector<NamedTensor>& tensors,
                                 const std::map<std::string, std::string>& metadata = {});

// Every error names the path and, where one is involved, the tensor.
SafetensorsFile read_safetensors(const std::string& path);
// `name` stands for the path in error messages.
SafetensorsFile read_safetensors_from_memory(std::string_view bytes, const std::string& name);

}  // namespace seqtape
