// Server: cpp-httplib routes over a Scheduler. Parsing and limits are serve/request.cpp; the
// JSON of a result is infer/result_json.h (the same as `generate --json`).
//
// Dimension key: none.
#include "serve/server.h"

#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstring>
#include <ctime>
#include <deque>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "infer/result_json.h"
#include "infer/strategy.h"
#include "infer/trace.h"
#include "serve/access_log.h"
#include "serve/auth.h"
#include "serve/http_reader.h"
#include "serve/metrics.h"
#include "serve/openai.h"
#include "serve/player_assets.h"
#include "serve/playground.h"
#include "tensor/tensor.h"  // fail

namespace seqtape::serve {

namespace {

using nlohmann::json;
using namespace std::chrono_literals;

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

// What the logger needs of the request this thread answers (set as it is routed).
struct RequestRecord {
  std::chrono::steady_clock::time_point start;
  std::string id;            // X-Request-Id
  std::shared_ptr<Job> job;  // a decoding request's
};
thread_local RequestRecord tl_record;

// Whether the request this thread answers is on an OpenAI endpoint (its errors in its shape).
thread_local bool tl_openai_errors = false;

void send_error(httplib::Response& res, int status, const std::string& field,
                const std::string& message) {
  res.status = status;
  json j = {{"error", message}};
  if (!field.empty()) j["field"] = field;
  if (tl_openai_errors) j = openai_error(status, field, message);
  res.set_content(dump(j) + "\n", "application/json");
}

// 503: the queue is full or the server is stopping. Either passes: a second is a fair wait
// (a queue slot frees when one request ends; a restarted server is back within seconds).
void send_unavailable(httplib::Response& res, const std::string& message) {
  send_error(res, 503, "", message);
  res.set_header("Retry-After", "1");
}

// The methods each endpoint answers (405 with Allow for the others; 404 for other paths).
const char* allowed_methods(const std::string& path) {
  if (path == "/v1/generate" || path == "/v1/completions" || path == "/v1/trace") return "POST";
  if (path == "/healthz" || path == "/readyz" || path == "/v1/model" || path == "/v1/models" ||
      path == "/" || path == "/metrics")
    return "GET, HEAD";
  return nullptr;
}

// /metrics' endpoint label of a path: the path when it is one of the server's, else "other"
// (so that clients cannot grow the label set).
std::string endpoint_label(const std::string& path) {
  return allowed_methods(path) ? path : "other";
}

// The tokens a finished job generated: every draw's when it drew several, else each result's.
int64_t generated_tokens(const Job& job) {
  int64_t n = 0;
  for (const GenerateResult& r : job.results)
    if (job.options.num_samples > 1)
      for (const Hypothesis& h : r.n_best) n += int64_t(h.tokens.size());
    else
      n += int64_t(r.tokens.size());
  return n;
}

// `n` random bytes in hex: request ids.
std::string random_hex(size_t n) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static constexpr char kHex[] = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    const auto b = unsigned(rng() & 0xff);
    s += kHex[b >> 4];
    s += kHex[b & 15];
  }
  return s;
}

// A request's id: the client's X-Request-Id when it is a short token (1 to 64 of A-Z a-z 0-9
// . _ : -, so that it can go in a log line and a header as it is), else a fresh one.
std::string request_id(const httplib::Request& req) {
  const std::string given = req.get_header_value("X-Request-Id");
  bool ok = !given.empty() && given.size() <= 64;
  for (const char c : given)
    ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || std::strchr("._:-", c));
  return ok ? given : random_hex(8);
}

double seconds_between(std::chrono::steady_clock::time_point a,
                       std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// The socket of the connection this thread serves (serve_connection() sets it): the handlers
// watch it for a client that goes away.
thread_local int tl_client_fd = -1;

constexpr size_t kKeepAliveRequests = 100;  // requests on one connection at most

// The address of one end of a socket ("127.0.0.1", "::1"), and its port.
void socket_address(int fd, bool peer, std::string& ip, int& port) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  const int r = peer ? getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len)
                     : getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  char text[INET6_ADDRSTRLEN] = "";
  port = -1;
  if (r == 0 && a.ss_family == AF_INET) {
    const auto& v4 = reinterpret_cast<const sockaddr_in&>(a);
    inet_ntop(AF_INET, &v4.sin_addr, text, sizeof text);
    port = ntohs(v4.sin_port);
  } else if (r == 0 && a.ss_family == AF_INET6) {
    const auto& v6 = reinterpret_cast<const sockaddr_in6&>(a);
    inet_ntop(AF_INET6, &v6.sin6_addr, text, sizeof text);
    port = ntohs(v6.sin6_port);
  }
  ip = text;
}

