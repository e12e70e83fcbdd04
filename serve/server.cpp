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

#include <atomic>
#include <deque>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "autograd/tensor.h"  // fail
#include "infer/result_json.h"
#include "serve/playground.h"

namespace seqtape::serve {

namespace {

using nlohmann::json;
using namespace std::chrono_literals;

std::string dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

void send_error(httplib::Response& res, int status, const std::string& field,
                const std::string& message) {
  res.status = status;
  json j = {{"error", message}};
  if (!field.empty()) j["field"] = field;
  res.set_content(dump(j) + "\n", "application/json");
}

// The port of a socket address (IPv4 or IPv6), or -1.
int port_of(const sockaddr_storage& a) {
  if (a.ss_family == AF_INET) return ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
  if (a.ss_family == AF_INET6) return ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
  return -1;
}

// The connection's socket: httplib does not hand it to handlers, so find the open socket whose
// local and peer ports are the request's. -1 when not found (then disconnects are noticed only
// when a write fails).
int find_socket(const httplib::Request& req) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    int fd = -1;
    try {
      fd = std::stoi(e.path().filename().string());
    } catch (const std::exception&) {
      continue;
    }
    sockaddr_storage local{}, peer{};
    socklen_t ln = sizeof local, pn = sizeof peer;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ln) != 0) continue;
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pn) != 0) continue;
    if (port_of(local) == req.local_port && port_of(peer) == req.remote_port) return fd;
  }
  return -1;
}

// The client closed its end (or the connection broke).
bool peer_gone(int fd) {
  if (fd < 0) return false;
  pollfd p{fd, POLLRDHUP, 0};
  return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) != 0;
}

// Events of one streamed job, from the decoding thread to the connection's thread.
struct EventQueue {
  std::mutex m;
  std::condition_variable cv;
  std::deque<std::string> events;
  void push(const std::string& name, const json& data) {
    {
      std::lock_guard<std::mutex> l(m);
      events.push_back("event: " + name + "\ndata: " + dump(data) + "\n\n");
    }
    cv.notify_all();
  }
};

}  // namespace

struct Server::Impl {
  const InferenceModel& model;
  ServerOptions opt;
  std::unique_ptr<Scheduler> scheduler;
  httplib::Server http;
  std::atomic<bool> stopping{false};
  std::atomic<int64_t> active{0};  // /v1/generate requests not yet answered in full
  int listen_fd = -1;

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
    const size_t threads = std::max<size_t>(opt.http_threads, 2);
    http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    http.set_read_timeout(opt.read_timeout_ms / 1000, (opt.read_timeout_ms % 1000) * 1000);
    http.set_write_timeout(opt.write_timeout_ms / 1000, (opt.write_timeout_ms % 1000) * 1000);
    http.set_keep_alive_timeout(std::max(1, opt.read_timeout_ms / 1000));
    http.set_payload_max_length(opt.limits.max_body_bytes);
    // Keep the listening socket: bind() deepens its accept backlog (httplib listens with 5,
    // which drops bursts of connections).
    http.set_socket_options([this](int sock) {
      int yes = 1;
      setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
      listen_fd = sock;
    });
    http.set_error_handler([this](const httplib::Request&, httplib::Response& res) {
      if (!res.body.empty()) return;  // a handler's own error
      if (res.status == 413)
        send_error(res, 400, "body",
                   "body is more than the limit of " + std::to_string(opt.limits.max_body_bytes) +
                       " bytes");
      else if (res.status == 404)
        send_error(res, 404, "",
                   "no such endpoint (POST /v1/generate, GET /healthz, GET /v1/model, GET /)");
      else
        send_error(res, res.status, "", "HTTP error " + std::to_string(res.status));
    });
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
    http.Get("/healthz", [this](const httplib::Request&, httplib::Response& res) {
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
    });
    http.Get("/v1/model", [this](const httplib::Request&, httplib::Response& res) {
      const Limits& l = opt.limits;
      res.set_content(dump({{"model", opt.model_name},
                            {"config", model.config().to_json()},
                            {"vocab_size", model.vocab().size()},
                            {"parameters", model.parameter_count()},
                            {"scheduler", scheduler->name()},
                            {"queue", opt.queue},
                            {"max_batch", opt.max_batch},
                            {"fields", request_fields()},
                            {"limits",
                             {{"body_bytes", l.max_body_bytes},
                              {"input_bytes", l.max_input_bytes},
                              {"inputs", l.max_inputs},
                              {"max_new", l.max_new},
                              {"beam", l.max_beam}}}}) +
                          "\n",
                      "application/json");
    });
    http.Get("/", [](const httplib::Request&, httplib::Response& res) {
      res.set_content(playground_html(), "text/html; charset=utf-8");
    });
    http.Post("/v1/generate",
              [this](const httplib::Request& req, httplib::Response& res) { generate(req, res); });
  }

  void generate(const httplib::Request& req, httplib::Response& res) {
    auto active_guard = std::make_shared<Active>(active);
    if (stopping) return send_error(res, 503, "", "the server is shutting down");
    GenerateRequest r;
    try {
      r = parse_generate_request(req.body, model, opt.limits);
    } catch (const RequestError& e) {
      return send_error(res, 400, e.field, e.what());
    }
    auto job = std::make_shared<Job>();
    job->texts = r.texts;
    job->inputs = std::move(r.inputs);
    job->options = r.options;
    const int fd = find_socket(req);
    if (!r.stream) {
      if (!scheduler->submit(job))
        return send_error(res, 503, "",
                          stopping ? "the server is shutting down"
                                   : "the queue is full (" + std::to_string(opt.queue) +
                                         " requests); try again later");
      while (!job->wait_done(20ms))
        if (peer_gone(fd)) job->cancel = true;
      if (!job->error.empty()) return send_error(res, 500, "", "decoding failed: " + job->error);
      json out = json::array();
      for (size_t b = 0; b < job->results.size(); ++b)
        out.push_back(result_json(job->texts[b], unk_count(model.vocab(), job->inputs[b]),
                                  job->results[b], job->options, job->seconds[b]));
      res.set_content(dump(r.list ? out : out.at(0)) + "\n", "application/json");
      return;
    }
    auto events = std::make_shared<EventQueue>();
    job->on_stream = [events](const StreamEvent& e) {
      if (!e.text.empty()) events->push("piece", {{"input", e.input}, {"text", e.text}});
    };
    Job* raw = job.get();  // the hooks live in the job: no cycle through a shared_ptr
    const Vocab& vocab = model.vocab();
    job->on_input_done = [events, raw, &vocab](size_t b) {
      events->push("done", result_json(raw->texts[b], unk_count(vocab, raw->inputs[b]),
                                       raw->results[b], raw->options, raw->seconds[b]));
    };
    if (!scheduler->submit(job))
      return send_error(res, 503, "",
                        stopping ? "the server is shutting down"
                                 : "the queue is full (" + std::to_string(opt.queue) +
                                       " requests); try again later");
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider(
        "text/event-stream", [job, events, fd, active_guard](size_t, httplib::DataSink& sink) {
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
          if (peer_gone(fd)) {
            job->cancel = true;
            return false;
          }
          if (finished) {
            std::string tail;
            if (!job->error.empty())
              tail = "event: error\ndata: " + dump({{"error", "decoding failed: " + job->error}}) +
                     "\n\n";
            tail += "event: end\ndata: {}\n\n";
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

}  // namespace seqtape::serve
