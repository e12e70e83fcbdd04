// libFuzzer target for the HTTP request path of `seqtape serve`: raw request bytes → the head's
// checks and the body's framing (serve/http_reader.h: parse_head, dechunk, canonical_request),
// then the body → parse_generate_request (serve/request.h) over the tiny F15 model. An input
// without an empty line is taken as a body alone. Expected rejections are HttpError and
// RequestError; anything else is a finding, and so is a canonical request that does not parse
// back to the same head and body (what cpp-httplib is handed must be what was checked).
#include <cstdint>
#include <string>
#include <string_view>

#include "infer/model.h"
#include "serve/http_reader.h"
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

// The body of the request `in` (head and framing checked), or HttpError.
std::string read_body(std::string_view in, size_t end, const HttpReadLimits& limits) {
  const RequestHead head = parse_head(in.substr(0, end), limits);
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
  try {
    const size_t end = find_head_end(in);
    const std::string body = end == std::string::npos ? std::string(in) : read_body(in, end, http);
    const GenerateRequest r = parse_generate_request(body, model(), limits);
    if (r.inputs.size() != r.texts.size() || r.inputs.empty())
      throw FuzzFailure("accepted a request without inputs");
  } catch (const HttpError&) {
  } catch (const RequestError&) {
  }
  return 0;
}
