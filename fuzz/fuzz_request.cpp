// libFuzzer target for the HTTP request path of `seqtape serve`: raw request bytes → the head's
// checks and the body's framing (serve/http_reader.h: parse_head, dechunk, canonical_request),
// then the body → the parser of the path it is sent to over the tiny F15 model:
// parse_completion_request (serve/openai.h) for /v1/completions, parse_generate_request
// (serve/request.h) otherwise. An input without an empty line is taken as a body alone and goes
// to both. Expected rejections are HttpError and RequestError (whose OpenAI error body is then
// built, as the server answers it); anything else is a finding, and so is a canonical request
// that does not parse back to the same head and body (what cpp-httplib is handed must be what
// was checked), or an accepted body without inputs (or, for a completion, without choices).
#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>

#include "infer/model.h"
#include "serve/http_reader.h"
#include "serve/openai.h"
#include "serve/request.h"

namespace {

using namespace seqtape;
using namespace seqtape::serve;

const InferenceModel& model() {
  static const InferenceModel m =
      InferenceModel::load(std::string(SEQTAPE_SOURCE_DIR) + "/datasets/f15/checkpoint.bin");
  return m;
}

struct FuzzFailure : std::logic_error {
  using std::logic_error::logic_error;
};

// The path the request line names (its target up to a '?').
std::string_view target_path(std::string_view request_line) {
  const size_t a = request_line.find(' ');
  if (a == std::string_view::npos) return {};
  const std::string_view rest = request_line.substr(a + 1);
  return rest.substr(0, std::min(rest.find(' '), rest.find('?')));
}

// The body of the request `in` (head and framing checked), or HttpError; `path` is set to the
// request line's.
std::string read_body(std::string_view in, size_t end, const HttpReadLimits& limits,
                      std::string& path) {
  const RequestHead head = parse_head(in.substr(0, end), limits);
  path = std::string(target_path(head.request_line));
  const std::string_view rest = in.substr(end);
  std::string body;
  if (head.chunked) {
    if (!dechunk(rest, limits, body)) throw HttpError(400, "", "incomplete chunked body");
  } else if (head.content_length) {
    body = std::string(rest.substr(0, *head.content_length));
  }
  const std::string canonical = canonical_request(head, body);
  const size_t end2 = find_head_end(canonical);
  if (end2 == std::string::npos) throw FuzzFailure("canonical request has no head");
  const RequestHead again = parse_head(std::string_view(canonical).substr(0, end2), limits);
  if (again.request_line != head.request_line || again.headers != head.headers || again.chunked ||
      canonical.substr(end2) != body ||
      (again.content_length && *again.content_length != body.size()))
    throw FuzzFailure("canonical request reads differently: " + canonical);
  return body;
}

void check_inputs(const GenerateRequest& r) {
  if (r.inputs.size() != r.texts.size() || r.inputs.empty())
    throw FuzzFailure("accepted a request without inputs");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  HttpReadLimits http;
  http.max_head_bytes = 4096;
  http.max_body_bytes = 8192;
  Limits limits;
  limits.max_body_bytes = http.max_body_bytes;
  limits.max_input_bytes = 64;
  limits.max_new = 16;
  limits.max_beam = 4;
  std::string body, path;
  try {
    const size_t end = find_head_end(in);
    body = end == std::string::npos ? std::string(in) : read_body(in, end, http, path);
  } catch (const HttpError&) {
    return 0;
  }
  const bool body_alone = path.empty();
  if (body_alone || path != "/v1/completions") {
    try {
      check_inputs(parse_generate_request(body, model(), limits));
    } catch (const RequestError&) {
    }
  }
  if (body_alone || path == "/v1/completions") {
    try {
      const CompletionRequest r = parse_completion_request(body, model(), limits, "f15");
      check_inputs(r.generate);
      if (r.n < 1)
        throw FuzzFailure("accepted a completion of " + std::to_string(r.n) + " choices");
    } catch (const RequestError& e) {
      // As the server writes it: a message quoting the body's bytes may hold invalid UTF-8.
      (void)openai_error(400, e.field, e.what())
          .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    }
  }
  return 0;
}