bool send_all(int fd, const std::string& s) {
  for (size_t off = 0; off < s.size();) {
    const ssize_t n = ::send(fd, s.data() + off, s.size() - off, MSG_NOSIGNAL);
    if (n <= 0) return false;
    off += size_t(n);
  }
  return true;
}

// Closes a connection whose client may still be sending (a refused request): the answer is
// sent, then what still arrives is read and dropped for a moment, so that the client's kernel
// does not reset the connection before the client has read the answer.
void lingering_close(int fd) {
  ::shutdown(fd, SHUT_WR);
  const auto until = std::chrono::steady_clock::now() + 2s;
  char tmp[65536];
  for (size_t dropped = 0; dropped < (64u << 20) && std::chrono::steady_clock::now() < until;) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 200) <= 0) break;
    const ssize_t n = ::recv(fd, tmp, sizeof tmp, 0);
    if (n <= 0) break;
    dropped += size_t(n);
  }
  ::close(fd);
}

// One request, read and checked by RequestReader, as cpp-httplib's stream: it reads the
// canonical request from memory and writes to the socket.
class CanonicalStream final : public httplib::Stream {
 public:
  CanonicalStream(int fd, std::string request, int write_timeout_ms)
      : fd_(fd), in_(std::move(request)), write_timeout_ms_(write_timeout_ms) {}
  bool is_readable() const override { return pos_ < in_.size(); }
  bool is_writable() const override {
    pollfd p{fd_, POLLOUT, 0};
    return poll(&p, 1, write_timeout_ms_) > 0 && (p.revents & (POLLERR | POLLHUP)) == 0;
  }
  ssize_t read(char* ptr, size_t size) override {
    const size_t n = std::min(size, in_.size() - pos_);
    std::memcpy(ptr, in_.data() + pos_, n);
    pos_ += n;
    return ssize_t(n);
  }
  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    return ::send(fd_, ptr, size, MSG_NOSIGNAL);
  }
  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    socket_address(fd_, true, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    socket_address(fd_, false, ip, port);
  }
  socket_t socket() const override { return fd_; }

 private:
  int fd_;
  std::string in_;
  size_t pos_ = 0;
  int write_timeout_ms_;
};

// cpp-httplib's server with its connection loop replaced (serve_connection): the routing,
// handlers and answers stay httplib's.
class HttpServer final : public httplib::Server {
 public:
  std::function<void(int sock)> serve_connection;
  // One request of the connection: httplib parses `strm`, routes and answers.
  bool process(httplib::Stream& strm, bool close_connection, bool& connection_closed) {
    return process_request(strm, close_connection, connection_closed, nullptr);
  }
  bool listening() const { return svr_sock_ != INVALID_SOCKET; }

 private:
  bool process_and_close_socket(socket_t sock) override {
    serve_connection(sock);
    return true;
  }
};

// Whether the client of a request in flight has gone away. The end of its input alone is no
// sign: a client may half-close once its request is sent (shutdown(SHUT_WR), as `nc -N` does)
// and still read the answer. A client that closed in full is told apart by writing to it: its
// kernel answers with a reset (POLLERR | POLLHUP). A streamed answer has written its headers
// already; a JSON one writes an interim "102 Processing" (which HTTP/1.1 clients skip, and
// HTTP/1.0 ones must not get: they are cancelled only by a reset).
class PeerWatch {
 public:
  PeerWatch(int fd, bool may_probe) : fd_(fd), may_probe_(may_probe) {}
  bool gone() {
    if (fd_ < 0) return false;
    pollfd p{fd_, POLLRDHUP, 0};
    if (poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLHUP | POLLERR)) return true;
    if ((p.revents & POLLRDHUP) && may_probe_ && !probed_) {
      probed_ = true;
      static constexpr char kProbe[] = "HTTP/1.1 102 Processing\r\n\r\n";
      if (::send(fd_, kProbe, sizeof kProbe - 1, MSG_NOSIGNAL) < 0) return true;
    }
    return false;
  }

 private:
  int fd_;
  bool may_probe_;
  bool probed_ = false;
};

// One Server-Sent Event.
std::string sse(const std::string& name, const json& data) {
  return "event: " + name + "\ndata: " + dump(data) + "\n\n";
}

