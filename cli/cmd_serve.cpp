// `seqtape serve`: an HTTP server over a checkpoint (serve/server.h): POST /v1/generate (JSON or
// Server-Sent Events), OpenAI's /v1/completions and /v1/models, /metrics, /healthz, /readyz,
// GET /v1/model and a playground page at /.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>

#include "cli/commands.h"
#include "cli/compute_type.h"
#include "infer/load.h"
#include "infer/model.h"
#include "serve/auth.h"
#include "serve/server.h"

namespace seqtape::cli {

namespace {

std::atomic<bool> g_stop{false};
extern "C" void on_serve_stop_signal(int) {
  g_stop = true;
}

constexpr int64_t kMaxBatchLimit = 4096;
constexpr int64_t kMaxTimeoutMs = 86'400'000;  // a day

struct ServeArgs {
  std::string model;
  std::string compute_type;  // "" when not given
  serve::ServerOptions o;
  int64_t drain_ms = 10000;
  bool max_batch_given = false;
  bool http_threads_given = false;
  bool threads_given = false;  // the old name of --http-threads: refused, naming the new one
  int64_t threads = 0;
  std::string api_key_file;
};

// Connections served at once when --http-threads is not given: enough for a client per row of
// the batch, so that --max-batch concurrent requests can all be decoding.
constexpr size_t kDefaultHttpThreads = 128;

// What /v1/model shows of --model: its last component (the checkpoint's or the directory's
// name); the server's own path is none of a client's business.
std::string model_display_name(const std::string& model) {
  const std::filesystem::path p = std::filesystem::path(model).lexically_normal();
  const std::string name =
      p.has_filename() ? p.filename().string() : p.parent_path().filename().string();
  return name.empty() ? model : name;
}

// An IPv6 address goes in brackets in a URL (RFC 3986): http://[::1]:8080/.
std::string server_url(const std::string& host, int port) {
  const bool v6 = host.find(':') != std::string::npos;
  return "http://" + (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port) + "/";
}

int run_serve(ServeArgs& a) {
  serve::ServerOptions o = a.o;
  if (a.threads_given)
    throw UsageError(
        "serve has no --threads: connections served at once is --http-threads (--threads is "
        "the compute threads of train and vocab)");
  if (!a.http_threads_given)
    o.http_threads = std::max(kDefaultHttpThreads, size_t(std::max<int64_t>(o.max_batch, 0)));
  if (o.scheduler != "continuous" && o.scheduler != "serial")
    throw UsageError("--scheduler must be continuous or serial, got '" + o.scheduler + "'");
  if (o.max_batch < 1 || o.max_batch > kMaxBatchLimit)
    throw UsageError("--max-batch must be in [1, " + std::to_string(kMaxBatchLimit) + "], got " +
                     std::to_string(o.max_batch));
  if (a.max_batch_given && o.scheduler == "serial")
    throw UsageError("--max-batch applies to --scheduler continuous only");
  if (o.port < 0 || o.port > 65535)
    throw UsageError("--port must be in [0, 65535], got " + std::to_string(o.port));
  if (!a.api_key_file.empty()) o.api_keys = serve::read_api_keys(a.api_key_file);
  const InferenceModel model = load_decoding_model(a.model, a.compute_type);
  o.model_name = model_display_name(a.model);
  serve::Server server(model, o);
  const int port = server.bind();
  std::printf("serving %s on %s (Ctrl-C or SIGTERM stops)\n", a.model.c_str(),
              server_url(o.host, port).c_str());
  std::printf("port %d\n", port);
  std::fflush(stdout);
  g_stop = false;
  std::signal(SIGTERM, on_serve_stop_signal);
  std::signal(SIGINT, on_serve_stop_signal);
  std::thread watcher([&] {
    while (!g_stop) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    std::fprintf(stderr, "serve: stopping (in-flight requests get %lld ms to finish)\n",
                 static_cast<long long>(a.drain_ms));
    server.stop(std::chrono::milliseconds(a.drain_ms));
  });
  server.run();
  g_stop = true;  // run() also returns when the listener fails
  watcher.join();
  const serve::SchedulerStats s = server.stats();
  std::fprintf(stderr, "serve: stopped (%lld completed, %lld cancelled, %lld rejected)\n",
               static_cast<long long>(s.completed), static_cast<long long>(s.cancelled),
               static_cast<long long>(s.rejected));
  std::signal(SIGTERM, SIG_DFL);
  std::signal(SIGINT, SIG_DFL);
  return kOk;
}

// The bounds on a request and on its connection (each checked on the flag's text).
void add_limit_flags(CLI::App* sub, serve::ServerOptions& o) {
  sub->add_option("--max-body", o.limits.max_body_bytes, "largest request body, bytes")
      ->capture_default_str()
      ->check(in_range(1, 1 << 30));
  sub->add_option("--max-input", o.limits.max_input_bytes, "largest input, UTF-8 bytes")
      ->capture_default_str()
      ->check(in_range(1, 1 << 30));
  sub->add_option("--max-inputs", o.limits.max_inputs, "most entries of \"inputs\"")
      ->capture_default_str()
      ->check(in_range(1, kMaxBatchLimit));
  sub->add_option("--max-new-limit", o.limits.max_new, "largest max_new a request may ask")
      ->capture_default_str()
      ->check(in_range(1, 1 << 20));
  sub->add_option("--beam-limit", o.limits.max_beam, "largest beam a request may ask")
      ->capture_default_str()
      ->check(in_range(1, kMaxBatchLimit));
  sub->add_option("--read-timeout-ms", o.read_timeout_ms,
                  "per socket read, and the wait for a kept-alive connection's next request")
      ->capture_default_str()
      ->check(in_range(1, kMaxTimeoutMs));
  sub->add_option("--request-timeout-ms", o.request_timeout_ms,
                  "a request's head and body must arrive within this time of its first byte "
                  "(else 408): slow clients cannot hold a connection")
      ->capture_default_str()
      ->check(in_range(1, kMaxTimeoutMs));
  sub->add_option("--max-client-connections", o.max_client_connections,
                  "connections open at once from one client address (more get 503), so that "
                  "one client cannot take every --http-threads slot")
      ->capture_default_str()
      ->check(in_range(1, 1024));
  sub->add_option("--timeout-ms", o.timeout_ms,
                  "a decoding request's deadline from its arrival, when its body gives no "
                  "timeout_ms (past it: cancelled, 504); 0: none")
      ->capture_default_str()
      ->check(in_range(0, kMaxTimeoutMs));
  sub->add_option("--write-timeout-ms", o.write_timeout_ms, "per socket write (slow readers)")
      ->capture_default_str()
      ->check(in_range(1, kMaxTimeoutMs));
}

// Access control and logging.
void add_operation_flags(CLI::App* sub, ServeArgs& a) {
  serve::ServerOptions& o = a.o;
  sub->add_option("--api-key-file", a.api_key_file,
                  "require \"Authorization: Bearer <key>\" on every endpoint but /healthz (else "
                  "401), the keys one per line (blank lines and # comments skipped)");
  sub->add_option("--cors-origin", o.cors_origin,
                  "answer browsers' cross-origin requests from this one origin (e.g. "
                  "https://example.org); off by default");
  sub->add_option("--access-log", o.access_log,
                  "one JSON line per request (id, endpoint, status, tokens, queue and total "
                  "ms): - for stderr, a file to append to, or \"\" for none")
      ->capture_default_str();
}

}  // namespace

void register_serve(CLI::App& app, Runner& run) {
  auto a = std::make_shared<ServeArgs>();
  CLI::App* sub = app.add_subcommand(
      "serve", "Serve a checkpoint over HTTP: POST /v1/generate (JSON or streamed), a playground");
  sub->footer(
      "Endpoints: POST /v1/generate, POST /v1/completions and GET /v1/models (OpenAI's API),\n"
      "GET /metrics (Prometheus), GET /healthz, GET /readyz, GET /v1/model, GET / (playground).\n"
      "docs/serving.md documents them, the access log, API keys, CORS and deadlines.\n"
      "The body takes \"input\" (or \"inputs\", a list) and generate's options with "
      "underscores\n(beam, n_best, sample, temperature, top_k, top_p, seed, max_new, min_new, "
      "stop, end, suppress, ...);\nthe answer is what `seqtape generate --json` prints.\n\n"
      "Example:\n"
      "  seqtape serve --model datasets/f15/checkpoint.bin --port 8080 &\n"
      "  curl -s localhost:8080/v1/generate -d '{\"input\": \"我爱\", \"max_new\": 8}'\n"
      "  curl -sN localhost:8080/v1/generate -d '{\"input\": \"我爱\", \"stream\": true}'\n"
      "  curl -s localhost:8080/v1/completions -d '{\"model\": \"checkpoint.bin\", \"prompt\": "
      "\"我爱\", \"temperature\": 0}'");
  serve::ServerOptions& o = a->o;
  sub->add_option("--model", a->model,
                  "checkpoint.bin written by seqtape train, its run directory, or a directory "
                  "written by seqtape export")
      ->required();
  add_compute_type_option(sub, a->compute_type);
  sub->add_option("--host", o.host, "address to listen on")->capture_default_str();
  sub->add_option("--port", o.port, "port (0 = a free one, printed)")->capture_default_str();
  sub->add_option("--queue", o.queue, "requests queued or running at most; more get 503")
      ->capture_default_str()
      ->check(in_range(1, 1 << 20));
  sub->add_option("--scheduler", o.scheduler,
                  "continuous: one decoding loop steps the rows of every request together (a "
                  "request joins at the next step, a finished one leaves); serial: one request "
                  "at a time")
      ->capture_default_str();
  CLI::Option* max_batch =
      sub->add_option("--max-batch", o.max_batch,
                      "continuous: rows decoded in one step at most, 1.." +
                          std::to_string(kMaxBatchLimit) +
                          " (a beam of K takes K rows; a wider one is decoded alone)")
          ->capture_default_str();
  // Every bound is checked on the flag's text (in_range): the size_t ones would otherwise take
  // -1 as 2^64 - 1 (--threads -1 started threads until the machine had none left).
  CLI::Option* http_threads =
      sub->add_option("--http-threads", o.http_threads,
                      "connections served at once (a thread each); default: 128, or --max-batch "
                      "when larger")
          ->check(in_range(2, 4096));
  CLI::Option* threads = sub->add_option("--threads", a->threads)->group("");  // refused
  add_operation_flags(sub, *a);
  add_limit_flags(sub, o);
  sub->add_option("--drain-ms", a->drain_ms,
                  "on SIGTERM: time in-flight requests get to finish before they are cancelled")
      ->capture_default_str()
      ->check(in_range(0, kMaxTimeoutMs));
  sub->callback([&run, a, max_batch, http_threads, threads] {
    a->max_batch_given = max_batch->count() > 0;
    a->http_threads_given = http_threads->count() > 0;
    a->threads_given = threads->count() > 0;
    run = [a] { return run_serve(*a); };
  });
}

}  // namespace seqtape::cli
