#pragma once
// POST /v1/generate bodies: JSON → checked inputs and GenerateOptions. Field names are the long
// names of `seqtape generate`'s flags with underscores (n_best, max_new, stop, end, suppress,
// no_cache, ...). Every problem is a RequestError naming the field.
//
// Dimension key: B inputs.

#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "infer/model.h"
#include "infer/options.h"
#include "text/tokenizer.h"

namespace seqtape::serve {

// The server's limits on one request (400 naming the field when exceeded).
struct Limits {
  size_t max_body_bytes = 1 << 20;  // the request body ("body")
  size_t max_input_bytes = 4096;    // each input's UTF-8 bytes ("input" / "inputs[i]")
  size_t max_inputs = 64;           // entries of "inputs"
  int64_t max_new = 512;            // "max_new"
  int64_t max_beam = 8;             // "beam"
};

struct RequestError : std::runtime_error {
  RequestError(std::string field_, const std::string& message)
      : std::runtime_error(message), field(std::move(field_)) {}
  std::string field;
};

struct GenerateRequest {
  std::vector<std::string> texts;            // [B]
  std::vector<std::vector<int32_t>> inputs;  // [B] encode_input() ids
  GenerateOptions options;                   // checked with GenerateOptions::problem()
  bool stream = false;
  int64_t timeout_ms = 0;  // the request's deadline from its arrival; 0: the server's default
  bool list = false;       // "inputs" (answer: an array) rather than "input" (answer: one object)
};

// The field names a body may use, in the order /v1/model and --help list them.
const std::vector<std::string>& request_fields();
// The decoding options' fields as GET /v1/model describes them (the playground reads it): per
// field its default, generate's help, and "needs": "sample" for those that act only then.
nlohmann::json request_options();

// The inputs are encoded with the model's own codec (its SentencePiece model, or characters).
GenerateRequest parse_generate_request(const std::string& body, const InferenceModel& model,
                                       const Limits& limits);

// The two halves of parse_generate_request(), for the endpoints that take another body shape
// and translate it (serve/openai.h): the body as a JSON object within the body limit; and
// a JSON object whose keys are request fields, checked and encoded.
nlohmann::json parse_json_object(const std::string& body, const Limits& limits);
GenerateRequest parse_generate_json(const nlohmann::json& j, const InferenceModel& model,
                                    const Limits& limits);

}  // namespace seqtape::serve
