// seqtape serve for operators: /metrics read by a real Prometheus parser, the access log and
// request ids, API keys and CORS, readiness. Servers on 127.0.0.1 at a free port, over
// datasets/f15.
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <fstream>
#include <thread>

#include "infer/load.h"
#include "serve/auth.h"
#include "serve/metrics.h"
#include "tests/serve/serve_util.h"
#include "tests/test_util.h"

namespace seqtape {
namespace {

using nlohmann::json;
using serve_test::command_output;
using serve_test::RunningServer;
using namespace std::chrono_literals;

const InferenceModel& f15() {
  static const InferenceModel m = InferenceModel::load(serve_test::f15_path());
  return m;
}

serve::ServerOptions ops_options() {
  serve::ServerOptions o;
  o.model_name = "checkpoint.bin";
  o.queue = 16;
  o.max_batch = 8;
  o.http_threads = 16;
  o.access_log = "";
  return o;
}

// The families of a /metrics text as prometheus_client's own parser reads them (Debian's
// python3-prometheus-client): {name: {"type": t, "samples": [[name, labels, value], ...]}}.
json parse_metrics(const std::string& text) {
  test_util::TempDir dir("metrics");
  test_util::write_bytes(dir.file("metrics.txt"), text);
  test_util::write_bytes(dir.file("parse.py"), R"(
import json, sys
from prometheus_client.parser import text_string_to_metric_families
out = {}
for f in text_string_to_metric_families(open(sys.argv[1]).read()):
    out[f.name] = {"type": f.type, "samples": [[s.name, s.labels, s.value] for s in f.samples]}
print(json.dumps(out))
)");
  const std::string out =
      command_output("/usr/bin/python3 " + dir.file("parse.py") + " " + dir.file("metrics.txt"));
  return out.empty() ? json::object() : json::parse(out);
}

// The value of the sample `name` with exactly `labels` in the parsed families; -1 when absent.
double sample(const json& families, const std::string& name, const json& labels = json::object()) {
  for (const auto& [family, f] : families.items())
    for (const json& s : f["samples"])
      if (s[0] == name && s[1] == labels) return s[2].get<double>();
  return -1;
}

// /metrics after known traffic: request counts by endpoint and status, one histogram entry per
// decoding request (queue wait, latency; first token for those that chose tokens one by one),
// the tokens the answers hold, one batch-size entry per model call, an empty queue.
TEST(ServeOps, MetricsParseWithPrometheusClientAndCountTheTraffic) {
  if (access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/python3";
  RunningServer srv(f15(), ops_options());
  httplib::Client cli("127.0.0.1", srv.port);
  // One connection: the server counts a request once its answer is sent, before it reads the
  // next one on the connection.
  cli.set_keep_alive(true);
  int64_t tokens = 0, beam_steps = 0;
  for (const char* body : {R"({"input": "我爱"})", R"({"input": "我", "beam": 3})",
                           R"({"input": "学习", "sample": true, "seed": 3, "max_new": 5})"}) {
    const int64_t steps_before = srv.server->stats().steps;
    auto r = cli.Post("/v1/generate", body, "application/json");
    ASSERT_TRUE(r && r->status == 200) << body;
    tokens += int64_t(json::parse(r->body)["tokens"].size());
    if (std::string(body).find("beam") != std::string::npos)
      beam_steps = srv.server->stats().steps - steps_before;
  }
  auto streamed =
      cli.Post("/v1/generate", R"({"input": "我爱", "stream": true})", "application/json");
  ASSERT_TRUE(streamed && streamed->status == 200);
  tokens += int64_t(serve_test::parse_sse(streamed->body).at(2).data["tokens"].size());
  auto c = cli.Post("/v1/completions",
                    R"({"model": "checkpoint.bin", "prompt": "我爱", "temperature": 0})",
                    "application/json");
  ASSERT_TRUE(c && c->status == 200) << (c ? c->body : "");
  tokens += json::parse(c->body)["usage"]["completion_tokens"].get<int64_t>();
  auto bad = cli.Post("/v1/generate", R"({"input": "我爱", "beem": 2})", "application/json");
  ASSERT_TRUE(bad && bad->status == 400);
  auto metrics = cli.Get("/metrics");
  ASSERT_TRUE(metrics && metrics->status == 200);
  EXPECT_EQ(metrics->get_header_value("Content-Type"), serve::kMetricsContentType);
  const json f = parse_metrics(metrics->body);
  ASSERT_FALSE(f.empty()) << metrics->body;
  EXPECT_EQ(f["seqtape_requests"]["type"], "counter");
  EXPECT_EQ(sample(f, "seqtape_requests_total", {{"endpoint", "/v1/generate"}, {"status", "200"}}),
            4);
  EXPECT_EQ(sample(f, "seqtape_requests_total", {{"endpoint", "/v1/generate"}, {"status", "400"}}),
            1);
  EXPECT_EQ(
      sample(f, "seqtape_requests_total", {{"endpoint", "/v1/completions"}, {"status", "200"}}), 1);
  for (const char* h : {"seqtape_queue_wait_seconds", "seqtape_request_duration_seconds"}) {
    EXPECT_EQ(f[h]["type"], "histogram") << h;
    EXPECT_EQ(sample(f, std::string(h) + "_count"), 5) << h;
    EXPECT_EQ(sample(f, std::string(h) + "_bucket", {{"le", "+Inf"}}), 5) << h;
  }
  // Greedy, sampled, streamed and the completion chose tokens one by one; the beam did not.
  EXPECT_EQ(sample(f, "seqtape_time_to_first_token_seconds_count"), 4);
  EXPECT_EQ(sample(f, "seqtape_generated_tokens_total"), double(tokens));
  const double steps = sample(f, "seqtape_steps_total", {{"scheduler", "continuous"}});
  EXPECT_GT(steps, 0);
  EXPECT_EQ(sample(f, "seqtape_batch_rows_count"), steps);
  // One request at a time: the beam's steps took 3 rows, the others' 1.
  EXPECT_GT(beam_steps, 0);
  EXPECT_EQ(sample(f, "seqtape_batch_rows_bucket", {{"le", "1"}}), steps - double(beam_steps));
  EXPECT_EQ(sample(f, "seqtape_batch_rows_bucket", {{"le", "2"}}), steps - double(beam_steps));
  EXPECT_EQ(sample(f, "seqtape_batch_rows_bucket", {{"le", "4"}}), steps);
  EXPECT_EQ(sample(f, "seqtape_batch_rows_sum"), steps + 2 * double(beam_steps));
  EXPECT_EQ(sample(f, "seqtape_queue_depth"), 0);
  EXPECT_EQ(sample(f, "seqtape_jobs_total", {{"outcome", "completed"}}), 5);
  EXPECT_EQ(sample(f, "seqtape_jobs_total", {{"outcome", "cancelled"}}), 0);
}

// The lines of a JSON-lines file.
std::vector<json> json_lines(const std::string& path) {
  std::vector<json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) out.push_back(json::parse(line));
  return out;
}

// --access-log: one JSON line per answered request, in order on one connection, with the id
// its answer's X-Request-Id header carries (the client's own when it is a short token), the
// tokens in and out and the times; the Authorization header is nowhere in the log.
TEST(ServeOps, AccessLogHasALinePerRequestWithItsId) {
  test_util::TempDir dir("access");
  serve::ServerOptions o = ops_options();
  o.access_log = dir.file("access.jsonl");
  RunningServer srv(f15(), o);
  httplib::Client cli("127.0.0.1", srv.port);
  cli.set_keep_alive(true);
  const httplib::Headers mine = {{"X-Request-Id", "client-7.a:b_c"},
                                 {"Authorization", "Bearer sk-secret-key"}};
  auto a = cli.Post("/v1/generate", mine, R"({"input": "我爱"})", "application/json");
  auto b = cli.Post("/v1/completions", {{"X-Request-Id", "not ok!"}},
                    R"({"model": "checkpoint.bin", "prompt": "我爱", "temperature": 0})",
                    "application/json");
  auto c = cli.Get("/nowhere");
  auto d = cli.Post("/v1/generate", R"({"input": "我爱", "stream": true})", "application/json");
  ASSERT_TRUE(a && b && c && d);
  EXPECT_EQ(a->get_header_value("X-Request-Id"), "client-7.a:b_c");
  const std::string b_id = b->get_header_value("X-Request-Id");
  EXPECT_EQ(b_id.size(), 16u) << "a fresh id replaces one with a space and a '!'";
  EXPECT_EQ(json::parse(b->body)["id"], "cmpl-" + b_id);
  EXPECT_FALSE(c->get_header_value("X-Request-Id").empty());
  srv.stop();
  const std::string text = test_util::read_bytes(o.access_log);
  EXPECT_EQ(text.find("sk-secret-key"), std::string::npos) << text;
  const std::vector<json> lines = json_lines(o.access_log);
  ASSERT_EQ(lines.size(), 4u) << text;
  const std::vector<std::pair<const httplib::Result*, std::string>> expect = {
      {&a, "/v1/generate"}, {&b, "/v1/completions"}, {&c, "/nowhere"}, {&d, "/v1/generate"}};
  for (size_t i = 0; i < 4; ++i) {
    const json& l = lines[i];
    const httplib::Response& res = **expect[i].first;
    EXPECT_EQ(l["id"], res.get_header_value("X-Request-Id")) << l;
    EXPECT_EQ(l["endpoint"], expect[i].second) << l;
    EXPECT_EQ(l["status"], res.status) << l;
    EXPECT_EQ(l["client"], "127.0.0.1") << l;
    EXPECT_GE(l["total_ms"].get<double>(), 0) << l;
    EXPECT_TRUE(l["time"].is_string()) << l;
  }
  for (size_t i : {0, 1, 3}) {
    const json& l = lines[i];
    EXPECT_EQ(l["input_tokens"], 2) << l;
    EXPECT_EQ(l["output_tokens"], 2) << l;  // 学习 ！
    EXPECT_GE(l["queue_ms"].get<double>(), 0) << l;
    EXPECT_LE(l["queue_ms"].get<double>(), l["total_ms"].get<double>()) << l;
    EXPECT_LE(l["first_token_ms"].get<double>(), l["total_ms"].get<double>()) << l;
  }
  EXPECT_FALSE(lines[2].contains("input_tokens")) << lines[2];
  EXPECT_EQ(lines[0]["method"], "POST");
  EXPECT_EQ(lines[2]["method"], "GET");
}

// An access log that cannot be opened is an error naming it, before the server starts.
TEST(ServeOps, AccessLogThatCannotBeOpenedIsAnError) {
  serve::ServerOptions o = ops_options();
  o.access_log = "/nonexistent-dir/access.jsonl";
  try {
    serve::Server s(f15(), o);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(
        std::string(e.what()).find("cannot open the access log /nonexistent-dir/access.jsonl"),
        std::string::npos)
        << e.what();
  }
}

// --api-key-file: every endpoint but /healthz answers 401 (with WWW-Authenticate, in OpenAI's
// shape on its endpoints) to a missing, wrong, truncated or extended key or another scheme,
// and serves each listed key; no key reaches the access log.
TEST(ServeOps, ApiKeysGate401AndAreNeverLogged) {
  test_util::TempDir dir("keys");
  serve::ServerOptions o = ops_options();
  o.api_keys = {"sk-first-key", "sk-second"};
  o.access_log = dir.file("access.jsonl");
  RunningServer srv(f15(), o);
  httplib::Client cli("127.0.0.1", srv.port);
  const std::string body = R"({"input": "我爱"})";
  const auto post = [&](const std::string& authorization) {
    httplib::Headers h;
    if (!authorization.empty()) h.emplace("Authorization", authorization);
    auto r = cli.Post("/v1/generate", h, body, "application/json");
    return r ? r->status : -1;
  };
  for (const char* bad :
       {"", "Bearer ", "Bearer sk-first-ke", "Bearer sk-first-keyy", "Bearer sk-third",
        "Basic sk-first-key", "sk-first-key", "Bearer  sk-second"})
    EXPECT_EQ(post(bad), 401) << "'" << bad << "'";
  EXPECT_EQ(post("Bearer sk-first-key"), 200);
  EXPECT_EQ(post("bearer sk-second"), 200) << "the scheme is case-insensitive";
  auto r = cli.Get("/metrics");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(r->get_header_value("WWW-Authenticate"), "Bearer");
  EXPECT_EQ(json::parse(r->body)["error"],
            "an API key is required: send Authorization: Bearer <key>");
  for (const char* path : {"/v1/model", "/", "/readyz", "/nowhere"}) {
    auto g = cli.Get(path);
    ASSERT_TRUE(g) << path;
    EXPECT_EQ(g->status, 401) << path;
  }
  auto models = cli.Get("/v1/models", {{"Authorization", "Bearer sk-wrong"}});
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 401);
  EXPECT_EQ(json::parse(models->body)["error"]["type"], "authentication_error") << models->body;
  auto health = cli.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200) << "liveness needs no key";
  srv.stop();
  const std::string log = test_util::read_bytes(o.access_log);
  for (const char* key : {"sk-first", "sk-second", "sk-third", "sk-wrong"})
    EXPECT_EQ(log.find(key), std::string::npos) << key << " in the access log";
  EXPECT_EQ(json_lines(o.access_log).size(), 17u);
}

