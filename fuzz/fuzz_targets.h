#pragma once
// The bodies of the libFuzzer targets, shared with the regression tests in tests/faults/ so that
// a committed crash input is replayed through exactly the code that found it.
//
// Each function feeds one input to a reader and returns normally when the reader accepts it or
// rejects it the documented way (seqtape::Error; for the JSON config also the parser's
// nlohmann::json::exception, which the CLI turns into an "invalid JSON" error). Anything else
// is a finding: a crash or sanitizer report, any other exception escaping, or an
// InvariantViolation thrown when an accepted input does not survive a write/read round trip.

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace seqtape::fuzz {

// Not derived from seqtape::Error, so the fuzz targets never treat it as expected.
struct InvariantViolation : std::logic_error {
  using std::logic_error::logic_error;
};

// A whole checkpoint file -> load_checkpoint_from_memory. An accepted file must re-encode to
// the same bytes, and its vocabulary and config must either load or fail with an Error, as a
// resumed training run would load them.
void checkpoint_input(std::string_view bytes);

// A whole safetensors file -> read_safetensors_from_memory; an accepted file must survive
// safetensors_to_bytes -> read again with the same tensors (I8 and BF16 ones too) and metadata.
// Then read_quantized (a quantized export's dtypes, scales and values) accepts it or throws an
// Error.
void safetensors_input(std::string_view bytes);

// "<vocabulary file bytes>\0<text>" -> Vocab::load (through an in-memory file), Tokenizer,
// encode(text); without a \0 the whole input is both. Whenever encode emits no <unk>,
// decode(encode(text)) must give the text back.
void vocab_input(std::string_view bytes);

// A SentencePiece model file (a vocabulary directory's spm.model, or the tokenizer bytes a
// checkpoint carries) -> SubwordTokenizer::from_model_bytes. An accepted model must rebuild
// from its own model_bytes() with the same pieces, encode a few texts (its own pieces among
// them) to ids inside the vocabulary, and decode and stream those ids without an error.
void subword_input(std::string_view bytes);

// TSV text -> parse_tsv, then the vocabulary, both example encodings and padded batches. An
// accepted file must survive write_tsv -> parse_tsv with the same pairs.
void tsv_input(std::string_view bytes);

// JSON text -> nlohmann::json::parse -> ModelConfig::from_json; an accepted config must
// survive to_json -> from_json unchanged.
void config_input(std::string_view bytes);

// For the checkpoint fuzzer's custom mutator: if `data` is long enough to hold an envelope
// header, rewrite its payload-length and checksum fields to match the payload, so mutations
// reach the payload decoder instead of stopping at the checksum.
void reseal_envelope(uint8_t* data, size_t size);

}  // namespace seqtape::fuzz
