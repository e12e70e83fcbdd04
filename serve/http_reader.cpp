// RequestReader and the pure checks under it (parse_head, dechunk): one HTTP/1.1 request read
// within a deadline, each fault answered with its cause.
//
// Dimension key: none.
#include "serve/http_reader.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <nlohmann/json.hpp>

namespace seqtape::serve {

namespace {

bool is_token_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) ||
         std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

bool is_token(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), is_token_char);
}

bool all_digits(std::string_view s, bool hex) {
  return std::all_of(s.begin(), s.end(), [hex](char c) {
    return hex ? std::isxdigit(static_cast<unsigned char>(c)) != 0
               : std::isdigit(static_cast<unsigned char>(c)) != 0;
  });
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// A piece of the request for a message: at most 60 bytes, control bytes as '?'.
std::string shown(std::string_view s) {
  std::string out(s.substr(0, 60));
  for (char& c : out)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  return "'" + out + (s.size() > 60 ? "...'" : "'");
}

std::string body_limit_message(const HttpReadLimits& limits) {
  return "body is more than the limit of " + std::to_string(limits.max_body_bytes) + " bytes";
}

// The lines of the head up to the empty one, each checked for its CRLF and stray CR / NUL.
std::vector<std::string_view> head_lines(std::string_view head) {
  std::vector<std::string_view> lines;
  size_t pos = 0;
  for (size_t n = 1;; ++n) {
    const size_t nl = head.find('\n', pos);
    if (nl == std::string_view::npos)
      throw HttpError(400, "", "the request head does not end in an empty line");
    if (nl == pos || head[nl - 1] != '\r')
      throw HttpError(400, "",
                      "line " + std::to_string(n) +
                          " of the request head ends in a bare LF: HTTP/1.1 lines "
                          "end in CRLF");
    const std::string_view line = head.substr(pos, nl - 1 - pos);
    pos = nl + 1;
    if (line.empty()) return lines;
    if (line.find_first_of(std::string_view("\r\0", 2)) != std::string_view::npos)
      throw HttpError(
          400, "",
          "line " + std::to_string(n) + " of the request head holds a bare CR or a NUL byte");
    lines.push_back(line);
  }
}

void check_request_line(std::string_view line) {
  const size_t a = line.find(' '), b = line.rfind(' ');
  if (a == std::string_view::npos || a == b || !is_token(line.substr(0, a)) ||
      line.substr(a + 1, b - a - 1).find(' ') != std::string_view::npos || b == a + 1)
    throw HttpError(400, "",
                    "the request line " + shown(line) +
                        " is not METHOD TARGET HTTP/1.1 (single spaces between)");
  const std::string_view version = line.substr(b + 1);
  if (version != "HTTP/1.1" && version != "HTTP/1.0")
    throw HttpError(505, "",
                    "HTTP version " + shown(version) + " is not supported (HTTP/1.1 or HTTP/1.0)");
}

// Content-Length's value: digits, or a list of equal ones ("5, 5").
size_t content_length(std::string_view value, const HttpReadLimits& limits) {
  std::optional<size_t> length;
  size_t pos = 0;
  for (;;) {
    const size_t comma = value.find(',', pos);
    const std::string_view item = trim(value.substr(pos, comma - pos));
    if (item.empty() || !all_digits(item, false))
      throw HttpError(400, "", "Content-Length " + shown(value) + " is not a length (digits only)");
    // More digits than a size_t holds is a body over any limit.
    if (item.size() > 15) throw HttpError(400, "body", body_limit_message(limits));
    const size_t n = std::stoull(std::string(item));
    if (length && *length != n)
      throw HttpError(400, "",
                      "Content-Length " + shown(value) +
                          " lists different lengths: the body's length is ambiguous");
    length = n;
    if (comma == std::string_view::npos) return n;
    pos = comma + 1;
  }
}

// One header line: a framing header sets `h`, any other is kept.
void read_header(std::string_view line, size_t n, const HttpReadLimits& limits, RequestHead& h) {
  const std::string where = "line " + std::to_string(n) + " of the request head";
  if (line.front() == ' ' || line.front() == '\t')
    throw HttpError(400, "", where + " folds a header onto the next line (obsolete in HTTP/1.1)");
  const size_t colon = line.find(':');
  const std::string_view name = line.substr(0, colon);
  if (colon == std::string_view::npos || !is_token(name))
    throw HttpError(400, "",
                    where + " " + shown(line) +
                        " is not NAME: VALUE (a name of token characters, no space "
                        "before the colon)");
  const std::string_view value = trim(line.substr(colon + 1));
  const std::string key = lower(name);
  if (key == "content-length") {
    const size_t length = content_length(value, limits);
    if (h.content_length && *h.content_length != length)
      throw HttpError(400, "",
                      "two different Content-Length headers (" + std::to_string(*h.content_length) +
                          " and " + std::to_string(length) + "): the body's length is ambiguous");
    h.content_length = length;
  } else if (key == "transfer-encoding") {
    if (lower(value) != "chunked" || h.chunked)
      throw HttpError(501, "",
                      "Transfer-Encoding " + shown(value) + " is not supported (only one chunked)");
    h.chunked = true;
  } else if (key == "content-encoding") {
    if (lower(value) != "identity")
      throw HttpError(
          415, "",
          "Content-Encoding " + shown(value) + " is not accepted: send the body uncompressed");
  } else if (key == "expect") {
    if (lower(value) != "100-continue")
      throw HttpError(417, "", "Expect " + shown(value) + " is not supported (100-continue only)");
    h.expect_continue = true;
  } else {
    h.headers.emplace_back(std::string(name), std::string(value));
  }
}

}  // namespace

