// parse_generate_request(): one JSON body → inputs and options, or a RequestError naming the
// field.
//
// Dimension key: B inputs.
#include "serve/request.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <optional>
#include <type_traits>

#include "infer/search.h"  // encode_input
#include "model/memory_budget.h"
#include "tensor/tensor.h"  // Error

namespace seqtape::serve {

namespace {

using nlohmann::json;

constexpr int64_t kMaxTimeoutMs = 86'400'000;  // a day

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

}  // namespace

const std::vector<std::string>& request_fields() {
  static const std::vector<std::string> fields = [] {
    std::vector<std::string> f = {"input", "inputs", "stream"};
    for (const DecodingOption& d : decoding_options()) f.emplace_back(d.json);
    f.emplace_back("timeout_ms");
    return f;
  }();
  return fields;
}

json request_options() {
  const GenerateOptions defaults;
  json out = json::array();
  for (const DecodingOption& d : decoding_options()) {
    json row = {{"name", d.json}, {"default", option_value(d, defaults)}, {"help", d.help}};
    if (d.needs_sample) row["needs"] = option_json("sample");
    out.push_back(std::move(row));
  }
  return out;
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

// One option's field into its member (the type the member has), or a RequestError.
void read_option(const json& v, const DecodingOption& d, const InferenceModel& model,
                 GenerateOptions& o) {
  const std::string f(d.json);
  std::visit(
      [&](auto m) {
        using T = std::remove_cvref_t<decltype(o.*m)>;
        if constexpr (std::is_same_v<T, int64_t>) {
          o.*m = get_int(v, f);
        } else if constexpr (std::is_same_v<T, uint64_t>) {
          if (!v.is_number_unsigned() && !(v.is_number_integer() && v >= 0))
            throw RequestError(f, f + " must be a non-negative integer");
          o.*m = v.get<uint64_t>();
        } else if constexpr (std::is_same_v<T, double>) {
          o.*m = get_number(v, f);
        } else if constexpr (std::is_same_v<T, bool>) {
          o.*m = get_bool(v, f) != d.negated;
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          o.*m = get_strings(v, f);
        } else if (std::optional<std::string> t =
                       set_token_option(d, o, model.vocab(), get_strings(v, f))) {
          throw RequestError(f, f + ": '" + *t + "' is not a token of the model's vocabulary (" +
                                    std::to_string(model.vocab().size()) + " tokens)");
        }
      },
      d.member);
}

// The decoding options the request gives; the rest keep GenerateOptions' defaults.
void read_options(const json& j, const InferenceModel& model, GenerateOptions& o) {
  for (const DecodingOption& d : decoding_options())
    if (const auto it = j.find(std::string(d.json)); it != j.end()) read_option(*it, d, model, o);
}

// The request field a message of problem() or given_problem() is about: it starts with it.
std::string field_of(const std::string& problem) {
  std::string field;
  for (const std::string& f : request_fields())
    if (problem.rfind(f, 0) == 0 && f.size() > field.size()) field = f;
  return field;
}

// GenerateOptions' own check, in the request's field names; then what only a request (like
// the command line) can get wrong; then the server's limits.
void check_options(const json& j, const GenerateOptions& o, bool stream, const Limits& limits) {
  const auto name = [](std::string_view field) { return option_json(field); };
  if (std::optional<std::string> p = o.problem(name)) throw RequestError(field_of(*p), *p);
  const auto given = [&j](const DecodingOption& d) { return j.contains(std::string(d.json)); };
  if (std::optional<std::string> p = given_problem(o, given, name))
    throw RequestError(field_of(*p), *p);
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
