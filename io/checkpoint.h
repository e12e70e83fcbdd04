#pragma once
// Training checkpoints: everything needed to resume a run bit for bit (weights, optimizer
// moments, step, RNG, data-loader position) plus the config and vocabulary that give the
// weights their meaning.
//
// File format. A checkpoint file is an envelope (io/envelope.h) of kind 1 = checkpoint,
// format version 2 (version 1, without the two tokenizer fields, still loads as a character
// vocabulary), whose payload is a cereal portable-binary stream written little-endian:
//
//   u8   1                 cereal's endianness flag (1 = little-endian; anything else rejected)
//   str  config_json
//   u64  V, then V x str   vocab (token id = index)
//   u64  P, then P x tensor      params
//   str  optimizer_name
//   u64  S, then S x tensor      optimizer_state
//   i64  step              (>= 0)
//   str  rng_state
//   str  loader_state_json
//   str  metrics_json
//   str  tokenizer_kind    (version 2) "chars", "sentencepiece", "words", or a tokenizer per
//                          side as "<source>/<target>", e.g. "chars/words" (text/text_codec.h)
//   str  tokenizer_model   (version 2) the SentencePiece model bytes; empty for "chars"
//   (end of payload: trailing bytes are an error)
//
//   str    = u64 byte length n, then n bytes (no terminator)
//   tensor = str name, u8 dtype (0 = f32, 1 = f64), u64 rank r (<= 8), r x i64 dims (>= 0),
//            then numel x dtype-size bytes of row-major little-endian IEEE-754 data
//
// Loading checks the envelope (length, checksum) before any byte reaches cereal, and then
// still bounds every size read from the payload by the bytes that remain (a crafted file can
// carry a valid checksum), so a load allocates at most a small multiple of the file size and
// any damage is an Error naming the file, never a crash.

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tensor/tensor.h"

namespace seqtape {

inline constexpr uint32_t kCheckpointVersion = 2;
inline constexpr int kMaxCheckpointTensorRank = 8;

struct NamedTensor {
  std::string name;  // dotted path, e.g. "decoder.layers.0.cross_attn.wq"
  Tensor value;
};

struct Checkpoint {
  std::string config_json;  // the ModelConfig as JSON, owned by the trainer
  std::vector<std::string> vocab;
  std::vector<NamedTensor> params;
  std::string optimizer_name;  // e.g. "adam"
  std::vector<NamedTensor> optimizer_state;
  int64_t step = 0;
  std::string rng_state;          // opaque, from the RNG's own serializer
  std::string loader_state_json;  // opaque JSON owned by the data loader
  std::string metrics_json;       // opaque JSON owned by the trainer
  // The text codec (text/text_codec.h): its kind and model bytes; with `vocab` they rebuild it
  // (codec_from_parts). A version-1 file loads as "chars" with no bytes.
  std::string tokenizer_kind = "chars";
  std::string tokenizer_model;
};

// Throws an Error naming `where`, the tensor and the index when a value is NaN or Inf: a
// file can be intact (checksum) and still hold them (crafted, or written by another tool).
void check_finite(const Tensor& t, const std::string& name, const std::string& where,
                  const char* what = "parameter");
void check_finite(const std::vector<NamedTensor>& ts, const std::string& where,
                  const char* what = "parameter");

// Writes atomically (write_file_atomic): on failure the previous file at `path` is intact.
// Throws Error for an undefined tensor, a rank above 8, a duplicate name or a negative step.
void save_checkpoint(const std::string& path, const Checkpoint& ckpt);
Checkpoint load_checkpoint(const std::string& path);
// `path`, or path/checkpoint.bin when `path` is a run directory holding one: what a --model
// that names a run (generate, eval, serve, export) reads.
std::string run_checkpoint(const std::string& path);

// The element-wise mean of the parameters of checkpoints of one run (as fairseq's
// average_checkpoints.py and Marian do), at the newest one's step, without optimizer or loader
// state: it does not resume. Every checkpoint must have the first one's configuration,
// vocabulary and parameters (else an Error naming the file). At least one path.
Checkpoint average_checkpoints(const std::vector<std::string>& paths);

// The complete file bytes (envelope included) that save_checkpoint writes.
std::string checkpoint_to_bytes(const Checkpoint& ckpt);
// Parses complete file bytes; `name` stands for the path in error messages.
Checkpoint load_checkpoint_from_memory(std::string_view bytes, const std::string& name);

}  // namespace seqtape