// Events of one streamed job, from the decoding thread to the connection's thread.
struct EventQueue {
  std::mutex m;
  std::condition_variable cv;
  std::deque<std::string> events;
  void push(std::string event) {
    if (event.empty()) return;
    {
      std::lock_guard<std::mutex> l(m);
      events.push_back(std::move(event));
    }
    cv.notify_all();
  }
};

// A request's deadline (timeout_ms, or the server's --timeout-ms): passed() turns true once,
// when it is past; 0 ms: none.
// How often a handler waiting for a whole (not streamed) answer looks whether its client is
// still there.
constexpr std::chrono::milliseconds kPeerWatchSlice{100};

struct Deadline {
  explicit Deadline(int64_t ms)
      : ms(ms), at(std::chrono::steady_clock::now() + std::chrono::milliseconds(ms)) {}
  bool passed() {
    if (ms > 0 && !expired && std::chrono::steady_clock::now() >= at) expired = true;
    return expired;
  }
  // How long a handler may wait before it must look again: `most`, or less when the deadline
  // comes first (at least 1 ms).
  std::chrono::milliseconds slice(std::chrono::milliseconds most) const {
    if (ms <= 0) return most;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        at - std::chrono::steady_clock::now());
    return std::clamp(left + 1ms, 1ms, most);
  }
  std::string message() const {
    return "the request's deadline (timeout_ms " + std::to_string(ms) +
           ") passed before its answer was complete";
  }
  int64_t ms;
  std::chrono::steady_clock::time_point at;
  bool expired = false;
};

// How an endpoint words a job: its answer once done, and the events of its stream (each a
// whole SSE event; "" for none). The decoding thread calls piece and input_done.
struct Wording {
  std::function<json()> whole;
  std::function<std::string(const StreamEvent&)> piece;
  std::function<std::string(size_t input)> input_done;
  std::function<std::string(const std::string& error)> tail;  // last; error "" when none
};

}  // namespace

struct Server::Impl {
  const InferenceModel& model;
  ServerOptions opt;
  Metrics metrics{opt.max_batch};  // before the scheduler, whose threads update it
  AccessLog access_log{opt.access_log};
  std::unique_ptr<Scheduler> scheduler;
  HttpServer http;
  std::atomic<bool> stopping{false};
  std::mutex clients_m;
  std::map<std::string, size_t> clients;  // open connections per client address
  std::atomic<int64_t> active{0};         // /v1/generate requests not yet answered in full
  int listen_fd = -1;
  const int64_t started_at = int64_t(std::time(nullptr));  // /v1/models' "created"
  std::mutex trace_m;                                      // POST /v1/trace: one at a time

  // Counts a request as active while alive.
  struct Active {
    explicit Active(std::atomic<int64_t>& c) : c_(c) { ++c_; }
    ~Active() { --c_; }
    std::atomic<int64_t>& c_;
  };

  Impl(const InferenceModel& m, ServerOptions o)
      : model(m),
        opt(std::move(o)),
        scheduler(make_scheduler(opt.scheduler, m, opt.queue, opt.max_batch, opt.before_step)) {
    scheduler->observe_steps([this](int64_t rows) { metrics.step(rows); });
    const size_t threads = std::max<size_t>(opt.http_threads, 2);
    http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    http.serve_connection = [this](int sock) { serve_connection(sock); };
    // What httplib's Keep-Alive header announces; serve_requests() keeps to it.
    http.set_keep_alive_max_count(kKeepAliveRequests);
    http.set_keep_alive_timeout(std::max(1, opt.read_timeout_ms / 1000));
    http.set_payload_max_length(opt.limits.max_body_bytes);
    // The accepted sockets' SO_RCVTIMEO / SO_SNDTIMEO: a send() to a reader that stalls.
    http.set_read_timeout(opt.read_timeout_ms / 1000, (opt.read_timeout_ms % 1000) * 1000);
    http.set_write_timeout(opt.write_timeout_ms / 1000, (opt.write_timeout_ms % 1000) * 1000);
    // Keep the listening socket: bind() deepens its accept backlog (httplib listens with 5,
    // which drops bursts of connections).
    http.set_socket_options([this](int sock) {
      int yes = 1;
      setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
      listen_fd = sock;
    });
    http.set_error_handler(
        [this](const httplib::Request& req, httplib::Response& res) { on_error(req, res); });
    http.set_exception_handler(
        [](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
          std::string what = "internal error";
          try {
            std::rethrow_exception(ep);
          } catch (const std::exception& e) {
            what = std::string("internal error: ") + e.what();
          } catch (...) {
          }
          send_error(res, 500, "", what);
        });
    routes();
  }

