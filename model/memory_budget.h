#pragma once
// The memory a model needs, estimated from its configuration before anything is allocated,
// and the memory the machine can give: a run that cannot fit is refused up front with both
// figures instead of dying in std::bad_alloc (or being killed) halfway through.
//
// Estimates are deliberately on the low side (they count the big buffers, not every
// temporary), so a refusal means the run certainly could not fit.

#include <cstdint>
#include <string>

#include "model/config.h"

namespace seqtape {

// Parameters of a model built from `c` (as nn/ and infer/ lay them out).
uint64_t parameter_count(const ModelConfig& c);

struct MemoryNeed {
  uint64_t bytes = 0;
  std::string what;  // "parameters, gradients, Adam state and activations (batch 64, length 30)"
};

// Training: float32 parameters and gradients, the optimizer's state of `state_bytes_per_parameter`
// bytes per parameter (named `state_noun` in the message, e.g. "Adam state"; "" when it keeps
// none), plus the activations the tape keeps for a batch of `batch` sequences of `length` tokens.
MemoryNeed training_memory(const ModelConfig& c, int64_t batch, int64_t length,
                           uint64_t state_bytes_per_parameter, const std::string& state_noun);
// Decoding: the weights (as loaded and as float32), the KV cache of `rows` hypotheses decoded
// at once (an input's beams, or its sampled draws: `rows_are` names them in the message) of up
// to `length` tokens (plus the cross-attention cache of a `source_length` source) and the
// logits of every row.
MemoryNeed decoding_memory(const ModelConfig& c, int64_t rows, int64_t source_length,
                           int64_t length, const char* rows_are = "beam(s)");

// Bytes this process can still allocate: the smaller of MemAvailable (/proc/meminfo) and, when
// RLIMIT_AS is set, the limit minus the address space already in use. `source` names which.
// UINT64_MAX when neither is known.
uint64_t available_memory(std::string* source = nullptr);

// Throws Error "<doing>: needs 37.2 GiB for <what>; 23.4 GiB available (MemAvailable)" when
// `need` exceeds available_memory().
void check_memory_budget(const MemoryNeed& need, const std::string& doing);

// "37.2 GiB", "512.0 MiB", "12 bytes".
std::string format_bytes(uint64_t bytes);

// Test and fuzzing hook: treat only `bytes` as available (0 = off).
void set_memory_limit_for_testing(uint64_t bytes);

}  // namespace seqtape
