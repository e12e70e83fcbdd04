#pragma once
// Reading one HTTP/1.1 request off a connection before cpp-httplib sees it. cpp-httplib times
// out each recv() but not a whole request, answers every framing error with a bare 400, and
// takes whatever Content-Length comes first. Here the head and the body must arrive within one
// deadline, every error names its cause, and httplib is handed a canonical request: CRLF line
// ends, one Content-Length, no Transfer-Encoding (a chunked body is de-chunked here), so that
// what it parses is exactly what was checked.
//
// Dimension key: none.

#include <chrono>
#include <cstddef>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace seqtape::serve {

// A request that cannot be read: the status and the cause to answer with (status 0: the
// connection is gone, nothing to answer).
struct HttpError : std::runtime_error {
  HttpError(int status_, std::string field_, const std::string& message)
      : std::runtime_error(message), status(status_), field(std::move(field_)) {}
  int status;
  std::string field;  // "body" for the body's limit, else empty
};

struct HttpReadLimits {
  size_t max_head_bytes = 16 * 1024;  // the request line and the headers
  size_t max_body_bytes = 1 << 20;
  int read_timeout_ms = 5000;      // between two bytes
  int request_timeout_ms = 10000;  // from a request's first byte to its last
};

// What parse_head() found in a request head.
struct RequestHead {
  std::string request_line;                                  // without its CRLF
  std::vector<std::pair<std::string, std::string>> headers;  // all but the framing ones
  std::optional<size_t> content_length;                      // Content-Length, when given
  bool chunked = false;                                      // Transfer-Encoding: chunked
  bool expect_continue = false;                              // Expect: 100-continue
};

// Where the head at the start of `in` ends: past its empty line (CRLF, or a bare LF that
// parse_head() then refuses); npos when `in` holds no empty line yet.
size_t find_head_end(std::string_view in);

// The head (request line, headers, the empty line; `head` ends with it) checked: CRLF line
// ends, a request line of three parts, header names without spaces, no line folding, one
// Content-Length of digits (repeats must agree), no Content-Length beside Transfer-Encoding,
// no transfer coding but chunked, no content coding. HttpError naming the fault otherwise.
RequestHead parse_head(std::string_view head, const HttpReadLimits& limits);

// The size of the chunked body at the start of `in` (chunks, the last chunk, trailers), its
// data appended to `body`; nullopt when `in` ends before the body does (`body` then holds the
// complete chunks so far, and the next call starts again from the beginning). HttpError for a
// malformed chunk or a body over the limit.
std::optional<size_t> dechunk(std::string_view in, const HttpReadLimits& limits, std::string& body);

// The canonical request httplib is given: the request line, the kept headers, one
// Content-Length when there is a body, then the body.
std::string canonical_request(const RequestHead& head, const std::string& body);

// Reads the requests of one connection (a blocking socket), one at a time; bytes past a request
// (a pipelined next one) are kept for the next.
class RequestReader {
 public:
  // `stopping` (optional): the server stops, a request still arriving is refused with 503.
  RequestReader(int fd, HttpReadLimits limits, std::function<bool()> stopping = {})
      : fd_(fd), limits_(limits), stopping_(std::move(stopping)) {}
  // Waits up to `idle` for the next request's first byte; false when none came or the client
  // closed (then closed() is true).
  bool wait_next(std::chrono::milliseconds idle);
  bool closed() const { return closed_; }
  // The next request in full (canonical_request()), within the request deadline from now.
  // HttpError when it cannot be read.
  std::string read_request();
  // The method and path (the request target without its query) of the request read_request()
  // reads or last read, once its request line has arrived; empty before (or for a target that
  // is not a path): what the access log names for a request refused before it was parsed.
  std::pair<std::string, std::string> method_and_path() const;

 private:
  void fill(std::chrono::steady_clock::time_point deadline, bool in_body);
  int fd_;
  HttpReadLimits limits_;
  std::function<bool()> stopping_;
  std::string buf_;
  std::string request_line_;  // of the request read_request() reads, once its head is parsed
  bool closed_ = false;
};

// "HTTP/1.1 <status> <reason>" with a JSON body {"error", "field"}, Connection: close, and
// Retry-After when `retry_after`, X-Request-Id when `request_id` is given: the answer to a
// request that never reached httplib.
std::string error_response(int status, const std::string& field, const std::string& message,
                           bool retry_after = false, const std::string& request_id = "");

}  // namespace seqtape::serve