  void routes() {
    using Req = const httplib::Request&;
    using Res = httplib::Response&;
    http.Get("/healthz", [this](Req, Res res) { health(res); });
    http.Get("/readyz", [this](Req, Res res) { ready(res); });
    http.Get("/v1/model", [this](Req, Res res) { model_info(res); });
    http.Get("/",
             [](Req, Res res) { res.set_content(playground_html(), "text/html; charset=utf-8"); });
    http.Post("/v1/generate", [this](Req req, Res res) { generate(req, res); });
    http.Post("/v1/completions", [this](Req req, Res res) { completions(req, res); });
    http.Post("/v1/trace", [this](Req req, Res res) { trace(req, res); });
    for (const PlayerAsset& a : player_assets())
      http.Get("/player/" + std::string(a.name),
               [&a](Req, Res res) { res.set_content(a.text, a.content_type); });
    // player.html's built-in example trace stays in web/: the page is given a trace to load.
    http.Get("/player/f15_trace.js", [](Req, Res res) {
      res.set_content("window.SEQTAPE_EMBEDDED_TRACE = null;\n", "text/javascript");
    });
    http.Get("/v1/models", [this](Req, Res res) {
      res.set_content(dump(models_json(served_name(), started_at)) + "\n", "application/json");
    });
    // OpenAI's clients read errors in OpenAI's shape: on its endpoints every error (the
    // handlers', httplib's, a refusal) is written so (send_error()).
    http.set_pre_routing_handler([this](Req req, Res res) { return before_routing(req, res); });
    http.Get("/metrics", [this](Req, Res res) {
      res.set_content(metrics.text(scheduler->stats(), scheduler->name()), kMetricsContentType);
    });
    // httplib calls it once the answer is sent (a stream's last byte included).
    http.set_logger([this](Req req, const httplib::Response& res) { answered(req, res); });
  }

  // Every request, before its handler: its id and record; CORS; the API key. Handled: answered
  // here (a preflight, or a 401).
  httplib::Server::HandlerResponse before_routing(const httplib::Request& req,
                                                  httplib::Response& res) {
    using R = httplib::Server::HandlerResponse;
    tl_openai_errors = req.path == "/v1/completions" || req.path == "/v1/models";
    tl_record = {std::chrono::steady_clock::now(), request_id(req), nullptr};
    res.set_header("X-Request-Id", tl_record.id);
    if (!opt.cors_origin.empty()) {
      res.set_header("Access-Control-Allow-Origin", opt.cors_origin);
      res.set_header("Vary", "Origin");
      res.set_header("Access-Control-Expose-Headers", "X-Request-Id");
      if (req.method == "OPTIONS") {  // a preflight: browsers send it without credentials
        res.status = 204;
        res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type, X-Request-Id");
        res.set_header("Access-Control-Max-Age", "600");
        return R::Handled;
      }
    }
    if (opt.api_keys.empty() || req.path == "/healthz") return R::Unhandled;
    if (key_matches(opt.api_keys, bearer_token(req.get_header_value("Authorization"))))
      return R::Unhandled;
    send_error(res, 401, "",
               req.has_header("Authorization")
                   ? "the API key is not one of the server's (Authorization: Bearer <key>)"
                   : "an API key is required: send Authorization: Bearer <key>");
    res.set_header("WWW-Authenticate", "Bearer");
    return R::Handled;
  }

  // A request is answered: its counts and times go to /metrics, its line to the access log.
  void answered(const httplib::Request& req, const httplib::Response& res) {
    const auto now = std::chrono::steady_clock::now();
    metrics.request(endpoint_label(req.path), res.status);
    json line = {{"time", utc_now_iso8601()}, {"id", tl_record.id},   {"client", req.remote_addr},
                 {"method", req.method},      {"endpoint", req.path}, {"status", res.status}};
    const std::shared_ptr<Job> job = std::move(tl_record.job);
    if (job && job->done() && job->started != std::chrono::steady_clock::time_point{}) {
      const bool first = job->first_token != std::chrono::steady_clock::time_point{};
      const double queue = seconds_between(job->submitted, job->started),
                   first_token = first ? seconds_between(tl_record.start, job->first_token) : -1,
                   total = seconds_between(tl_record.start, now);
      const int64_t tokens = generated_tokens(*job);
      metrics.job(queue, first_token, total, tokens);
      int64_t input_tokens = 0;
      for (const std::vector<int32_t>& in : job->inputs) input_tokens += int64_t(in.size());
      line.update({{"input_tokens", input_tokens},
                   {"output_tokens", tokens},
                   {"queue_ms", queue * 1000},
                   {"first_token_ms", first ? json(first_token * 1000) : json(nullptr)}});
    }
    line["total_ms"] = seconds_between(tl_record.start, now) * 1000;
    access_log.write(line);
  }

