// OpenAI's completion API over seqtape's requests: a body in OpenAI's shape becomes a
// /v1/generate body, checked by parse_generate_json(); results become completion objects.
//
// Dimension key: B prompts, N choices per prompt.
#include "serve/openai.h"

#include <algorithm>

namespace seqtape::serve {

namespace {

using nlohmann::json;

// OpenAI's default max_tokens (its API reference).
constexpr int64_t kDefaultMaxTokens = 16;
// More choices than this are refused before the option checks (which bound them by --beam-limit).
constexpr int64_t kMaxChoices = 4096;

// The extension object's fields: generate's options that OpenAI's API has no name for (the
// table's rows without an OpenAI name), and the request's deadline.
const std::vector<std::string>& extension_fields() {
  static const std::vector<std::string> fields = [] {
    std::vector<std::string> f;
    for (const DecodingOption& d : decoding_options())
      if (d.openai.empty()) f.emplace_back(d.json);
    f.emplace_back("timeout_ms");
    return f;
  }();
  return fields;
}

bool contains(const std::vector<std::string>& list, const std::string& s) {
  return std::find(list.begin(), list.end(), s) != list.end();
}

// The OpenAI name of a /v1/generate field, for the errors of parse_generate_json().
std::string openai_field(const std::string& f) {
  if (f == "input" || f == "inputs") return "prompt";
  if (f.rfind("inputs[", 0) == 0) return "prompt" + f.substr(6);
  for (const DecodingOption& d : decoding_options())
    if (d.json == f && !d.openai.empty()) return std::string(d.openai);
  if (contains(extension_fields(), f)) return "seqtape." + f;
  return f;
}

// A field given and not null (OpenAI's clients send null for "the default").
bool given(const json& j, const char* f) {
  return j.contains(f) && !j[f].is_null();
}

// prompt → input / inputs.
void read_prompt(const json& body, json& g) {
  if (!given(body, "prompt")) throw RequestError("prompt", "prompt is required");
  const json& p = body["prompt"];
  const char* what = "prompt must be a string or a list of strings (token ids are not taken)";
  if (p.is_string()) {
    g["input"] = p;
    return;
  }
  if (!p.is_array()) throw RequestError("prompt", what);
  for (const json& e : p)
    if (!e.is_string()) throw RequestError("prompt", what);
  g["inputs"] = p;
}

// The extension object's options, copied as they are (parse_generate_json() checks them).
void read_extension(const json& body, json& g) {
  if (!given(body, "seqtape")) return;
  const json& x = body["seqtape"];
  if (!x.is_object()) throw RequestError("seqtape", "seqtape must be an object");
  for (const auto& [key, value] : x.items()) {
    if (!contains(extension_fields(), key))
      throw RequestError("seqtape." + key, "unknown field 'seqtape." + key + "'");
    g[key] = value;
  }
}

// temperature, top_p, seed and n: sampling, beam or greedy.
void read_sampling(const json& body, json& g, CompletionRequest& r) {
  const bool beam = g.contains("beam") && g["beam"].is_number_integer() && g["beam"] > 1;
  json temperature = given(body, "temperature") ? body["temperature"] : json(beam ? 0.0 : 1.0);
  if (!temperature.is_number()) throw RequestError("temperature", "temperature must be a number");
  if (given(body, "n")) {
    const json& n = body["n"];
    if (!n.is_number_integer() || n < 1 || n > kMaxChoices)
      throw RequestError("n", "n must be an integer in [1, " + std::to_string(kMaxChoices) + "]");
    r.n = n.get<int64_t>();
  }
  if (temperature.get<double>() != 0) {
    g["sample"] = true;
    g["temperature"] = temperature;
    for (const char* f : {"top_p", "seed"})
      if (given(body, f)) g[f] = body[f];
    if (r.n > 1) g["num_samples"] = r.n;
    return;
  }
  // Greedy or beam: top_p and seed have nothing to act on.
  if (r.n > 1 && !beam)
    throw RequestError("n", "n > 1 needs temperature > 0 (draws) or seqtape.beam >= n (n-best)");
  if (r.n > 1) g["n_best"] = r.n;
}

// The body's fields, each known: OpenAI's that seqtape takes, and the extension object.
void check_completion_fields(const json& body) {
  static const std::vector<std::string> fields = {
      "model", "prompt", "max_tokens", "temperature",    "top_p", "n",
      "stop",  "seed",   "stream",     "stream_options", "user",  "seqtape"};
  for (const auto& [key, value] : body.items())
    if (!contains(fields, key))
      throw RequestError(key, "'" + key +
                                  "' is not supported by seqtape (fields: model, prompt, "
                                  "max_tokens, temperature, top_p, n, stop, seed, stream, "
                                  "stream_options, user, and seqtape for generate's own options)");
}

void read_model(const json& body, const std::string& model_name) {
  if (!given(body, "model")) throw RequestError("model", "model is required");
  if (!body["model"].is_string() || body["model"] != model_name)
    throw RequestError("model", "model " + body["model"].dump() + " is not served here (GET " +
                                    "/v1/models lists \"" + model_name + "\")");
}

// The rest of OpenAI's fields: max_tokens, stop, stream, stream_options and user.
void read_rest(const json& body, const Limits& limits, json& g, CompletionRequest& r) {
  g["max_new"] = given(body, "max_tokens") ? body["max_tokens"]
                                           : json(std::min(kDefaultMaxTokens, limits.max_new));
  if (given(body, "stop"))
    g["stop"] = body["stop"].is_string() ? json::array({body["stop"]}) : body["stop"];
  if (given(body, "stream")) g["stream"] = body["stream"];
  if (given(body, "stream_options")) {
    const json& so = body["stream_options"];
    if (!so.is_object() || (so.size() != 0 && !(so.size() == 1 && so.contains("include_usage"))) ||
        (so.contains("include_usage") && !so["include_usage"].is_boolean()))
      throw RequestError("stream_options",
                         "stream_options must be an object {\"include_usage\": true or false}");
    r.include_usage = so.value("include_usage", false);
  }
  if (given(body, "user") && !body["user"].is_string())
    throw RequestError("user", "user must be a string");
}

}  // namespace

CompletionRequest parse_completion_request(const std::string& body_text,
                                           const InferenceModel& model, const Limits& limits,
                                           const std::string& model_name) {
  const json body = parse_json_object(body_text, limits);
  check_completion_fields(body);
  read_model(body, model_name);
  CompletionRequest r;
  json g = json::object();
  read_prompt(body, g);
  read_extension(body, g);
  read_sampling(body, g, r);
  read_rest(body, limits, g, r);
  // Read without converting: a "stream" that is not a boolean is parse_generate_json's error.
  const bool stream = g.contains("stream") && g["stream"].is_boolean() && g["stream"].get<bool>();
  if (stream && r.n > 1) throw RequestError("n", "n > 1 cannot be streamed (one text per prompt)");
  if (r.include_usage && !stream)
    throw RequestError("stream_options", "stream_options needs stream: true");
  try {
    r.generate = parse_generate_json(g, model, limits);
  } catch (const RequestError& e) {
    // The message starts with the field's /v1/generate name: say it as the client did.
    std::string message = e.what();
    if (!e.field.empty() && message.rfind(e.field, 0) == 0)
      message = openai_field(e.field) + message.substr(e.field.size());
    throw RequestError(openai_field(e.field), message);
  }
  return r;
}

const char* finish_reason(StopReason r) {
  return r == StopReason::Length || r == StopReason::Cancelled ? "length" : "stop";
}

namespace {

// Choice k of a prompt's result: the result itself, or its k-th draw / hypothesis.
const Hypothesis* choice_of(const CompletionRequest& r, const GenerateResult& g, int64_t k) {
  return r.n > 1 ? &g.n_best.at(size_t(k)) : nullptr;
}

}  // namespace

json completion_json(const std::string& id, int64_t created, const std::string& model_name,
                     const CompletionRequest& r, const std::vector<GenerateResult>& results,
                     const std::vector<std::vector<int32_t>>& inputs) {
  json choices = json::array();
  for (size_t b = 0; b < results.size(); ++b)
    for (int64_t k = 0; k < r.n; ++k) {
      const Hypothesis* h = choice_of(r, results[b], k);
      choices.push_back(
          completion_choice(int64_t(b) * r.n + k, h ? h->text : results[b].text,
                            finish_reason(h ? h->stop_reason : results[b].stop_reason)));
    }
  return {{"id", id},           {"object", "text_completion"},
          {"created", created}, {"model", model_name},
          {"choices", choices}, {"usage", completion_usage(r, results, inputs)}};
}

json completion_usage(const CompletionRequest& r, const std::vector<GenerateResult>& results,
                      const std::vector<std::vector<int32_t>>& inputs) {
  int64_t prompt = 0, completion = 0;
  for (const std::vector<int32_t>& in : inputs) prompt += int64_t(in.size());
  for (const GenerateResult& g : results)
    for (int64_t k = 0; k < r.n; ++k) {
      const Hypothesis* h = choice_of(r, g, k);
      completion += int64_t(h ? h->tokens.size() : g.tokens.size());
    }
  return {{"prompt_tokens", prompt},
          {"completion_tokens", completion},
          {"total_tokens", prompt + completion}};
}

json completion_choice(int64_t index, const std::string& text, const char* finish) {
  return {{"index", index},
          {"text", text},
          {"logprobs", nullptr},
          {"finish_reason", finish ? json(finish) : json(nullptr)}};
}

json completion_chunk(const std::string& id, int64_t created, const std::string& model_name,
                      json choices, const json& usage) {
  json j = {{"id", id},
            {"object", "text_completion"},
            {"created", created},
            {"model", model_name},
            {"choices", std::move(choices)}};
  if (!usage.is_null()) j["usage"] = usage;
  return j;
}

json models_json(const std::string& model_name, int64_t created) {
  return {{"object", "list"},
          {"data", json::array({{{"id", model_name},
                                 {"object", "model"},
                                 {"created", created},
                                 {"owned_by", "seqtape"}}})}};
}

json openai_error(int status, const std::string& field, const std::string& message) {
  const char* type = status == 401   ? "authentication_error"
                     : status == 404 ? "not_found_error"
                     : status < 500  ? "invalid_request_error"
                                     : "server_error";
  return {{"error",
           {{"message", message},
            {"type", type},
            {"param", field.empty() ? json(nullptr) : json(field)},
            {"code", nullptr}}}};
}

}  // namespace seqtape::serve