size_t find_head_end(std::string_view in) {
  for (size_t nl = in.find('\n'); nl != std::string_view::npos; nl = in.find('\n', nl + 1)) {
    if (nl + 1 < in.size() && in[nl + 1] == '\n') return nl + 2;
    if (nl + 2 < in.size() && in[nl + 1] == '\r' && in[nl + 2] == '\n') return nl + 3;
  }
  return std::string_view::npos;
}

RequestHead parse_head(std::string_view head, const HttpReadLimits& limits) {
  const std::vector<std::string_view> lines = head_lines(head);
  if (lines.empty()) throw HttpError(400, "", "the request line is empty");
  RequestHead h;
  check_request_line(lines[0]);
  h.request_line = std::string(lines[0]);
  for (size_t i = 1; i < lines.size(); ++i) read_header(lines[i], i + 1, limits, h);
  if (h.chunked && h.content_length)
    throw HttpError(400, "",
                    "both Transfer-Encoding and Content-Length: the body's length is "
                    "ambiguous");
  if (h.content_length.value_or(0) > limits.max_body_bytes)
    throw HttpError(400, "body", body_limit_message(limits));
  return h;
}

std::optional<size_t> dechunk(std::string_view in, const HttpReadLimits& limits,
                              std::string& body) {
  body.clear();
  size_t pos = 0;
  for (size_t n = 1;; ++n) {
    const std::string what = "chunk " + std::to_string(n) + " of the body";
    const size_t nl = in.find('\n', pos);
    if (nl == std::string_view::npos) {
      if (in.size() - pos > 1024) throw HttpError(400, "", what + " has no size line");
      return std::nullopt;
    }
    if (nl == pos || in[nl - 1] != '\r')
      throw HttpError(400, "", what + "'s size line ends in a bare LF, not CRLF");
    const std::string_view line = in.substr(pos, nl - 1 - pos);
    const std::string_view hex = trim(line.substr(0, line.find(';')));
    if (hex.empty() || hex.size() > 8 || !all_digits(hex, true))
      throw HttpError(
          400, "",
          what + ": size " + shown(hex) + " is not a hexadecimal number (of at most 8 digits)");
    const size_t size = std::stoul(std::string(hex), nullptr, 16);
    if (body.size() + size > limits.max_body_bytes)
      throw HttpError(400, "body", body_limit_message(limits));
    pos = nl + 1;
    if (size == 0) {  // the last chunk: trailers (ignored) up to an empty line
      for (;;) {
        const size_t end = in.find("\r\n", pos);
        if (end == std::string_view::npos) return std::nullopt;
        if (end == pos) return end + 2;
        pos = end + 2;
      }
    }
    if (in.size() < pos + size + 2) return std::nullopt;
    if (in.substr(pos + size, 2) != "\r\n")
      throw HttpError(400, "",
                      what + " does not end in CRLF after its " + std::to_string(size) +
                          " bytes (a wrong size?)");
    body.append(in.substr(pos, size));
    pos += size + 2;
  }
}

std::string canonical_request(const RequestHead& head, const std::string& body) {
  std::string out = head.request_line + "\r\n";
  for (const auto& [name, value] : head.headers) out += name + ": " + value + "\r\n";
  if (head.chunked || head.content_length)
    out += "Content-Length: " + std::to_string(body.size()) + "\r\n";
  out += "\r\n";
  out += body;
  return out;
}

bool RequestReader::wait_next(std::chrono::milliseconds idle) {
  if (!buf_.empty()) return true;
  pollfd p{fd_, POLLIN, 0};
  if (poll(&p, 1, int(idle.count())) <= 0) return false;
  char tmp[16384];
  const ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
  if (n < 0 && (errno == EINTR || errno == EAGAIN)) return false;
  if (n <= 0) {
    closed_ = true;
    return false;
  }
  buf_.append(tmp, size_t(n));
  return true;
}

