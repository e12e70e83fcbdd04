// parse_generate_request(): one JSON body → inputs and options, or a RequestError naming the
// field.
//
// Dimension key: B inputs.
#include "serve/request.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>

#include "infer/search.h"  // encode_input
#include "model/memory_budget.h"
#include "tensor/tensor.h"  // Error

namespace seqtape::serve {

namespace {

using nlohmann::json;

constexpr int64_t kMaxTimeoutMs = 86'400'000;  // a day

// GenerateOptions member → request field (the CLI flag's long name with underscores).
std::string field_of(std::string_view option) {
  if (option == "stop_strings") return "stop";
  if (option == "end_ids") return "end";
  if (option == "suppress_ids") return "suppress";
  if (option == "use_cache") return "no_cache";
  return std::string(option);
}

int64_t get_int(const json& j, const std::string& f) {
  if (!j.is_number_integer()) throw RequestError(f, f + " must be an integer");
  if (j.is_number_unsigned() && j.get<uint64_t>() > uint64_t(INT64_MAX))
    throw RequestError(f, f + " is too large");
  return j.get<int64_t>();
}
double get_number(const json& j, const std::string& f) {
  if (!j.is_number()) throw RequestError(f, f + " must be a number");
  return j.get<double>();
}
bool get_bool(const json& j, const std::string& f) {
  if (!j.is_boolean()) throw RequestError(f, f + " must be true or false");
  return j.get<bool>();
}
std::vector<std::string> get_strings(const json& j, const std::string& f) {
  if (!j.is_array()) throw RequestError(f, f + " must be a list of strings");
  std::vector<std::string> out;
  for (const json& e : j) {
    if (!e.is_string()) throw RequestError(f, f + " must be a list of strings");
    out.push_back(e.get<std::string>());
  }
  return out;
}

std::vector<int32_t> token_ids(const InferenceModel& model, const std::string& f,
                               const std::vector<std::string>& tokens) {
  std::vector<int32_t> ids;
  for (const std::string& t : tokens) {
    const std::optional<int32_t> id = model.vocab().find(t);
    if (!id)
      throw RequestError(f, f + ": '" + t + "' is not a token of the model's vocabulary (" +
                                std::to_string(model.vocab().size()) + " tokens)");
    ids.push_back(*id);
  }
  return ids;
}

}  // namespace

const std::vector<std::string>& request_fields() {
  static const std::vector<std::string> fields = {
      "input",           "inputs",       "stream",      "beam",      "n_best", "length_penalty",
      "sample",          "temperature",  "top_k",       "top_p",     "seed",   "repetition_penalty",
      "no_repeat_ngram", "min_new",      "max_new",     "stop",      "end",    "suppress",
      "no_cache",        "verify_cache", "num_samples", "timeout_ms"};
  return fields;
}

json parse_json_object(const std::string& body, const Limits& limits) {
  if (body.size() > limits.max_body_bytes)
    throw RequestError("body", "body is " + std::to_string(body.size()) +
                                   " bytes, more than the limit of " +
                                   std::to_string(limits.max_body_bytes));
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {  // a syntax error, or a number past double (1e999)
    throw RequestError("body", std::string("body is not valid JSON: ") + e.what());
  }
  if (!j.is_object()) throw RequestError("body", "body must be a JSON object");
  return j;
}

namespace {

// Every key of the body is a request field.
void check_fields(const json& j) {
  for (const auto& [key, value] : j.items()) {
    bool known = false;
    for (const std::string& f : request_fields()) known = known || f == key;
    if (!known) throw RequestError(key, "unknown field '" + key + "'");
  }
}

// input (one string) or inputs (a list).
void read_texts(const json& j, const Limits& limits, GenerateRequest& r) {
  if (j.contains("input") == j.contains("inputs"))
    throw RequestError("input", "give exactly one of input (a string) and inputs (a list)");
  if (j.contains("input")) {
    if (!j["input"].is_string()) throw RequestError("input", "input must be a string");
    r.texts.push_back(j["input"].get<std::string>());
    return;
  }
  r.list = true;
  r.texts = get_strings(j["inputs"], "inputs");
  if (r.texts.empty()) throw RequestError("inputs", "inputs must not be empty");
  if (r.texts.size() > limits.max_inputs)
    throw RequestError("inputs", "inputs has " + std::to_string(r.texts.size()) +
                                     " entries, more than the limit of " +
                                     std::to_string(limits.max_inputs));
}

// The decoding options the request gives; the rest keep GenerateOptions' defaults.
void read_options(const json& j, const InferenceModel& model, GenerateOptions& o) {
  if (j.contains("beam")) o.beam = get_int(j["beam"], "beam");
  if (j.contains("n_best")) o.n_best = get_int(j["n_best"], "n_best");
  if (j.contains("length_penalty"))
    o.length_penalty = get_number(j["length_penalty"], "length_penalty");
  if (j.contains("sample")) o.sample = get_bool(j["sample"], "sample");
  if (j.contains("num_samples")) o.num_samples = get_int(j["num_samples"], "num_samples");
  if (j.contains("temperature")) o.temperature = get_number(j["temperature"], "temperature");
  if (j.contains("top_k")) o.top_k = get_int(j["top_k"], "top_k");
  if (j.contains("top_p")) o.top_p = get_number(j["top_p"], "top_p");
  if (j.contains("seed")) {
    if (!j["seed"].is_number_unsigned() && !(j["seed"].is_number_integer() && j["seed"] >= 0))
      throw RequestError("seed", "seed must be a non-negative integer");
    o.seed = j["seed"].get<uint64_t>();
  }
  if (j.contains("repetition_penalty"))
    o.repetition_penalty = get_number(j["repetition_penalty"], "repetition_penalty");
  if (j.contains("no_repeat_ngram"))
    o.no_repeat_ngram = get_int(j["no_repeat_ngram"], "no_repeat_ngram");
  if (j.contains("min_new")) o.min_new = get_int(j["min_new"], "min_new");
  if (j.contains("max_new")) o.max_new = get_int(j["max_new"], "max_new");
  if (j.contains("stop")) o.stop_strings = get_strings(j["stop"], "stop");
  if (j.contains("end")) {
    o.end_ids = {model.vocab().eos_id()};
    for (int32_t id : token_ids(model, "end", get_strings(j["end"], "end")))
      o.end_ids.push_back(id);
  }
  if (j.contains("suppress"))
    o.suppress_ids = token_ids(model, "suppress", get_strings(j["suppress"], "suppress"));
  if (j.contains("no_cache")) o.use_cache = !get_bool(j["no_cache"], "no_cache");
  if (j.contains("verify_cache")) o.verify_cache = get_bool(j["verify_cache"], "verify_cache");
}

// GenerateOptions' own check, in the request's field names; then what only a request (like
// the command line) can get wrong; then the server's limits.
void check_options(const json& j, const GenerateOptions& o, bool stream, const Limits& limits) {
  // Each message of problem() starts with the name of the option it is about.
  if (std::optional<std::string> p = o.problem(field_of)) {
    std::string field;
    for (const std::string& f : request_fields())
      if (p->rfind(f, 0) == 0 && f.size() > field.size()) field = f;
    throw RequestError(field, *p);
  }
  if (!o.sample)
    for (const char* f : {"temperature", "top_k", "top_p", "seed"})
      if (j.contains(f)) throw RequestError(f, std::string(f) + " needs sample");
  if (o.verify_cache && !o.use_cache)
    throw RequestError("verify_cache",
                       "verify_cache already compares with the uncached recompute; drop no_cache");
  if (o.max_new > limits.max_new)
    throw RequestError("max_new", "max_new " + std::to_string(o.max_new) +
                                      (j.contains("max_new") ? "" : " (the default)") +
                                      " is more than the server's limit of " +
                                      std::to_string(limits.max_new));
  if (o.beam > limits.max_beam)
    throw RequestError("beam", "beam " + std::to_string(o.beam) +
                                   " is more than the server's limit of " +
                                   std::to_string(limits.max_beam));
  // Draws take a row each, as beams do: the same limit bounds both.
  if (o.num_samples > limits.max_beam)
    throw RequestError("num_samples", "num_samples " + std::to_string(o.num_samples) +
                                          " is more than the server's limit of " +
                                          std::to_string(limits.max_beam) + " (the beam limit)");
  // As generate's --stream: one text per input, the draws would interleave.
  if (stream && o.num_samples > 1)
    throw RequestError("num_samples", "num_samples > 1 cannot be streamed (one text per input)");
}

// Each text within the byte limit, tokenized.
void encode_texts(const InferenceModel& model, const Limits& limits, GenerateRequest& r) {
  for (size_t b = 0; b < r.texts.size(); ++b) {
    const std::string field = r.list ? "inputs[" + std::to_string(b) + "]" : "input";
    if (r.texts[b].size() > limits.max_input_bytes)
      throw RequestError(field, field + " is " + std::to_string(r.texts[b].size()) +
                                    " bytes, more than the limit of " +
                                    std::to_string(limits.max_input_bytes));
    try {
      r.inputs.push_back(encode_input(model, model.codec(), r.texts[b], field));
    } catch (const Error& e) {
      throw RequestError(field, e.what());
    }
  }
}

// The hypotheses a request decodes together (every input's beams) must fit in the memory the
// machine has left (model/memory_budget.h), or the request is refused like any other limit: raised
// limits (--beam-limit, --max-inputs) never let one request take the server down.
void check_memory(const InferenceModel& model, const GenerateRequest& r) {
  size_t longest = 0;
  for (const std::vector<int32_t>& in : r.inputs) longest = std::max(longest, in.size());
  try {
    check_memory_budget(decoding_need(model.config(), longest, r.inputs.size(), r.options,
                                      "hypotheses (inputs x beam)"),
                        "this request");
  } catch (const Error& e) {
    throw RequestError(r.options.beam > 1 ? "beam" : "inputs", e.what());
  }
}

}  // namespace

GenerateRequest parse_generate_request(const std::string& body, const InferenceModel& model,
                                       const Limits& limits) {
  return parse_generate_json(parse_json_object(body, limits), model, limits);
}

GenerateRequest parse_generate_json(const json& j, const InferenceModel& model,
                                    const Limits& limits) {
  check_fields(j);
  GenerateRequest r;
  read_texts(j, limits, r);
  if (j.contains("stream")) r.stream = get_bool(j["stream"], "stream");
  if (j.contains("timeout_ms")) {
    r.timeout_ms = get_int(j["timeout_ms"], "timeout_ms");
    if (r.timeout_ms < 1 || r.timeout_ms > kMaxTimeoutMs)
      throw RequestError("timeout_ms", "timeout_ms must be in [1, " +
                                           std::to_string(kMaxTimeoutMs) + "] (ms), got " +
                                           std::to_string(r.timeout_ms));
  }
  read_options(j, model, r.options);
  check_options(j, r.options, r.stream, limits);
  encode_texts(model, limits, r);
  check_memory(model, r);
  return r;
}

}  // namespace seqtape::serve