  // A request refused before httplib parsed it (a framing error, 408, 431, or the per-address
  // 503 before any byte is read): counted and logged as answered() does the others, naming the
  // method and path when its request line had arrived ("-" otherwise).
  void refused(const std::string& client, const std::string& id, int status,
               const std::pair<std::string, std::string>& method_path,
               std::chrono::steady_clock::time_point start) {
    const auto& [method, path] = method_path;
    metrics.request(endpoint_label(path), status);
    access_log.write(
        {{"time", utc_now_iso8601()},
         {"id", id},
         {"client", client},
         {"method", method.empty() ? "-" : method},
         {"endpoint", path.empty() ? "-" : path},
         {"status", status},
         {"total_ms", seconds_between(start, std::chrono::steady_clock::now()) * 1000}});
  }

  void health(httplib::Response& res) {
    const SchedulerStats s = scheduler->stats();
    res.set_content(dump({{"status", stopping ? "stopping" : "ok"},
                          {"scheduler", scheduler->name()},
                          {"queued", s.queued},
                          {"running", s.running},
                          {"completed", s.completed},
                          {"cancelled", s.cancelled},
                          {"rejected", s.rejected},
                          {"steps", s.steps}}) +
                        "\n",
                    "application/json");
  }

  // Ready: the model is loaded (it is before the server exists), the server is not stopping and
  // its queue has room; else 503 with Retry-After, so that a balancer sends the work elsewhere.
  void ready(httplib::Response& res) {
    const SchedulerStats s = scheduler->stats();
    const bool full = size_t(s.queued + s.running) >= opt.queue;
    json j = {{"status", stopping ? "stopping"
                         : full   ? "full"
                                  : "ready"},
              {"queued", s.queued},
              {"running", s.running},
              {"queue", opt.queue}};
    if (!stopping && !full) return res.set_content(dump(j) + "\n", "application/json");
    send_unavailable(res, stopping
                              ? "the server is shutting down"
                              : "the queue is full (" + std::to_string(opt.queue) + " requests)");
  }

  void model_info(httplib::Response& res) {
    const Limits& l = opt.limits;
    res.set_content(dump({{"model", opt.model_name},
                          {"config", model.config().to_json()},
                          {"vocab_size", model.vocab().size()},
                          {"parameters", model.parameter_count()},
                          {"compute_type", to_string(model.compute_type())},
                          {"scheduler", scheduler->name()},
                          {"queue", opt.queue},
                          {"max_batch", opt.max_batch},
                          {"http_threads", opt.http_threads},
                          {"fields", request_fields()},
                          {"options", request_options()},
                          {"limits",
                           {{"body_bytes", l.max_body_bytes},
                            {"input_bytes", l.max_input_bytes},
                            {"inputs", l.max_inputs},
                            {"max_new", l.max_new},
                            {"beam", l.max_beam}}}}) +
                        "\n",
                    "application/json");
  }