// Requests refused before they are parsed — 431 (head too large), 408 (a head that stalls,
// with and without its request line), 503 (one connection too many from an address), a bad
// frame (400), and 401 (no key) — each get a line in the access log, with the method and path
// when the request line had arrived ("-" otherwise), the id their answer carries, and a count
// in /metrics' requests by endpoint and status.
TEST(ServeOps, RefusalsBeforeParsingAreLoggedAndCounted) {
  if (access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "no /usr/bin/python3";
  test_util::TempDir dir("refusals");
  serve::ServerOptions o = ops_options();
  o.access_log = dir.file("access.jsonl");
  o.api_keys = {"sk-key"};
  o.max_head_bytes = 1024;
  o.read_timeout_ms = 1000;
  o.max_client_connections = 2;
  RunningServer srv(f15(), o);
  struct Refusal {
    std::string request, method, endpoint;
    int status;
  };
  const std::vector<Refusal> refusals = {
      {"GET /v1/model?x=1 HTTP/1.1\r\nX-Big: " + std::string(2000, 'a') + "\r\n\r\n", "GET",
       "/v1/model", 431},
      {"POST /v1/generate HTTP/1.1\r\nHost: x", "POST", "/v1/generate", 408},
      {"POS", "-", "-", 408},
      {"GET /nowhere HTTP/1.1\r\nContent-Length: x\r\n\r\n", "GET", "/nowhere", 400},
      {"GET /v1/model HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", "GET", "/v1/model", 401}};
  std::vector<std::string> ids;
  for (const Refusal& r : refusals) {
    serve_test::RawSocket s(srv.port, 5000);
    ASSERT_TRUE(s.ok() && s.send_all(r.request));
    const std::string answer = s.read_all();
    EXPECT_EQ(answer.rfind("HTTP/1.1 " + std::to_string(r.status), 0), 0u) << answer;
    const size_t at = answer.find("X-Request-Id: ");
    ASSERT_NE(at, std::string::npos) << answer;
    ids.push_back(answer.substr(at + 14, answer.find("\r\n", at) - at - 14));
  }
  // The server counts a connection from its first bytes to its close; a loaded machine may
  // take a while to do either, so the test waits for the count rather than for a fixed time.
  const auto wait_for_open = [&](size_t n) {
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (srv.server->open_connections("127.0.0.1") != n &&
           std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(5ms);
    return srv.server->open_connections("127.0.0.1");
  };
  {
    // Two idle connections from 127.0.0.1, then a third: 503 at once.
    ASSERT_EQ(wait_for_open(0), 0u) << "the refusals' connections are still open";
    serve_test::RawSocket a(srv.port, 5000), b(srv.port, 5000);
    ASSERT_TRUE(a.send_all("GET /healthz HTTP/1.1\r\n") && b.send_all("GET /healthz HTTP/1.1\r\n"));
    ASSERT_EQ(wait_for_open(2), 2u) << "the two idle connections were not taken";
    serve_test::RawSocket c(srv.port, 5000);
    const std::string answer = c.read_all();
    EXPECT_EQ(answer.rfind("HTTP/1.1 503", 0), 0u) << answer;
    const size_t at = answer.find("X-Request-Id: ");
    ASSERT_NE(at, std::string::npos) << answer;
    ids.push_back(answer.substr(at + 14, answer.find("\r\n", at) - at - 14));
    a.send_all("\r\n");
    b.send_all("\r\n");
    a.read_all();
    b.read_all();
  }
  ASSERT_EQ(wait_for_open(0), 0u) << "the idle connections are still open";
  httplib::Client cli("127.0.0.1", srv.port);
  auto m = cli.Get("/metrics", {{"Authorization", "Bearer sk-key"}});
  ASSERT_TRUE(m && m->status == 200);
  const json f = parse_metrics(m->body);
  const auto count = [&](const std::string& endpoint, int status) {
    return sample(f, "seqtape_requests_total",
                  {{"endpoint", endpoint}, {"status", std::to_string(status)}});
  };
  EXPECT_EQ(count("/v1/model", 431), 1) << m->body;
  EXPECT_EQ(count("/v1/generate", 408), 1) << m->body;
  EXPECT_EQ(count("other", 408), 1) << m->body;
  EXPECT_EQ(count("other", 400), 1) << m->body;
  EXPECT_EQ(count("/v1/model", 401), 1) << m->body;
  EXPECT_EQ(count("other", 503), 1) << m->body;
  EXPECT_EQ(count("/healthz", 200), 2) << m->body;
  srv.stop();
  const std::vector<json> lines = json_lines(o.access_log);
  std::vector<Refusal> expect = refusals;
  expect.push_back({"", "-", "-", 503});
  for (size_t i = 0; i < expect.size(); ++i) {
    const auto it =
        std::find_if(lines.begin(), lines.end(), [&](const json& l) { return l["id"] == ids[i]; });
    ASSERT_NE(it, lines.end()) << "no access log line for the " << expect[i].status << " "
                               << expect[i].endpoint << " (id " << ids[i] << ")";
    EXPECT_EQ((*it)["status"], expect[i].status) << *it;
    EXPECT_EQ((*it)["method"], expect[i].method) << *it;
    EXPECT_EQ((*it)["endpoint"], expect[i].endpoint) << *it;
    EXPECT_EQ((*it)["client"], "127.0.0.1") << *it;
    EXPECT_GE((*it)["total_ms"].get<double>(), 0) << *it;
  }
}

// A client allowed one connection at a time that opens the next as soon as the last one's
// answer has ended (the server's close) is never told it has too many open: the server gives
// the connection's place back before it closes, on the answered path and on the refused one
// (which lingers to drain what the client still sends).
TEST(ServeOps, AClosedConnectionNoLongerCountsAgainstItsClient) {
  serve::ServerOptions o = ops_options();
  o.max_client_connections = 1;
  RunningServer srv(f15(), o);
  const std::string answered = "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
  const std::string refused = "GET /nowhere HTTP/1.1\r\nContent-Length: x\r\n\r\n";
  for (int i = 0; i < 300; ++i) {
    const bool ok = i % 2 == 0;
    serve_test::RawSocket s(srv.port, 5000);
    ASSERT_TRUE(s.ok() && s.send_all(ok ? answered : refused));
    const std::string answer = s.read_all();
    ASSERT_EQ(answer.rfind(ok ? "HTTP/1.1 200" : "HTTP/1.1 400", 0), 0u)
        << "connection " << i << ":\n"
        << answer;
  }
}

TEST(ServeOps, KeyMatchingAndTheKeyFile) {
  const std::vector<std::string> keys = {"abc", "sk-0123456789"};
  EXPECT_TRUE(serve::key_matches(keys, "abc"));
  EXPECT_TRUE(serve::key_matches(keys, "sk-0123456789"));
  for (const char* k : {"", "ab", "abcd", "abd", "sk-012345678", "sk-01234567890", "Abc"})
    EXPECT_FALSE(serve::key_matches(keys, k)) << k;
  EXPECT_FALSE(serve::key_matches({}, ""));
  EXPECT_EQ(serve::bearer_token("Bearer x"), "x");
  EXPECT_EQ(serve::bearer_token("BEARER x"), "x");
  EXPECT_EQ(serve::bearer_token("Bearer"), "");
  EXPECT_EQ(serve::bearer_token("Token x"), "");
  test_util::TempDir dir("keyfile");
  test_util::write_bytes(dir.file("k"), "# the team's keys\n\n  sk-one \r\nsk-two\n");
  EXPECT_EQ(serve::read_api_keys(dir.file("k")), (std::vector<std::string>{"sk-one", "sk-two"}));
  const auto error_of = [&](const std::string& path) {
    try {
      serve::read_api_keys(path);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  test_util::write_bytes(dir.file("empty"), "# none yet\n\n");
  EXPECT_NE(error_of(dir.file("empty")).find(dir.file("empty") + " holds no key"),
            std::string::npos)
      << error_of(dir.file("empty"));
  test_util::write_bytes(dir.file("space"), "sk-one\nsk two\n");
  EXPECT_NE(error_of(dir.file("space")).find(dir.file("space") + ":2: an API key has a space"),
            std::string::npos)
      << error_of(dir.file("space"));
  EXPECT_NE(
      error_of(dir.file("missing")).find("cannot read the API key file " + dir.file("missing")),
      std::string::npos);
}

// --cors-origin: answers carry the origin (and expose X-Request-Id), preflights get 204 with
// the methods and headers, without a key. Off by default: no CORS header, OPTIONS is a 405.
TEST(ServeOps, CorsIsForOneOriginAndOffByDefault) {
  serve::ServerOptions o = ops_options();
  o.cors_origin = "https://app.example.org";
  o.api_keys = {"sk-k"};
  RunningServer srv(f15(), o);
  httplib::Client cli("127.0.0.1", srv.port);
  const httplib::Headers preflight = {{"Origin", "https://app.example.org"},
                                      {"Access-Control-Request-Method", "POST"},
                                      {"Access-Control-Request-Headers", "authorization"}};
  auto p = cli.Options("/v1/completions", preflight);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->status, 204);
  EXPECT_EQ(p->get_header_value("Access-Control-Allow-Origin"), "https://app.example.org");
  EXPECT_NE(p->get_header_value("Access-Control-Allow-Methods").find("POST"), std::string::npos);
  EXPECT_NE(p->get_header_value("Access-Control-Allow-Headers").find("Authorization"),
            std::string::npos);
  auto g = cli.Post("/v1/generate",
                    {{"Origin", "https://app.example.org"}, {"Authorization", "Bearer sk-k"}},
                    R"({"input": "我爱"})", "application/json");
  ASSERT_TRUE(g);
  EXPECT_EQ(g->status, 200);
  EXPECT_EQ(g->get_header_value("Access-Control-Allow-Origin"), "https://app.example.org");
  EXPECT_EQ(g->get_header_value("Access-Control-Expose-Headers"), "X-Request-Id");
  srv.stop();

  RunningServer plain(f15(), ops_options());
  httplib::Client c2("127.0.0.1", plain.port);
  auto p2 = c2.Options("/v1/generate", preflight);
  ASSERT_TRUE(p2);
  EXPECT_EQ(p2->status, 405);
  EXPECT_FALSE(p2->has_header("Access-Control-Allow-Origin"));
  auto g2 = c2.Post("/v1/generate", {{"Origin", "https://app.example.org"}}, R"({"input": "我爱"})",
                    "application/json");
  ASSERT_TRUE(g2);
  EXPECT_EQ(g2->status, 200);
  EXPECT_FALSE(g2->has_header("Access-Control-Allow-Origin"));
}

// /readyz: 200 while the queue has room; 503 with Retry-After once requests queued or running
// fill it (while /healthz, the liveness probe, stays 200), and again while stopping.
TEST(ServeOps, ReadyzIsUnreadyWhileTheQueueIsFull) {
  std::atomic<bool> release{false};
  serve::ServerOptions o = ops_options();
  o.queue = 2;
  o.before_step = [&] {
    for (int i = 0; i < 1000 && !release; ++i) std::this_thread::sleep_for(5ms);
  };
  RunningServer srv(f15(), o);
  httplib::Client cli("127.0.0.1", srv.port);
  auto r = cli.Get("/readyz");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(json::parse(r->body)["status"], "ready");
  std::vector<std::thread> clients;
  for (int i = 0; i < 2; ++i)
    clients.emplace_back([&] {
      httplib::Client c("127.0.0.1", srv.port);
      c.Post("/v1/generate", R"({"input": "我爱"})", "application/json");
    });
  for (int i = 0; i < 500; ++i) {
    const serve::SchedulerStats s = srv.server->stats();
    if (s.queued + s.running == 2) break;
    std::this_thread::sleep_for(10ms);
  }
  auto full = cli.Get("/readyz");
  auto live = cli.Get("/healthz");
  release = true;
  for (auto& t : clients) t.join();
  ASSERT_TRUE(full && live);
  EXPECT_EQ(full->status, 503) << full->body;
  EXPECT_EQ(full->get_header_value("Retry-After"), "1");
  EXPECT_NE(full->body.find("the queue is full"), std::string::npos) << full->body;
  EXPECT_EQ(live->status, 200);
  auto again = cli.Get("/readyz");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 200);
}

// A request's deadline: timeout_ms in the body, or the server's --timeout-ms. Past it the
// request is cancelled and answered 504 naming timeout_ms (streamed: an error event before
// end), and counted as cancelled; one within its deadline is answered as ever.
TEST(ServeOps, RequestDeadlineCancelsWith504) {
  serve::ServerOptions o = ops_options();
  o.before_step = [] { std::this_thread::sleep_for(30ms); };  // 30 steps: about 0.9 s
  o.timeout_ms = 150;
  RunningServer srv(f15(), o);
  httplib::Client cli("127.0.0.1", srv.port);
  const auto t0 = std::chrono::steady_clock::now();
  auto own = cli.Post("/v1/generate",
                      R"({"input": "我爱", "min_new": 30, "max_new": 30, "timeout_ms": 100})",
                      "application/json");
  ASSERT_TRUE(own);
  EXPECT_EQ(own->status, 504) << own->body;
  EXPECT_EQ(json::parse(own->body)["field"], "timeout_ms") << own->body;
  EXPECT_NE(own->body.find("deadline (timeout_ms 100)"), std::string::npos) << own->body;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 600ms) << "cancelled well before the 30 steps";
  auto by_default = cli.Post("/v1/generate", R"({"input": "我爱", "min_new": 30, "max_new": 30})",
                             "application/json");
  ASSERT_TRUE(by_default);
  EXPECT_EQ(by_default->status, 504) << by_default->body;
  EXPECT_NE(by_default->body.find("timeout_ms 150"), std::string::npos) << by_default->body;
  auto streamed =
      cli.Post("/v1/generate", R"({"input": "我爱", "min_new": 30, "max_new": 30, "stream": true})",
               "application/json");
  ASSERT_TRUE(streamed);
  const auto events = serve_test::parse_sse(streamed->body);
  ASSERT_GE(events.size(), 2u) << streamed->body;
  EXPECT_EQ(events[events.size() - 2].name, "error") << streamed->body;
  EXPECT_EQ(events.back().name, "end");
  auto in_time =
      cli.Post("/v1/generate", R"({"input": "我爱", "timeout_ms": 5000})", "application/json");
  ASSERT_TRUE(in_time);
  EXPECT_EQ(in_time->status, 200) << in_time->body;
  EXPECT_EQ(json::parse(in_time->body)["text"], "学习！");
  auto bad = cli.Post("/v1/generate", R"({"input": "我爱", "timeout_ms": 0})", "application/json");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_EQ(json::parse(bad->body)["field"], "timeout_ms");
  EXPECT_EQ(srv.server->stats().cancelled, 3);
}

// POST /v1/trace records one input for the step-through player, which the server serves at
// /player/ (player.html, .js, .css from web/); several inputs or a stream are 400s.
TEST(ServeOps, TraceEndpointAndThePlayer) {
  RunningServer srv(f15(), ops_options());
  httplib::Client cli("127.0.0.1", srv.port);
  auto t = cli.Post("/v1/trace", R"({"input": "我爱", "max_new": 8})", "application/json");
  ASSERT_TRUE(t);
  ASSERT_EQ(t->status, 200) << t->body;
  const json trace = json::parse(t->body);
  EXPECT_EQ(trace["format"], "seqtape-trace");
  EXPECT_EQ(trace["input"]["text"], "我爱");
  EXPECT_EQ(trace["source"], "seqtape serve");
  EXPECT_EQ(trace["result"]["text"], "学习！") << trace["result"];
  EXPECT_FALSE(trace["steps"].empty());
  for (const char* bad : {R"({"inputs": ["我", "爱"]})", R"({"input": "我", "stream": true})"}) {
    auto r = cli.Post("/v1/trace", bad, "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << bad;
  }
  for (const auto& [path, type] :
       std::vector<std::pair<std::string, std::string>>{{"/player/player.html", "text/html"},
                                                        {"/player/player.js", "text/javascript"},
                                                        {"/player/player.css", "text/css"}}) {
    auto r = cli.Get(path);
    ASSERT_TRUE(r) << path;
    EXPECT_EQ(r->status, 200) << path;
    EXPECT_EQ(r->get_header_value("Content-Type").rfind(type, 0), 0u) << path;
    EXPECT_EQ(r->body,
              test_util::read_bytes(std::string(SEQTAPE_SOURCE_DIR) + "/web" + path.substr(7)))
        << path << " is not web/'s";
  }
}

// A malformed /v1/completions body is a 400 in OpenAI's error shape, naming the parameter as the
// client sent it.
TEST(ServeOps, CompletionsBadRequestsGet400NamingTheParameter) {
  RunningServer srv(f15(), ops_options());
  httplib::Client cli("127.0.0.1", srv.port);
  const std::string m = R"("model": "checkpoint.bin", )";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"prompt": "我爱"})", "model"},
      {R"({"model": 7, "prompt": "我爱"})", "model"},
      {R"({"model": "gpt-4", "prompt": "我爱"})", "model"},
      {"{" + m + R"("prompt": [1, 2]})", "prompt"},
      {"{" + m + R"("prompt": "我爱", "n": 18446744073709551615, "temperature": 0})", "n"},
      {"{" + m + R"("prompt": "我爱", "n": 0})", "n"},
      {"{" + m + R"("prompt": "我爱", "n": 2, "temperature": 0})", "n"},
      {"{" + m + R"("prompt": "我爱", "n": 2, "stream": true})", "n"},
      {"{" + m + R"("prompt": "我爱", "n": 9})", "n"},  // over --beam-limit 8 (num_samples)
      {"{" + m + R"("prompt": "我爱", "max_tokens": 18446744073709551615})", "max_tokens"},
      {"{" + m + R"("prompt": "我爱", "max_tokens": 0})", "max_tokens"},
      {"{" + m + R"("prompt": "我爱", "temperature": "hot"})", "temperature"},
      {"{" + m + R"("prompt": "我爱", "temperature": -1})", "temperature"},
      {"{" + m + R"("prompt": "我爱", "top_p": 2})", "top_p"},
      {"{" + m + R"("prompt": "我爱", "stop": 5})", "stop"},
      {"{" + m + R"("prompt": "我爱", "stream_options": {"x": 1}, "stream": true})",
       "stream_options"},
      {"{" + m + R"("prompt": "我爱", "stream_options": {"include_usage": true}})",
       "stream_options"},
      {"{" + m + R"("prompt": "我爱", "logprobs": 2})", "logprobs"},
      {"{" + m + R"("prompt": "我爱", "seqtape": {"beem": 2}})", "seqtape.beem"},
      {"{" + m + R"("prompt": "我爱", "seqtape": {"beam": 99}, "temperature": 0})", "seqtape.beam"},
      {"{" + m + R"("prompt": "我爱", "seqtape": {"timeout_ms": -5}})", "seqtape.timeout_ms"},
      {"{" + m + R"("prompt": "我爱", "seqtape": [1]})", "seqtape"},
      {"{" + m + R"("prompt": "我爱", "user": 3})", "user"},
      {R"({"model": "checkpoint.bin", "prompt": "我爱",)", "body"}};
  for (const auto& [body, param] : cases) {
    auto r = cli.Post("/v1/completions", body, "application/json");
    ASSERT_TRUE(r) << body;
    EXPECT_EQ(r->status, 400) << body << " → " << r->body;
    const json j = json::parse(r->body, nullptr, false);
    ASSERT_TRUE(j.is_object() && j["error"].is_object()) << r->body;
    EXPECT_EQ(j["error"]["param"], param) << body << " → " << r->body;
    EXPECT_EQ(j["error"]["type"], "invalid_request_error") << r->body;
  }
}

}  // namespace
}  // namespace seqtape
