#pragma once
// The HTTP server of `seqtape serve` (cpp-httplib): request parsing, limits, the queue and
// Server-Sent Events over a Scheduler (serve/scheduler.h). No decoding logic of its own.
//
//   POST /v1/generate  {"input": "..."} or {"inputs": [...]} + generate's options
//                      → what `generate --json` prints (one object, or an array for "inputs");
//                      "stream": true → text/event-stream: `event: piece` {"index", "text"} per
//                      piece of complete UTF-8 characters, `event: done` with the input's full
//                      result (stop_reason, cache_lengths, ...) and its "index", `event: end`
//                      last. In every event "index" is the input's position in "inputs" (0 for
//                      "input") and "input" is only ever the source text (done events).
//   POST /v1/completions, GET /v1/models
//                      OpenAI's completion API (serve/openai.h); errors in OpenAI's shape
//                      {"error": {"message", "type", "param", "code"}}
//   GET  /metrics      Prometheus' text format (serve/metrics.h)
//   GET  /healthz      {"status": "ok" | "stopping", queue and job counts}
//   GET  /v1/model     configuration, vocabulary size, parameter count, limits
//   GET  /             the playground page
//   POST /v1/trace     one input decoded and recorded as a seqtape-trace (web/TRACE_FORMAT.md)
//   GET  /player/...   web/'s step-through player (serve/player_assets.h)
//
// With api_keys, every endpoint but /healthz needs "Authorization: Bearer <key>" (else 401).
// With cors_origin, answers carry Access-Control-Allow-Origin for it and OPTIONS preflights
// are answered (204).
//
// Errors are JSON {"error": message, "field": name}: 400 bad request (the field named), 405
// a method the endpoint does not take (with Allow), 503 queue full or stopping (with
// Retry-After), 500 a decoding bug.
//
// Dimension key: none.

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "infer/model.h"
#include "serve/request.h"
#include "serve/scheduler.h"

namespace seqtape::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8080;  // 0: a free port (bind() returns it)
  Limits limits;
  size_t queue = 64;                     // jobs queued or running; more → 503
  std::string scheduler = "continuous";  // or "serial" (serve/scheduler.h)
  int64_t max_batch = 32;                // continuous: rows decoded together
  size_t http_threads = 128;             // connections served at once (others wait to be accepted)
  size_t max_client_connections = 64;    // open at once from one address (more: 503 at once)
  int read_timeout_ms = 5000, write_timeout_ms = 5000;  // per socket read / write; keep-alive
  int request_timeout_ms = 10000;  // from a request's first byte to its last (else 408)
  int64_t timeout_ms = 0;  // a decoding request's deadline when it gives no timeout_ms; 0: none
  size_t max_head_bytes = 16384;      // the request line and headers (else 431)
  std::string model_name;             // shown by /v1/model: a file name, never the server's path
  std::string access_log = "-";       // one JSON line per request: "-" stderr, "" none, or a file
  std::vector<std::string> api_keys;  // non-empty: every endpoint but /healthz needs one (401)
  std::string cors_origin;            // non-empty: CORS answers for this one origin
  std::function<void()> before_step;  // tests: runs before each decoding step
};

class Server {
 public:
  Server(const InferenceModel& model, ServerOptions options);
  ~Server();
  // Binds host:port; returns the port (the free one chosen for port 0). Error when it cannot.
  int bind();
  // Serves until stop(); blocks.
  void run();
  // Stops taking work (new requests get 503), lets in-flight requests finish until `drain`
  // has passed, cancels the rest (stop reason cancelled), then closes the listener so run()
  // returns. Safe from any thread but a request handler.
  void stop(std::chrono::milliseconds drain);
  SchedulerStats stats() const;
  // Connections open now from a client address (counted from their first bytes to their close).
  size_t open_connections(const std::string& ip) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace seqtape::serve