// Reads what has arrived, waiting in slices so that a stopping server is not held up.
void RequestReader::fill(std::chrono::steady_clock::time_point deadline, bool in_body) {
  using std::chrono::milliseconds;
  const auto idle_until = std::chrono::steady_clock::now() + milliseconds(limits_.read_timeout_ms);
  for (;;) {
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline)
      throw HttpError(408, "",
                      "the request was not read in full within " +
                          std::to_string(limits_.request_timeout_ms) +
                          " ms (--request-timeout-ms: head and body must arrive in that time)");
    if (now >= idle_until)
      throw HttpError(408, "",
                      "no byte of the request came for " + std::to_string(limits_.read_timeout_ms) +
                          " ms (--read-timeout-ms)");
    if (stopping_ && stopping_()) throw HttpError(503, "", "the server is shutting down");
    const auto left =
        std::chrono::duration_cast<milliseconds>(std::min(deadline, idle_until) - now);
    pollfd p{fd_, POLLIN, 0};
    const int r = poll(&p, 1, int(std::min<int64_t>(100, left.count() + 1)));
    if (r < 0 && errno != EINTR) throw HttpError(0, "", "the connection broke");
    if (r <= 0) continue;
    char tmp[65536];
    const ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n < 0) throw HttpError(0, "", "the connection broke");
    if (n == 0)
      throw HttpError(400, "",
                      std::string("the connection was closed before the request's ") +
                          (in_body ? "body" : "head") + " was complete");
    buf_.append(tmp, size_t(n));
    return;
  }
}

std::string RequestReader::read_request() {
  request_line_.clear();
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(limits_.request_timeout_ms);
  size_t end;
  while ((end = find_head_end(buf_)) == std::string::npos && buf_.size() <= limits_.max_head_bytes)
    fill(deadline, false);
  if (end == std::string::npos || end > limits_.max_head_bytes)
    throw HttpError(431, "",
                    "the request head is more than " + std::to_string(limits_.max_head_bytes) +
                        " bytes (the request line and the headers)");
  const RequestHead head = parse_head(std::string_view(buf_).substr(0, end), limits_);
  request_line_ = head.request_line;
  buf_.erase(0, end);
  if (head.expect_continue && buf_.empty() && (head.chunked || head.content_length.value_or(0)))
    ::send(fd_, "HTTP/1.1 100 Continue\r\n\r\n", 25, MSG_NOSIGNAL);
  std::string body;
  if (head.chunked) {
    // The framing of tiny chunks may take several times the body's bytes; no more than that.
    const size_t most = 8 * limits_.max_body_bytes + 4096;
    std::optional<size_t> used;
    while (!(used = dechunk(buf_, limits_, body))) {
      if (buf_.size() > most) throw HttpError(400, "body", body_limit_message(limits_));
      fill(deadline, true);
    }
    buf_.erase(0, *used);
  } else if (head.content_length) {
    while (buf_.size() < *head.content_length) fill(deadline, true);
    body = buf_.substr(0, *head.content_length);
    buf_.erase(0, *head.content_length);
  }
  return canonical_request(head, body);
}

std::pair<std::string, std::string> RequestReader::method_and_path() const {
  std::string_view line = request_line_;
  if (line.empty()) {  // still in the head: its first line, when it has arrived whole
    const size_t eol = buf_.find('\n');
    if (eol == std::string::npos) return {};
    line = std::string_view(buf_).substr(0, eol);
  }
  const size_t a = line.find(' ');
  const size_t b = a == std::string_view::npos ? a : line.find(' ', a + 1);
  if (b == std::string_view::npos || line[a + 1] != '/') return {};
  const std::string_view target = line.substr(a + 1, b - a - 1);
  return {std::string(line.substr(0, a)), std::string(target.substr(0, target.find('?')))};
}

std::string error_response(int status, const std::string& field, const std::string& message,
                           bool retry_after, const std::string& request_id) {
  nlohmann::json j = {{"error", message}};
  if (!field.empty()) j["field"] = field;
  const std::string body = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  const char* reason = status == 408   ? "Request Timeout"
                       : status == 415 ? "Unsupported Media Type"
                       : status == 417 ? "Expectation Failed"
                       : status == 431 ? "Request Header Fields Too Large"
                       : status == 501 ? "Not Implemented"
                       : status == 503 ? "Service Unavailable"
                       : status == 505 ? "HTTP Version Not Supported"
                                       : "Bad Request";
  return "HTTP/1.1 " + std::to_string(status) + " " + reason +
         "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\nConnection: close\r\n" + (retry_after ? "Retry-After: 1\r\n" : "") +
         (request_id.empty() ? "" : "X-Request-Id: " + request_id + "\r\n") + "\r\n" + body;
}

}  // namespace seqtape::serve