  // httplib's own errors (a handler's carry their body already), each with its cause.
  void on_error(const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 404 && allowed_methods(req.path)) {
      send_error(res, 405, "",
                 req.method + " is not allowed on " + req.path +
                     " (allowed: " + allowed_methods(req.path) + ")");
      res.set_header("Allow", allowed_methods(req.path));
    } else if (res.status == 404) {
      send_error(res, 404, "",
                 "no such endpoint (POST /v1/generate, POST /v1/completions, GET /v1/models, "
                 "GET /healthz, GET /readyz, GET /metrics, GET /v1/model, GET /)");
    } else if (res.status == 414) {
      send_error(res, 414, "",
                 "the request line is longer than " +
                     std::to_string(CPPHTTPLIB_REQUEST_URI_MAX_LENGTH) + " bytes");
    } else {
      send_error(res, res.status, "", "HTTP error " + std::to_string(res.status));
    }
  }

  // A connection, from its accept to its close: at most max_client_connections open per client
  // address (more: 503 at once), then its requests one at a time, each read in full within the
  // request deadline (RequestReader) before httplib routes it. The connection's place goes back
  // before the close that ends its last answer, so that the client's next connection, opened
  // when it sees that close, is not counted with this one.
  void serve_connection(int sock) {
    std::string ip;
    int port = 0;
    socket_address(sock, true, ip, port);
    size_t open = 0;
    {
      std::lock_guard<std::mutex> l(clients_m);
      open = ++clients[ip];
    }
    const HttpReadLimits limits{opt.max_head_bytes, opt.limits.max_body_bytes, opt.read_timeout_ms,
                                opt.request_timeout_ms};
    bool refusal = true;
    if (open > opt.max_client_connections) {
      const auto start = std::chrono::steady_clock::now();
      const std::string id = random_hex(8);
      send_all(sock, error_response(503, "",
                                    "too many connections from " + ip + " (" +
                                        std::to_string(opt.max_client_connections) +
                                        " at most per client); try again later",
                                    true, id));
      refused(ip, id, 503, {}, start);
    } else {
      refusal = serve_requests(sock, ip, limits);
    }
    {
      std::lock_guard<std::mutex> l(clients_m);
      if (--clients[ip] == 0) clients.erase(ip);
    }
    if (refusal) {
      lingering_close(sock);
    } else {
      ::shutdown(sock, SHUT_RDWR);
      ::close(sock);
    }
  }

  // Serves the connection's requests; true when it ends with a request refused before it was
  // parsed, whose client may still be sending (the caller then closes it lingering).
  bool serve_requests(int sock, const std::string& ip, const HttpReadLimits& limits) {
    tl_client_fd = sock;
    RequestReader reader(sock, limits, [this] { return stopping.load(); });
    bool refusal = false;
    for (size_t count = kKeepAliveRequests; count > 0; --count) {
      // Waits for the next request in slices, so that stop() is not held up by idle clients.
      bool next = false;
      for (int waited = 0;
           !next && !reader.closed() && waited < opt.read_timeout_ms && http.listening();
           waited += 100)
        next = reader.wait_next(std::chrono::milliseconds(std::min(100, opt.read_timeout_ms)));
      if (!next) break;
      std::string request;
      const auto start = std::chrono::steady_clock::now();
      try {
        request = reader.read_request();
      } catch (const HttpError& e) {
        if (e.status != 0) {
          const std::string id = random_hex(8);
          send_all(sock, error_response(e.status, e.field, e.what(), e.status == 503, id));
          refused(ip, id, e.status, reader.method_and_path(), start);
        }
        refusal = true;
        break;
      }
      CanonicalStream strm(sock, std::move(request), opt.write_timeout_ms);
      bool closed = false;
      if (!http.process(strm, count == 1 || !http.listening(), closed) || closed) break;
    }
    tl_client_fd = -1;
    return refusal;
  }

  // The scheduler refused a job.
  void refuse(httplib::Response& res) {
    send_unavailable(res, stopping ? "the server is shutting down"
                                   : "the queue is full (" + std::to_string(opt.queue) +
                                         " requests); try again later");
  }

  void generate(const httplib::Request& req, httplib::Response& res) {
    auto active_guard = std::make_shared<Active>(active);
    if (stopping) return send_unavailable(res, "the server is shutting down");
    GenerateRequest r;
    try {
      r = parse_generate_request(req.body, model, opt.limits);
    } catch (const RequestError& e) {
      return send_error(res, 400, e.field, e.what());
    }
    auto job = make_job(r);
    answer_job(req, res, job, r, native_wording(job.get(), r.list), active_guard);
  }

  std::shared_ptr<Job> make_job(GenerateRequest& r) {
    auto job = std::make_shared<Job>();
    job->texts = r.texts;
    job->inputs = std::move(r.inputs);
    job->options = r.options;
    return job;
  }

  // What /v1/generate answers: generate --json's objects; streamed, piece / done / end events.
  std::shared_ptr<Wording> native_wording(const Job* job, bool list) {
    auto w = std::make_shared<Wording>();
    const Vocab& vocab = model.vocab();
    const auto result = [job, &vocab](size_t b) {
      return result_json(job->texts[b], unk_count(vocab, job->inputs[b]), job->results[b],
                         job->options, job->seconds[b]);
    };
    w->whole = [job, list, result] {
      json out = json::array();
      for (size_t b = 0; b < job->results.size(); ++b) out.push_back(result(b));
      return list ? out : out.at(0);
    };
    w->piece = [](const StreamEvent& e) {
      return e.text.empty() ? std::string() : sse("piece", {{"index", e.input}, {"text", e.text}});
    };
    w->input_done = [result](size_t b) {
      json done = result(b);
      done["index"] = b;
      return sse("done", done);
    };
    w->tail = [](const std::string& error) {
      std::string tail;
      if (!error.empty()) tail = sse("error", {{"error", error}});
      return tail + sse("end", json::object());
    };
    return w;
  }

  void completions(const httplib::Request& req, httplib::Response& res) {
    auto active_guard = std::make_shared<Active>(active);
    if (stopping) return send_unavailable(res, "the server is shutting down");
    auto r = std::make_shared<CompletionRequest>();
    try {
      *r = parse_completion_request(req.body, model, opt.limits, served_name());
    } catch (const RequestError& e) {
      return send_error(res, 400, e.field, e.what());
    }
    auto job = make_job(r->generate);
    answer_job(req, res, job, r->generate, openai_wording(job.get(), r), active_guard);
  }

  // What /v1/completions answers: a completion object; streamed, data-only chunks and [DONE].
  std::shared_ptr<Wording> openai_wording(const Job* job, std::shared_ptr<CompletionRequest> r) {
    auto w = std::make_shared<Wording>();
    const std::string id = "cmpl-" + tl_record.id, name = served_name();
    const int64_t created = int64_t(std::time(nullptr));
    const auto data = [](const json& j) { return "data: " + dump(j) + "\n\n"; };
    w->whole = [=] { return completion_json(id, created, name, *r, job->results, job->inputs); };
    w->piece = [=](const StreamEvent& e) {
      if (e.text.empty()) return std::string();
      const json choice = completion_choice(e.input, std::string(e.text), nullptr);
      return data(completion_chunk(id, created, name, json::array({choice})));
    };
    w->input_done = [=](size_t b) {
      const json choice =
          completion_choice(int64_t(b), "", finish_reason(job->results[b].stop_reason));
      return data(completion_chunk(id, created, name, json::array({choice})));
    };
    w->tail = [=](const std::string& error) {
      if (!error.empty()) return data(openai_error(500, "", error));
      std::string tail;
      if (r->include_usage)
        tail = data(completion_chunk(id, created, name, json::array(),
                                     completion_usage(*r, job->results, job->inputs)));
      return tail + "data: [DONE]\n\n";
    };
    return w;
  }

  // POST /v1/trace: one input of a /v1/generate body decoded and recorded as a seqtape-trace
  // (web/TRACE_FORMAT.md) for the player at /player/player.html. Traces are debugging aids that
  // record every call's logits and attention: they run one at a time, on the connection's
  // thread beside the scheduler, within the same limits as any request.
  void trace(const httplib::Request& req, httplib::Response& res) {
    GenerateRequest r;
    try {
      r = parse_generate_request(req.body, model, opt.limits);
      if (r.list || r.stream)
        throw RequestError(r.list ? "inputs" : "stream",
                           "a trace records one input, not streamed: give \"input\" alone");
      if (r.options.num_samples > 1)
        throw RequestError("num_samples", "a trace records one draw: num_samples must be 1");
    } catch (const RequestError& e) {
      return send_error(res, 400, e.field, e.what());
    }
    TraceOptions topt;
    topt.input_text = r.texts[0];
    topt.source = "seqtape serve";
    topt.verify_cache = r.options.verify_cache;
    std::lock_guard<std::mutex> one_at_a_time(trace_m);
    TracedRun run = generate_traced(model, r.inputs[0], r.options, *make_strategy(r.options), topt);
    res.set_content(dump(run.trace) + "\n", "application/json");
  }

  // The name /v1/models lists and a completion request must give.
  std::string served_name() const { return opt.model_name.empty() ? "seqtape" : opt.model_name; }

  // Submits the job and answers it: once done, `w->whole()` as JSON; streamed, `w`'s events
  // as they come. A client that goes away, or the request's deadline, cancels the job (504, or
  // an error event when streamed).
  void answer_job(const httplib::Request& req, httplib::Response& res, std::shared_ptr<Job> job,
                  const GenerateRequest& r, std::shared_ptr<Wording> w,
                  std::shared_ptr<Active> active_guard) {
    const int fd = tl_client_fd;
    tl_record.job = job;
    Job* raw = job.get();  // the hooks live in the job: no cycle through a shared_ptr
    const auto first_token = [raw](const StreamEvent& e) {
      if (e.token >= 0 && raw->first_token == std::chrono::steady_clock::time_point{})
        raw->first_token = std::chrono::steady_clock::now();
    };
    auto deadline = std::make_shared<Deadline>(r.timeout_ms > 0 ? r.timeout_ms : opt.timeout_ms);
    if (!r.stream) {
      // Draws cannot be streamed: their first token goes unmeasured.
      if (job->options.num_samples == 1) job->on_stream = first_token;
      if (!scheduler->submit(job)) return refuse(res);
      PeerWatch peer(fd, req.version == "HTTP/1.1");
      // The job's end wakes the handler at once; the slices only bound how late a client that
      // went away is noticed. Every waiting handler wakes once a slice: at 20 ms, 64 waiting
      // clients cost thousands of wake-ups and polls a second, CPU the decoding thread needs.
      while (!job->wait_done(deadline->slice(kPeerWatchSlice)))
        if (peer.gone() || deadline->passed()) job->cancel = true;
      if (deadline->expired) return send_error(res, 504, "timeout_ms", deadline->message());
      if (!job->error.empty()) return send_error(res, 500, "", "decoding failed: " + job->error);
      res.set_content(dump(w->whole()) + "\n", "application/json");
      return;
    }
    auto events = std::make_shared<EventQueue>();
    // `w` holds the job only by a raw pointer too.
    job->on_stream = [events, w, first_token](const StreamEvent& e) {
      first_token(e);
      events->push(w->piece(e));
    };
    job->on_input_done = [events, w](size_t b) { events->push(w->input_done(b)); };
    if (!scheduler->submit(job)) return refuse(res);
    res.set_header("Cache-Control", "no-cache");
    auto peer = std::make_shared<PeerWatch>(fd, false);
    res.set_chunked_content_provider(
        "text/event-stream",
        [job, events, peer, w, deadline, active_guard](size_t, httplib::DataSink& sink) {
          const bool finished = job->done();
          std::deque<std::string> out;
          {
            std::unique_lock<std::mutex> l(events->m);
            if (!finished && events->events.empty()) events->cv.wait_for(l, 20ms);
            out.swap(events->events);
          }
          for (const std::string& e : out)
            if (!sink.write(e.data(), e.size())) {
              job->cancel = true;
              return false;
            }
          if (peer->gone()) {
            job->cancel = true;
            return false;
          }
          if (deadline->passed()) job->cancel = true;
          if (finished) {
            const std::string tail =
                w->tail(deadline->expired    ? deadline->message()
                        : job->error.empty() ? ""
                                             : "decoding failed: " + job->error);
            if (!sink.write(tail.data(), tail.size())) return false;
            sink.done();
          }
          return true;
        });
  }
};

Server::Server(const InferenceModel& model, ServerOptions options)
    : impl_(std::make_unique<Impl>(model, std::move(options))) {}

Server::~Server() {
  if (!impl_->stopping) stop(0ms);
}

int Server::bind() {
  ServerOptions& o = impl_->opt;
  if (o.port == 0) {
    const int port = impl_->http.bind_to_any_port(o.host);
    if (port <= 0) fail("serve", "cannot bind " + o.host + " to a free port");
    o.port = port;
  } else if (!impl_->http.bind_to_port(o.host, o.port)) {
    fail("serve", "cannot bind " + o.host + ":" + std::to_string(o.port) +
                      " (in use, or not an address of this machine)");
  }
  // Linux takes a second listen() on a listening socket as a new backlog.
  if (impl_->listen_fd >= 0) ::listen(impl_->listen_fd, 1024);
  return o.port;
}

void Server::run() {
  impl_->http.listen_after_bind();
}

void Server::stop(std::chrono::milliseconds drain) {
  Impl& s = *impl_;
  s.stopping = true;
  const auto deadline = std::chrono::steady_clock::now() + drain;
  s.scheduler->shutdown(deadline);
  // Let the answers of finished jobs reach their clients (bounded by the write timeout).
  const auto flush_until = std::max(deadline, std::chrono::steady_clock::now()) +
                           std::chrono::milliseconds(s.opt.write_timeout_ms);
  while (s.active > 0 && std::chrono::steady_clock::now() < flush_until)
    std::this_thread::sleep_for(10ms);
  s.http.stop();
}

SchedulerStats Server::stats() const {
  return impl_->scheduler->stats();
}

size_t Server::open_connections(const std::string& ip) const {
  std::lock_guard<std::mutex> l(impl_->clients_m);
  const auto it = impl_->clients.find(ip);
  return it == impl_->clients.end() ? 0 : it->second;
}

}  // namespace seqtape::serve
