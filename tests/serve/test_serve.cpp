// seqtape serve over real HTTP on loopback: a Server on 127.0.0.1 at a free port, driven by
// cpp-httplib clients and raw sockets, with datasets/f15 (the tiny trained decoder-only model).
// Every answer is checked against the offline decode of the same input and options.
#include <fcntl.h>
#include <httplib.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <random>

#include "infer/load.h"
#include "infer/result_json.h"
#include "infer/search.h"
#include "model/memory_budget.h"
#include "tests/serve/serve_util.h"
#include "tests/test_util.h"

extern char** environ;

namespace seqtape {
namespace {

using nlohmann::json;
using serve_test::command_output;
using serve_test::RawSocket;
using serve_test::RunningServer;
using namespace std::chrono_literals;

const InferenceModel& f15() {
  static const InferenceModel m = InferenceModel::load(serve_test::f15_path());
  return m;
}

// One request: its body and the options the offline decode uses (built independently of the
// server's parser).
struct Spec {
  std::vector<std::string> inputs;
  bool list = false, stream = false;
  json body;
  GenerateOptions opt;
};

Spec make_spec(std::mt19937& rng, int i) {
  static const std::vector<std::string> pieces = {"我", "爱", "学习", "！"};
  Spec s;
  const int n_inputs = (i % 7 == 3) ? 2 : 1;
  for (int b = 0; b < n_inputs; ++b) {
    std::string t;
    const int len = 1 + int(rng() % 4);
    for (int k = 0; k < len; ++k) t += pieces[rng() % pieces.size()];
    s.inputs.push_back(t);
  }
  s.list = n_inputs > 1;
  if (s.list)
    s.body["inputs"] = s.inputs;
  else
    s.body["input"] = s.inputs[0];
  GenerateOptions& o = s.opt;
  const int64_t max_new = 2 + int64_t(rng() % 10);
  o.max_new = max_new;
  s.body["max_new"] = max_new;
  switch (i % 6) {
    case 0:
      break;
    case 1:
      o.beam = 3, o.n_best = 2, o.length_penalty = 0.6;
      s.body.update({{"beam", 3}, {"n_best", 2}, {"length_penalty", 0.6}});
      break;
    case 2:
      o.sample = true, o.seed = rng() % 1000, o.temperature = 0.8, o.top_k = 3;
      s.body.update({{"sample", true}, {"seed", o.seed}, {"temperature", 0.8}, {"top_k", 3}});
      break;
    case 3:
      o.sample = true, o.seed = rng() % 1000, o.top_p = 0.9,
      o.min_new = std::min<int64_t>(2, max_new);
      s.body.update({{"sample", true}, {"seed", o.seed}, {"top_p", 0.9}, {"min_new", o.min_new}});
      break;
    case 4:
      o.repetition_penalty = 1.3, o.no_repeat_ngram = 2, o.stop_strings = {"！"};
      s.body.update({{"repetition_penalty", 1.3}, {"no_repeat_ngram", 2}, {"stop", {"！"}}});
      break;
    case 5:
      o.suppress_ids = {*f15().vocab().find("！")};
      s.body["suppress"] = {"！"};
      break;
  }
  s.stream = i % 3 == 0;
  if (s.stream) s.body["stream"] = true;
  return s;
}

json offline(const std::string& text, const GenerateOptions& o, const InferenceModel& m = f15()) {
  const std::vector<int32_t> ids = encode_input(m, m.codec(), text);
  const GenerateResult r = generate(m, {ids}, o).at(0);
  return serve_test::timeless(result_json(text, unk_count(m.vocab(), ids), r, o, 0.0));
}

json get_json(int port, const std::string& path) {
  httplib::Client c("127.0.0.1", port);
  auto res = c.Get(path.c_str());
  if (!res || res->status != 200) return json::object();
  return json::parse(res->body);
}

// Checks one answer of `s` (JSON or SSE body) against the offline decode; "" when it agrees.
std::string check_answer(const Spec& s, int status, const std::string& body) {
  if (status != 200) return "status " + std::to_string(status) + ": " + body;
  std::vector<json> got;
  if (s.stream) {
    const auto events = serve_test::parse_sse(body);
    std::vector<std::string> texts(s.inputs.size());
    bool ended = false;
    for (const auto& e : events) {
      // "index" is the input's position in both events; "input" only ever the source text.
      if (e.name == "piece") {
        if (e.data.contains("input")) return "a piece event has an input field: " + e.data.dump();
        texts.at(e.data["index"].get<size_t>()) += e.data["text"].get<std::string>();
      }
      if (e.name == "done") {
        if (e.data.value("index", size_t(99)) != got.size() ||
            e.data.value("input", "") != s.inputs.at(got.size()))
          return "done event " + std::to_string(got.size()) + " has index " +
                 e.data.value("index", json()).dump() + " and input " +
                 e.data.value("input", json()).dump();
        got.push_back(e.data);
        got.back().erase("index");
        if (e.data["text"] != texts.at(got.size() - 1))
          return "streamed pieces '" + texts[got.size() - 1] + "' != final text " +
                 e.data["text"].dump();
      }
      if (e.name == "end") ended = true;
    }
    if (!ended) return "no end event in: " + body;
  } else {
    const json j = json::parse(body);
    if (s.list) {
      if (!j.is_array()) return "not an array: " + body;
      for (const json& e : j) got.push_back(e);
    } else {
      got.push_back(j);
    }
  }
  if (got.size() != s.inputs.size()) return "answers for " + std::to_string(got.size()) + " inputs";
  for (size_t b = 0; b < got.size(); ++b) {
    const json want = offline(s.inputs[b], s.opt);
    if (serve_test::timeless(got[b]) != want)
      return "input " + s.inputs[b] + ": got " + got[b].dump() + " want " + want.dump();
  }
  return "";
}

serve::ServerOptions test_options() {
  serve::ServerOptions o;
  o.access_log = "";  // tests/serve/test_serve_ops.cpp reads it
  o.queue = 64;
  o.http_threads = 72;
  o.max_client_connections = 72;  // the load test's 64 clients all come from 127.0.0.1
  o.limits.max_body_bytes = 64 * 1024;
  o.limits.max_input_bytes = 64;
  o.limits.max_new = 64;  // generate's default
  o.limits.max_beam = 4;
  o.read_timeout_ms = 3000;
  o.write_timeout_ms = 3000;
  o.model_name = "f15";
  return o;
}

TEST(Serve, SixtyFourClientsTimesTenRequestsEqualTheOfflineDecode) {
  RunningServer srv(f15(), test_options());
  constexpr int kClients = 64, kRequests = 10;
  std::atomic<int> ok{0};
  std::mutex m;
  std::vector<std::string> failures;
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c)
    clients.emplace_back([&, c] {
      std::mt19937 rng(uint32_t(1000 + c));
      httplib::Client cli("127.0.0.1", srv.port);
      cli.set_read_timeout(30, 0);
      for (int i = 0; i < kRequests; ++i) {
        const Spec s = make_spec(rng, c * kRequests + i);
        const auto t0 = std::chrono::steady_clock::now();
        auto res = cli.Post("/v1/generate", s.body.dump(), "application/json");
        const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                            std::chrono::steady_clock::now() - t0)
                            .count();
        std::string why = res ? check_answer(s, res->status, res->body)
                              : "no answer (" + httplib::to_string(res.error()) + ") after " +
                                    std::to_string(ms) + " ms";
        if (why.empty()) {
          ++ok;
        } else {
          std::lock_guard<std::mutex> l(m);
          failures.push_back("client " + std::to_string(c) + " request " + std::to_string(i) + " " +
                             s.body.dump() + ": " + why);
        }
      }
    });
  for (auto& t : clients) t.join();
  for (size_t k = 0; k < std::min<size_t>(failures.size(), 5); ++k) ADD_FAILURE() << failures[k];
  EXPECT_EQ(ok.load(), kClients * kRequests);
  const json h = get_json(srv.port, "/healthz");
  EXPECT_EQ(h["status"], "ok");
  EXPECT_EQ(h["completed"], kClients * kRequests);
  EXPECT_EQ(h["rejected"], 0);
}

TEST(Serve, StreamedPiecesAreWholeCharactersAndConcatenateToTheText) {
  RunningServer srv(f15(), test_options());
  httplib::Client cli("127.0.0.1", srv.port);
  // 我爱 → 学习 ！ <eos>: 学习 is one token of two characters (6 UTF-8 bytes).
  auto res = cli.Post("/v1/generate", R"({"input": "我爱", "stream": true})", "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/event-stream");
  const auto events = serve_test::parse_sse(res->body);
  std::string text;
  int pieces = 0;
  for (const auto& e : events)
    if (e.name == "piece") {
      const std::string t = e.data["text"];
      EXPECT_FALSE(t.empty());
      // A piece never ends inside a character: its last lead byte starts a complete sequence.
      size_t i = t.size() - 1;
      while (i > 0 && (uint8_t(t[i]) & 0xC0) == 0x80) --i;
      const uint8_t lead = uint8_t(t[i]);
      const size_t len = lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
      EXPECT_EQ(t.size() - i, len) << t;
      text += t;
      ++pieces;
    }
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events[events.size() - 2].name, "done");
  EXPECT_EQ(events.back().name, "end");
  const json& done = events[events.size() - 2].data;
  EXPECT_EQ(text, done["text"].get<std::string>());
  EXPECT_EQ(text, "学习！");
  EXPECT_EQ(pieces, 2);
  EXPECT_EQ(done["stop_reason"], "eos");
  EXPECT_EQ(done["cache_lengths"], json({2, 3, 4}));  // the F15 document's cache lengths
}

// Each bad request gets 400 with the field named, and the server keeps answering.
TEST(Serve, BadRequestsGet400NamingTheField) {
  RunningServer srv(f15(), test_options());
  httplib::Client cli("127.0.0.1", srv.port);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"input": "我爱",)", "body"},
      {R"([1, 2])", "body"},
      {R"({"input": "我爱", "max_new": 1e999})", "body"},  // a number past double
      {R"({"input": "我爱", "beem": 2})", "beem"},
      {R"({"max_new": 3})", "input"},
      {R"({"input": "我爱", "inputs": ["我"]})", "input"},
      {R"({"input": 7})", "input"},
      {R"({"input": ""})", "input"},
      {R"({"input": "我爱x"})", "input"},  // f15 has no <unk>
      {R"({"inputs": ["我", "爱", "hello"]})", "inputs[2]"},
      {R"({"input": "我爱我爱我爱我爱我爱我爱我爱我爱我爱我爱我爱我爱"})", "input"},  // > 64 bytes
      {R"({"input": "我爱", "max_new": 65})", "max_new"},
      {R"({"input": "我爱", "max_new": 0})", "max_new"},
      {R"({"input": "我爱", "beam": 5})", "beam"},
      {R"({"input": "我爱", "beam": 2, "n_best": 3})", "n_best"},
      {R"({"input": "我爱", "beam": "2"})", "beam"},
      {R"({"input": "我爱", "temperature": 0.5})", "temperature"},
      {R"({"input": "我爱", "sample": true, "top_p": 0})", "top_p"},
      {R"({"input": "我爱", "sample": true, "beam": 2})", "sample"},
      {R"({"input": "我爱", "stop": [""]})", "stop"},
      {R"({"input": "我爱", "end": ["<nope>"]})", "end"},
      {R"({"input": "我爱", "no_cache": true, "verify_cache": true})", "verify_cache"},
      {R"({"input": "我爱", "seed": -1, "sample": true})", "seed"},
      {R"({"input": "我爱", "num_samples": 2})", "num_samples"},  // needs sample
      {R"({"input": "我爱", "sample": true, "num_samples": 0})", "num_samples"},
      {R"({"input": "我爱", "sample": true, "num_samples": 5})", "num_samples"},  // > beam limit
      {R"({"input": "我爱", "sample": true, "num_samples": 2, "stream": true})", "num_samples"},
  };
  for (const auto& [body, field] : cases) {
    auto res = cli.Post("/v1/generate", body, "application/json");
    ASSERT_TRUE(res) << body;
    EXPECT_EQ(res->status, 400) << body << " → " << res->body;
    const json j = json::parse(res->body, nullptr, false);
    ASSERT_TRUE(j.is_object()) << res->body;
    EXPECT_EQ(j.value("field", ""), field) << body << " → " << res->body;
    EXPECT_FALSE(j.value("error", "").empty());
  }
  // A body over the limit (64 KiB here): 400 naming the body, without decoding it.
  const std::string huge = R"({"input": ")" + std::string(1 << 20, 'a') + R"("})";
  auto res = cli.Post("/v1/generate", huge, "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400) << res->body;
  EXPECT_EQ(json::parse(res->body).value("field", ""), "body");
  // Still up, and still right.
  httplib::Client again("127.0.0.1", srv.port);
  auto good = again.Post("/v1/generate", R"({"input": "我爱"})", "application/json");
  ASSERT_TRUE(good);
  ASSERT_EQ(good->status, 200);
  GenerateOptions o;
  EXPECT_EQ(serve_test::timeless(json::parse(good->body)), offline("我爱", o));
  EXPECT_EQ(get_json(srv.port, "/healthz")["status"], "ok");
}

// A request whose hypotheses (inputs x beam) need more memory than the machine has left is
// refused like a limit (400 naming the field), and the server stays up: an operator's raised
// --beam-limit or --max-inputs never lets one request take it down. The budget here lies
// between what one input's beam 1 and beam 4 need, so the rows are what is counted.
TEST(Serve, RequestBeyondTheMemoryBudgetGets400) {
  RunningServer srv(f15(), test_options());
  httplib::Client cli("127.0.0.1", srv.port);
  GenerateOptions o;
  const size_t n = encode_input(f15(), f15().codec(), "我爱").size();
  const uint64_t one = decoding_need(f15().config(), n, 1, o, "rows").bytes,
                 four = decoding_need(f15().config(), n, 4, o, "rows").bytes;
  ASSERT_LT(one, four);
  set_memory_limit_for_testing((one + four) / 2);
  auto beam4 = cli.Post("/v1/generate", R"({"input": "我爱", "beam": 4})", "application/json");
  auto beam1 = cli.Post("/v1/generate", R"({"input": "我爱"})", "application/json");
  auto four_inputs = cli.Post("/v1/generate", R"({"inputs": ["我爱", "我爱", "我爱", "我爱"]})",
                              "application/json");
  set_memory_limit_for_testing(0);
  ASSERT_TRUE(beam4 && beam1 && four_inputs);
  EXPECT_EQ(beam4->status, 400) << beam4->body;
  const json j = json::parse(beam4->body, nullptr, false);
  EXPECT_EQ(j.value("field", ""), "beam") << beam4->body;
  for (const char* w : {"too large for this machine", "4 hypotheses", "test limit"})
    EXPECT_NE(j.value("error", "").find(w), std::string::npos) << w << " in " << beam4->body;
  EXPECT_EQ(four_inputs->status, 400) << four_inputs->body;
  EXPECT_EQ(json::parse(four_inputs->body, nullptr, false).value("field", ""), "inputs");
  ASSERT_EQ(beam1->status, 200) << beam1->body;
  EXPECT_EQ(serve_test::timeless(json::parse(beam1->body)), offline("我爱", o));
  auto again = cli.Post("/v1/generate", R"({"input": "我爱", "beam": 4})", "application/json");
  ASSERT_TRUE(again);
  EXPECT_EQ(again->status, 200) << again->body;
}

// A model loaded with --compute-type int8 says so in /v1/model and decodes what the same
// quantized model decodes offline.
TEST(Serve, ModelEndpointShowsTheComputeType) {
  static const InferenceModel int8 =
      InferenceModel::load(serve_test::f15_path(), WeightLayout::Decode, ComputeType::Int8);
  RunningServer srv(int8, test_options());
  EXPECT_EQ(get_json(srv.port, "/v1/model")["compute_type"], "int8");
  httplib::Client cli("127.0.0.1", srv.port);
  auto r = cli.Post("/v1/generate", R"({"input": "我爱", "max_new": 8})", "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  GenerateOptions o;
  o.max_new = 8;
  EXPECT_EQ(serve_test::timeless(json::parse(r->body)), offline("我爱", o, int8));
}

TEST(Serve, HealthAndModelEndpoints) {
  RunningServer srv(f15(), test_options());
  const json h = get_json(srv.port, "/healthz");
  EXPECT_EQ(h["status"], "ok");
  const json m = get_json(srv.port, "/v1/model");
  EXPECT_EQ(m["vocab_size"], 7);
  EXPECT_EQ(m["parameters"], 219);  // datasets/f15/README.md
  EXPECT_EQ(m["compute_type"], "f32");
  EXPECT_EQ(m["config"]["arch"], "decoder_only");
  EXPECT_EQ(m["limits"]["max_new"], 64);
  httplib::Client cli("127.0.0.1", srv.port);
  auto page = cli.Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_NE(page->body.find("/v1/generate"), std::string::npos);
  auto missing = cli.Get("/nope");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_TRUE(json::parse(missing->body).contains("error"));
  // A known endpoint asked with the wrong method: 405 naming the allowed ones, not 404.
  auto get_generate = cli.Get("/v1/generate");
  ASSERT_TRUE(get_generate);
  EXPECT_EQ(get_generate->status, 405);
  EXPECT_EQ(get_generate->get_header_value("Allow"), "POST");
  EXPECT_NE(json::parse(get_generate->body).value("error", "").find("GET is not allowed"),
            std::string::npos)
      << get_generate->body;
  auto post_health = cli.Post("/healthz", "{}", "application/json");
  ASSERT_TRUE(post_health);
  EXPECT_EQ(post_health->status, 405);
  EXPECT_EQ(post_health->get_header_value("Allow"), "GET, HEAD");
}

// Waits until /healthz reports `n` cancelled jobs (or 5 s pass).
bool wait_cancelled(int port, int n) {
  for (auto t0 = std::chrono::steady_clock::now(); std::chrono::steady_clock::now() - t0 < 5s;) {
    if (get_json(port, "/healthz").value("cancelled", -1) >= n) return true;
    std::this_thread::sleep_for(20ms);
  }
  return false;
}

// A client that goes away cancels its decoding (slowed to 40 ms per step so that it is still
// running): mid-stream and while waiting for a JSON answer.
TEST(Serve, ClientDisconnectCancelsItsRequest) {
  serve::ServerOptions o = test_options();
  o.before_step = [] { std::this_thread::sleep_for(40ms); };
  RunningServer srv(f15(), o);
  const std::string body = R"({"input": "我爱", "min_new": 12, "max_new": 12, "stream": true})";
  {
    RawSocket s(srv.port);
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE(s.send_all(serve_test::post_request(body)));
    std::string got;
    while (got.find("event: piece") == std::string::npos) ASSERT_GT(s.read_some(got), 0) << got;
  }  // closed after the first piece, ~11 steps early
  EXPECT_TRUE(wait_cancelled(srv.port, 1));
  {
    RawSocket s(srv.port);
    ASSERT_TRUE(
        s.send_all(serve_test::post_request(R"({"input": "我爱", "min_new": 12, "max_new": 12})")));
    std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(wait_cancelled(srv.port, 2));
  const json h = get_json(srv.port, "/healthz");
  EXPECT_EQ(h["completed"], 0);
  // The server still answers, with the whole text.
  httplib::Client cli("127.0.0.1", srv.port);
  auto res = cli.Post("/v1/generate", R"({"input": "我爱"})", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(json::parse(res->body)["text"], "学习！");
}

// One byte per second: the request is answered correctly, and others are served meanwhile. A
// client that stalls longer than the read timeout (3 s here) is disconnected.
TEST(Serve, SlowClientsAreServedOrTimedOut) {
  RunningServer srv(f15(), test_options());
  std::string answer;
  std::thread slow([&] {
    RawSocket s(srv.port, 20000);
    const std::string req = serve_test::post_request(R"({"input": "我爱", "max_new": 5})");
    ASSERT_TRUE(s.send_all(req.substr(0, req.size() - 4)));
    for (size_t k = req.size() - 4; k < req.size(); ++k) {
      std::this_thread::sleep_for(1s);
      ASSERT_TRUE(s.send_all(req.substr(k, 1)));
    }
    answer = s.read_all();
  });
  std::this_thread::sleep_for(500ms);
  const auto t0 = std::chrono::steady_clock::now();
  httplib::Client cli("127.0.0.1", srv.port);
  auto res = cli.Post("/v1/generate", R"({"input": "我"})", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s) << "blocked behind the slow client";
  slow.join();
  const size_t split = answer.find("\r\n\r\n");
  ASSERT_NE(split, std::string::npos) << answer;
  EXPECT_EQ(answer.rfind("HTTP/1.1 200", 0), 0u) << answer;
  GenerateOptions o;
  o.max_new = 5;
  EXPECT_EQ(serve_test::timeless(json::parse(answer.substr(split + 4))), offline("我爱", o));

  // Stalled mid-headers: the server closes the connection after its read timeout.
  RawSocket stalled(srv.port, 10000);
  ASSERT_TRUE(stalled.send_all("POST /v1/generate HTTP/1.1\r\nHost: x"));
  const auto t1 = std::chrono::steady_clock::now();
  std::string got;
  const ssize_t n = stalled.read_some(got);
  const auto waited = std::chrono::steady_clock::now() - t1;
  // Closed, or answered 408 naming the timeout (the request never completed) and then closed.
  if (n > 0) {
    EXPECT_EQ(got.rfind("HTTP/1.1 408", 0), 0u) << got;
    EXPECT_NE(got.find("--read-timeout-ms"), std::string::npos) << got;
    while (stalled.read_some(got) > 0) {
    }
    EXPECT_EQ(stalled.read_some(got), 0) << "still open after the answer";
  }
  EXPECT_GE(waited, 2s);
  EXPECT_LT(waited, 8s);
  EXPECT_EQ(get_json(srv.port, "/healthz")["status"], "ok");
}

// The status and the JSON body of a raw HTTP answer (status 0 when there was none).
std::pair<int, json> raw_answer(const std::string& answer) {
  const size_t split = answer.find("\r\n\r\n");
  if (answer.rfind("HTTP/1.1 ", 0) != 0 || split == std::string::npos) return {0, json()};
  return {std::atoi(answer.c_str() + 9), json::parse(answer.substr(split + 4), nullptr, false)};
}

// The "error" of an answer's JSON body ("" when it has none).
std::string error_of(const json& j) {
  return j.is_object() ? j.value("error", "") : "";
}

std::pair<int, json> send_raw(int port, const std::string& request) {
  RawSocket s(port, 10000);
  if (!s.ok() || !s.send_all(request)) return {0, json()};
  return raw_answer(s.read_all());
}

// Requests httplib refused with a bare {"error":"HTTP error 400"} get their cause; framings
// that could be read two ways (request smuggling) are refused; a chunked body is read.
TEST(Serve, MalformedHttpIsAnsweredWithItsCause) {
  RunningServer srv(f15(), test_options());
  const std::string post = "POST /v1/generate HTTP/1.1\r\nHost: x\r\nConnection: close\r\n";
  const std::string body = R"({"input": "我爱"})";
  const std::string length = "Content-Length: " + std::to_string(body.size()) + "\r\n";
  const std::vector<std::tuple<std::string, int, std::string>> cases = {
      {post + "Content-Length: -5\r\n\r\n" + body, 400, "Content-Length '-5' is not a length"},
      {post + length + "Content-Length: 7\r\n\r\n" + body, 400,
       "two different Content-Length headers"},
      {post + length + "Transfer-Encoding: chunked\r\n\r\n" + body, 400,
       "both Transfer-Encoding and Content-Length"},
      {post + "Transfer-Encoding: gzip\r\n\r\n" + body, 501, "Transfer-Encoding 'gzip'"},
      {post + length + "Content-Encoding: gzip\r\n\r\n" + body, 415,
       "Content-Encoding 'gzip' is not accepted"},
      {"POST /v1/generate HTTP/1.1\nHost: x\n" + length + "\n" + body, 400, "bare LF"},
      {post + "Transfer-Encoding: chunked\r\n\r\nzz\r\n" + body + "\r\n0\r\n\r\n", 400,
       "size 'zz' is not a hexadecimal number"},
      {post + "Transfer-Encoding: chunked\r\n\r\n3\r\n" + body + "\r\n0\r\n\r\n", 400,
       "does not end in CRLF after its 3 bytes"},
      {post + "X-Big: " + std::string(1 << 20, 'a') + "\r\n\r\n", 431,
       "the request head is more than 16384 bytes"},
      {post + "Bad Name: 1\r\n" + length + "\r\n" + body, 400, "is not NAME: VALUE"},
      {"POST /v1/generate HTTP/2.0\r\n\r\n", 505, "HTTP version 'HTTP/2.0'"},
      {"GET /" + std::string(9000, 'a') + " HTTP/1.1\r\nConnection: close\r\n\r\n", 414,
       "the request line is longer than 8192 bytes"},
  };
  for (const auto& [request, status, cause] : cases) {
    const auto [got, j] = send_raw(srv.port, request);
    EXPECT_EQ(got, status) << request.substr(0, 200) << " → " << j.dump();
    EXPECT_NE(error_of(j).find(cause), std::string::npos)
        << request.substr(0, 200) << " → " << j.dump();
  }
  // A well-formed chunked body (two chunks) is read as the same request.
  const std::string chunked = post + "Transfer-Encoding: chunked\r\n\r\n5\r\n" + body.substr(0, 5) +
                              "\r\n" +
                              [&] {
                                char hex[16];
                                std::snprintf(hex, sizeof hex, "%zx", body.size() - 5);
                                return std::string(hex);
                              }() +
                              "\r\n" + body.substr(5) + "\r\n0\r\n\r\n";
  const auto [status, answer] = send_raw(srv.port, chunked);
  ASSERT_EQ(status, 200) << answer.dump();
  EXPECT_EQ(serve_test::timeless(answer), offline("我爱", GenerateOptions{}));
}

// A client that half-closes once its request is sent (shutdown(SHUT_WR), as `nc -N` does)
// still gets its answer, JSON or streamed, and its request counts as completed, not cancelled.
// Steps are slowed to 40 ms so that the server sees the half-close while it decodes.
TEST(Serve, HalfClosedClientGetsItsAnswer) {
  serve::ServerOptions o = test_options();
  o.before_step = [] { std::this_thread::sleep_for(40ms); };
  RunningServer srv(f15(), o);
  for (const bool stream : {false, true}) {
    RawSocket s(srv.port);
    ASSERT_TRUE(s.ok());
    ASSERT_TRUE(s.send_all(serve_test::post_request(stream ? R"({"input": "我爱", "stream": true})"
                                                           : R"({"input": "我爱"})")));
    s.shutdown_write();
    const std::string answer = s.read_all();
    const size_t at = answer.find("HTTP/1.1 200");
    ASSERT_NE(at, std::string::npos) << "stream " << stream << ": " << answer;
    if (stream) {
      EXPECT_NE(answer.find("event: done"), std::string::npos) << answer;
      EXPECT_NE(answer.find(R"("text":"学习！")"), std::string::npos) << answer;
      EXPECT_NE(answer.find("event: end"), std::string::npos) << answer;
    } else {
      const size_t split = answer.find("\r\n\r\n", at);
      ASSERT_NE(split, std::string::npos) << answer;
      EXPECT_EQ(serve_test::timeless(json::parse(answer.substr(split + 4))),
                offline("我爱", GenerateOptions{}));
    }
  }
  const json h = get_json(srv.port, "/healthz");
  EXPECT_EQ(h["completed"], 2);
  EXPECT_EQ(h["cancelled"], 0);
}

// Slowloris: 40 connections from one address each send a header line every 500 ms. The
// server's 16 connection slots would all be theirs; instead one address holds at most 8 (the
// others get 503 at once) and each request must arrive within 2 s (408 after). A client at
// another address polls /healthz meanwhile: every poll is answered within 1.5 s. Bounded: the
// slow clients give up after 4 s.
TEST(Serve, SlowClientsCannotLockOutTheOthers) {
  serve::ServerOptions o = test_options();
  o.http_threads = 16;
  o.max_client_connections = 8;
  o.request_timeout_ms = 2000;
  RunningServer srv(f15(), o);
  std::atomic<int> timed_out{0}, refused{0}, other{0};
  std::vector<std::thread> slow;
  for (int c = 0; c < 40; ++c)
    slow.emplace_back([&] {
      RawSocket s(srv.port, 500);
      if (!s.ok()) return;
      std::string got;
      s.send_all("GET /healthz HTTP/1.1\r\nHost: x\r\n");
      for (int k = 0; k < 8 && s.send_all("X-Slow: " + std::to_string(k) + "\r\n"); ++k)
        if (s.read_some(got) == 0 || !got.empty()) break;  // waits 500 ms unless answered
      while (s.read_some(got) > 0) {
      }
      const int status = raw_answer(got).first;
      ++(status == 408 ? timed_out : status == 503 ? refused : other);
    });
  int polls = 0, failed = 0;
  std::string failures;
  std::this_thread::sleep_for(300ms);
  for (; polls < 10; ++polls) {
    const auto t0 = std::chrono::steady_clock::now();
    RawSocket p(srv.port, 1500, "127.0.0.2");
    ASSERT_TRUE(p.ok()) << "cannot connect from 127.0.0.2";
    p.send_all("GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    const std::string got = p.read_all();
    if (raw_answer(got).first != 200 || std::chrono::steady_clock::now() - t0 > 1500ms)
      ++failed, failures += "poll " + std::to_string(polls) + ": '" + got.substr(0, 80) + "'\n";
    std::this_thread::sleep_for(250ms);
  }
  for (auto& t : slow) t.join();
  EXPECT_EQ(failed, 0) << failures;
  EXPECT_GE(refused.load(), 24);   // over the per-client cap
  EXPECT_GE(timed_out.load(), 8);  // past the request deadline
  EXPECT_EQ(other.load(), 0);
}

// A request's head and body must arrive within the request deadline (2 s here), however
// steadily the bytes trickle in: a header line or a body byte every 300 ms is cut with 408
// naming --request-timeout-ms. Bounded: the clients give up after 6 s.
TEST(Serve, RequestDeadlineCutsSlowHeadsAndBodies) {
  serve::ServerOptions o = test_options();
  o.request_timeout_ms = 2000;
  RunningServer srv(f15(), o);
  const std::vector<std::pair<std::string, std::string>> trickles = {
      {"POST /v1/generate HTTP/1.1\r\n", "X-Slow: 1\r\n"},
      {"POST /v1/generate HTTP/1.1\r\nContent-Length: 100\r\n\r\n", " "}};
  for (const auto& [start, each] : trickles) {
    RawSocket s(srv.port, 300);
    ASSERT_TRUE(s.send_all(start));
    const auto t0 = std::chrono::steady_clock::now();
    std::string got;
    while (std::chrono::steady_clock::now() - t0 < 6s && s.send_all(each))
      if (s.read_some(got) == 0 || !got.empty()) break;
    while (s.read_some(got) > 0) {
    }
    const auto waited = std::chrono::steady_clock::now() - t0;
    const auto [status, j] = raw_answer(got);
    EXPECT_EQ(status, 408) << start << got;
    EXPECT_NE(error_of(j).find("--request-timeout-ms"), std::string::npos) << got;
    EXPECT_GE(waited, 1500ms);
    EXPECT_LT(waited, 4s);
  }
}

// stop() does not wait for a client still sending its request (a header line every 500 ms):
// the read gives up with 503 (and Retry-After), and stop() returns within a second and a half.
// Bounded: the client gives up after 4 s.
TEST(Serve, StopDoesNotWaitForAClientStillSendingItsRequest) {
  RunningServer srv(f15(), test_options());
  std::string got;
  std::thread slow([&] {
    RawSocket s(srv.port, 500);
    s.send_all("POST /v1/generate HTTP/1.1\r\n");
    for (int k = 0; k < 8 && s.send_all("X-Slow: 1\r\n"); ++k)
      if (s.read_some(got) == 0 || !got.empty()) break;
    while (s.read_some(got) > 0) {
    }
  });
  std::this_thread::sleep_for(700ms);
  const auto t0 = std::chrono::steady_clock::now();
  srv.stop();
  const auto took = std::chrono::steady_clock::now() - t0;
  slow.join();
  EXPECT_LT(took, 1500ms);
  EXPECT_EQ(raw_answer(got).first, 503) << got;
  EXPECT_NE(got.find("Retry-After: 1"), std::string::npos) << got;
}

// A full queue answers 503 at once; the queued work still completes.
TEST(Serve, FullQueueAnswers503) {
  serve::ServerOptions o = test_options();
  o.queue = 1;
  o.before_step = [] { std::this_thread::sleep_for(30ms); };
  RunningServer srv(f15(), o);
  std::thread first([&] {
    httplib::Client c("127.0.0.1", srv.port);
    auto r = c.Post("/v1/generate", R"({"input": "我爱", "min_new": 10, "max_new": 10})",
                    "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(json::parse(r->body)["stop_reason"], "length");
  });
  while (get_json(srv.port, "/healthz").value("running", 0) == 0) std::this_thread::sleep_for(5ms);
  httplib::Client c("127.0.0.1", srv.port);
  auto r = c.Post("/v1/generate", R"({"input": "我"})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_TRUE(json::parse(r->body).contains("error"));
  EXPECT_EQ(r->get_header_value("Retry-After"), "1");
  first.join();
  EXPECT_EQ(get_json(srv.port, "/healthz")["rejected"], 1);
}

// A debug request (no_cache, a beam of 4, 14 forced tokens: decoded alone, every step a full
// recompute) does not stall the shared loop: a 5-token greedy request sent while it runs
// finishes first. Both answers are the offline ones. Steps are slowed to 30 ms so that the
// debug request takes its 14 steps' time whatever the machine.
TEST(Serve, DebugRequestDoesNotStallTheOthers) {
  serve::ServerOptions o = test_options();
  o.before_step = [] { std::this_thread::sleep_for(30ms); };
  RunningServer srv(f15(), o);
  std::atomic<int> finished{0};
  int debug_rank = 0, greedy_rank = 0;
  json debug_answer, greedy_answer;
  const auto post = [&](const std::string& body, json& answer, int& rank) {
    httplib::Client c("127.0.0.1", srv.port);
    c.set_read_timeout(30, 0);
    auto r = c.Post("/v1/generate", body, "application/json");
    rank = ++finished;
    if (r && r->status == 200) answer = json::parse(r->body);
  };
  std::thread debug([&] {
    post(R"({"input": "我爱", "no_cache": true, "beam": 4, "min_new": 14, "max_new": 14})",
         debug_answer, debug_rank);
  });
  while (get_json(srv.port, "/healthz").value("steps", 0) < 2) std::this_thread::sleep_for(5ms);
  std::thread greedy([&] { post(R"({"input": "我", "max_new": 5})", greedy_answer, greedy_rank); });
  greedy.join();
  debug.join();
  EXPECT_EQ(greedy_rank, 1) << "the greedy request waited for the debug one";
  EXPECT_EQ(debug_rank, 2);
  GenerateOptions g;
  g.max_new = 5;
  EXPECT_EQ(serve_test::timeless(greedy_answer), offline("我", g));
  GenerateOptions d;
  d.use_cache = false;
  d.beam = 4;
  d.min_new = d.max_new = 14;
  EXPECT_EQ(serve_test::timeless(debug_answer), offline("我爱", d));
}

// stop(): in-flight work past the drain deadline is cancelled (and answered), new work refused.
TEST(Serve, StopCancelsInFlightWorkAfterTheDeadline) {
  serve::ServerOptions o = test_options();
  o.before_step = [] { std::this_thread::sleep_for(50ms); };
  RunningServer srv(f15(), o);
  json answer;
  std::thread client([&] {
    httplib::Client c("127.0.0.1", srv.port);
    auto r = c.Post("/v1/generate", R"({"input": "我爱", "min_new": 12, "max_new": 12})",
                    "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200);
    answer = json::parse(r->body);
  });
  while (get_json(srv.port, "/healthz").value("running", 0) == 0) std::this_thread::sleep_for(5ms);
  const auto t0 = std::chrono::steady_clock::now();
  srv.stop(150ms);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  client.join();
  EXPECT_EQ(answer["stop_reason"], "cancelled");
  EXPECT_LT(answer["tokens"].size(), 12u);
}

// The answers equal what the `seqtape generate --json` binary prints (timing aside).
TEST(Serve, AnswersEqualTheGenerateCommand) {
  RunningServer srv(f15(), test_options());
  httplib::Client cli("127.0.0.1", srv.port);
  const std::vector<std::pair<std::string, json>> cases = {
      {"--input 我爱", {{"input", "我爱"}}},
      {"--input 我 --beam 3 --n-best 2 --max-new 6",
       {{"input", "我"}, {"beam", 3}, {"n_best", 2}, {"max_new", 6}}},
      {"--input 爱学习 --sample --seed 7 --temperature 1.5 --max-new 9",
       {{"input", "爱学习"}, {"sample", true}, {"seed", 7}, {"temperature", 1.5}, {"max_new", 9}}},
      {"--input 我爱 --suppress ！ --stop 学 --max-new 5",
       {{"input", "我爱"}, {"suppress", {"！"}}, {"stop", {"学"}}, {"max_new", 5}}},
      {"--input 我 --sample --seed 7 --num-samples 3 --max-new 6",
       {{"input", "我"}, {"sample", true}, {"seed", 7}, {"num_samples", 3}, {"max_new", 6}}},
  };
  for (const auto& [flags, body] : cases) {
    const std::string cmd = std::string(SEQTAPE_CLI_PATH) + " generate --json --model " +
                            serve_test::f15_path() + " " + flags + " 2>/dev/null";
    FILE* p = popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr);
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    ASSERT_EQ(pclose(p), 0) << cmd;
    auto res = cli.Post("/v1/generate", body.dump(), "application/json");
    ASSERT_TRUE(res);
    ASSERT_EQ(res->status, 200) << res->body;
    EXPECT_EQ(serve_test::timeless(json::parse(res->body)), serve_test::timeless(json::parse(out)))
        << cmd;
  }
}

// ---- the continuous scheduler alone ---------------------------------------------------------

std::shared_ptr<serve::Job> make_job(const std::vector<std::string>& texts,
                                     const GenerateOptions& o) {
  auto job = std::make_shared<serve::Job>();
  job->texts = texts;
  for (const std::string& t : texts) job->inputs.push_back(encode_input(f15(), f15().codec(), t));
  job->options = o;
  return job;
}

// Exactly the offline decode of the job's input b (generate() alone), score to the bit.
std::string differs_from_offline(const serve::Job& job, size_t b) {
  const GenerateResult want = generate(f15(), {job.inputs[b]}, job.options).at(0);
  const GenerateResult& got = job.results.at(b);
  const json j_got = serve_test::timeless(result_json(job.texts[b], 0, got, job.options, 0.0));
  const json j_want = serve_test::timeless(result_json(job.texts[b], 0, want, job.options, 0.0));
  return j_got == j_want ? "" : "got " + j_got.dump() + " want " + j_want.dump();
}

GenerateOptions greedy_options(int64_t n) {
  GenerateOptions o;
  o.min_new = o.max_new = n;
  return o;
}

GenerateOptions sampling_options(uint64_t seed, int64_t n) {
  GenerateOptions o = greedy_options(n);
  o.sample = true;
  o.seed = seed;
  o.temperature = 1.4;
  return o;
}

GenerateOptions beam_options(int64_t n) {
  GenerateOptions o;
  o.beam = 3;
  o.n_best = 3;
  o.max_new = n;
  o.length_penalty = 0.6;
  return o;
}

// Both schedulers alone: FIFO and bounded (capacity 3; the serial one, and the continuous one
// with one row, decode one job while two wait); a shutdown past its deadline cancels the
// running job and the queued ones (each still gets a result and is finished); later
// submissions are refused. `steps` counts the model calls of `sched`, each slowed to 20 ms.
void expect_drains_then_cancels(serve::Scheduler& sched, const std::atomic<int>& steps) {
  std::vector<std::shared_ptr<serve::Job>> jobs;
  for (int i = 0; i < 4; ++i) {
    auto job = make_job({"我爱"}, greedy_options(12));
    const bool taken = sched.submit(job);
    EXPECT_EQ(taken, i < 3) << i;  // capacity 3
    if (taken) jobs.push_back(job);
  }
  while (sched.stats().running == 0) std::this_thread::sleep_for(2ms);
  EXPECT_EQ(sched.stats().queued, 2);  // one at a time: the others wait
  sched.shutdown(std::chrono::steady_clock::now() + 50ms);
  for (const auto& job : jobs) {
    EXPECT_TRUE(job->done());
    ASSERT_EQ(job->results.size(), 1u);
    EXPECT_EQ(job->results[0].stop_reason, StopReason::Cancelled);
  }
  EXPECT_LT(jobs[0]->results[0].tokens.size(), 12u);
  EXPECT_TRUE(jobs[2]->results[0].tokens.empty());  // never started
  EXPECT_LT(steps.load(), 12);
  auto late = make_job({"我"}, GenerateOptions{});
  EXPECT_FALSE(sched.submit(late));
  const serve::SchedulerStats st = sched.stats();
  EXPECT_EQ(st.cancelled, 3);
  EXPECT_EQ(st.completed, 0);
  EXPECT_EQ(st.rejected, 2);
  EXPECT_EQ(st.queued, 0);
  EXPECT_EQ(st.running, 0);
}

// A model whose text goes through SentencePiece (a few steps of `seqtape train --vocab`, served
// from its run directory) reads each request with its own SentencePiece model, as generate
// does: spaces are pieces' "▁", not unknown characters.
TEST(Serve, SubwordModelReadsRequestsThroughItsSentencePieceModel) {
  test_util::TempDir dir("serve_subword");
  std::string tsv;
  for (const std::string& p : test_util::german_phrases()) tsv += p + "\t" + p + "\n";
  std::FILE* f = std::fopen(dir.file("data.tsv").c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs(tsv.c_str(), f);
  std::fclose(f);
  const std::string cli = SEQTAPE_CLI_PATH, quiet = " >/dev/null 2>&1";
  command_output(cli + " vocab --data " + dir.file("data.tsv") +
                 " --type unigram --size 40 --out " + dir.file("v") + quiet);
  command_output(cli + " train --data " + dir.file("data.tsv") + " --vocab " + dir.file("v") +
                 " --preset seed --steps 3 --batch 8 --out " + dir.file("run") + quiet);
  const InferenceModel m = load_model(dir.file("run"));
  ASSERT_EQ(m.codec().kind(), "sentencepiece");
  const std::string text = "ein Haus und kein Garten";
  const std::vector<int32_t> ids = encode_input(m, m.codec(), text);
  ASSERT_NE(ids, encode_input(m, CharCodec(m.vocab()), text))
      << "the test needs a text the character tokenizer reads differently";

  RunningServer srv(m, test_options());
  httplib::Client client("127.0.0.1", srv.port);
  GenerateOptions o;
  o.max_new = o.min_new = 6;  // an undertrained model: six tokens whatever it prefers
  const json body = {{"input", text}, {"max_new", 6}, {"min_new", 6}};
  auto res = client.Post("/v1/generate", body.dump(), "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const json got = json::parse(res->body);
  EXPECT_EQ(got["unk"], 0);
  const GenerateResult r = generate(m, {ids}, o).at(0);
  EXPECT_EQ(serve_test::timeless(got),
            serve_test::timeless(result_json(text, unk_count(m.vocab(), ids), r, o, 0.0)));
  const std::string offline =
      command_output(cli + " generate --json --model " + dir.file("run") + " --input '" + text +
                     "' --max-new 6 --min-new 6 2>/dev/null");
  EXPECT_EQ(serve_test::timeless(got), serve_test::timeless(json::parse(offline)));
}

TEST(Serve, SerialSchedulerDrainsThenCancels) {
  std::atomic<int> steps{0};
  serve::SerialScheduler sched(f15(), 3, [&] {
    ++steps;
    std::this_thread::sleep_for(20ms);
  });
  expect_drains_then_cancels(sched, steps);
}

TEST(Serve, ContinuousSchedulerDrainsThenCancels) {
  std::atomic<int> steps{0};
  serve::ContinuousScheduler sched(f15(), 3, /*max_batch=*/1, [&] {
    ++steps;
    std::this_thread::sleep_for(20ms);
  });
  expect_drains_then_cancels(sched, steps);
}

// Jobs submitted while others decode join the running batch at the next step: greedy,
// seeded sampling, beam and a two-input job share steps, and each input equals the offline
// decode alone, score to the bit. A job cancelled mid-flight stops with stop reason cancelled
// and leaves the others intact.
TEST(Serve, ContinuousSchedulerJoinsMidFlightAndCancelsOneRowAlone) {
  GenerateOptions top_k = sampling_options(11, 9);
  top_k.top_k = 3;
  std::vector<std::shared_ptr<serve::Job>> jobs = {
      make_job({"我爱"}, greedy_options(12)),         // submitted first
      make_job({"爱学习"}, sampling_options(7, 10)),  // at step 2
      make_job({"我"}, beam_options(8)),              // at step 3
      make_job({"学习", "我爱学习"}, top_k),          // at step 3
      make_job({"爱"}, sampling_options(3, 12)),      // at step 4, cancelled at step 7
      make_job({"我爱我"}, greedy_options(9))};       // at step 6
  std::atomic<serve::Scheduler*> sched_ptr{nullptr};
  int step = 0;
  auto at_step = [&] {  // on the decoding thread, before every model call
    ++step;
    serve::Scheduler* s = sched_ptr.load();
    if (step == 2) s->submit(jobs[1]);
    if (step == 3) s->submit(jobs[2]), s->submit(jobs[3]);
    if (step == 4) s->submit(jobs[4]);
    if (step == 6) s->submit(jobs[5]);
    if (step == 7) jobs[4]->cancel = true;
  };
  serve::ContinuousScheduler sched(f15(), 16, /*max_batch=*/32, [&] { at_step(); });
  sched_ptr = &sched;
  ASSERT_TRUE(sched.submit(jobs[0]));
  for (const auto& job : jobs) ASSERT_TRUE(job->wait_done(10s));
  int64_t alone_steps = 0;
  for (size_t j = 0; j < jobs.size(); ++j) {
    ASSERT_TRUE(jobs[j]->error.empty()) << jobs[j]->error;
    ASSERT_EQ(jobs[j]->results.size(), jobs[j]->inputs.size());
    for (size_t b = 0; b < jobs[j]->inputs.size(); ++b) {
      if (j == 4) continue;
      EXPECT_EQ(differs_from_offline(*jobs[j], b), "") << "job " << j << " input " << b;
      alone_steps += int64_t(jobs[j]->results[b].cache_lengths.size());
    }
  }
  const GenerateResult& cut = jobs[4]->results[0];
  EXPECT_EQ(cut.stop_reason, StopReason::Cancelled);
  EXPECT_LT(cut.tokens.size(), 12u);
  EXPECT_GT(cut.tokens.size(), 0u);
  const serve::SchedulerStats st = sched.stats();
  EXPECT_EQ(st.completed, 5);
  EXPECT_EQ(st.cancelled, 1);
  EXPECT_LT(st.steps, alone_steps / 2) << "the jobs should have shared most steps";
}

// A long request of many beam inputs cannot starve a short greedy one that arrives after it:
// the greedy job joins while the beam job still has most of its inputs to admit (they used to
// be admitted first, all of them), and both answers stay exactly the offline ones.
TEST(Serve, ContinuousSchedulerLetsAShortJobPastALongBeamJob) {
  GenerateOptions beam = beam_options(8);
  beam.min_new = 8;  // every beam input takes 8 steps
  std::vector<std::string> texts;
  for (int i = 0; i < 12; ++i) texts.push_back(i % 2 ? "我爱" : "学习");
  auto big = make_job(texts, beam);  // 12 inputs x 3 rows: 4 waves of 2 inputs in 6 rows
  std::atomic<size_t> big_done{0};
  big->on_input_done = [&](size_t) { ++big_done; };
  auto small = make_job({"我"}, greedy_options(3));
  // Read on the decoding thread as the greedy job ends (the test's thread may wake later).
  std::atomic<size_t> big_done_then{99};
  small->on_input_done = [&](size_t) { big_done_then = big_done.load(); };
  std::atomic<serve::Scheduler*> sched_ptr{nullptr};
  std::atomic<int> step{0};
  serve::ContinuousScheduler sched(f15(), 4, /*max_batch=*/6, [&] {
    if (++step == 2) sched_ptr.load()->submit(small);
  });
  sched_ptr = &sched;
  ASSERT_TRUE(sched.submit(big));
  ASSERT_TRUE(small->wait_done(20s));
  ASSERT_TRUE(big->wait_done(20s));
  ASSERT_TRUE(small->error.empty() && big->error.empty());
  EXPECT_EQ(differs_from_offline(*small, 0), "");
  for (size_t b = 0; b < texts.size(); ++b) EXPECT_EQ(differs_from_offline(*big, b), "") << b;
  EXPECT_LE(big_done_then.load(), 4u) << "the greedy job waited for most of the beam job";
}

// The server with either scheduler (and the default, continuous) reports which one runs.
TEST(Serve, SchedulerIsChosenByTheOptions) {
  for (const std::string kind : {"continuous", "serial"}) {
    serve::ServerOptions o = test_options();
    o.scheduler = kind;
    RunningServer srv(f15(), o);
    EXPECT_EQ(get_json(srv.port, "/healthz")["scheduler"], kind);
    httplib::Client cli("127.0.0.1", srv.port);
    auto res = cli.Post("/v1/generate", R"({"input": "我爱"})", "application/json");
    ASSERT_TRUE(res);
    EXPECT_EQ(json::parse(res->body)["text"], "学习！") << kind;
  }
  EXPECT_EQ(serve::ServerOptions{}.scheduler, "continuous");
  EXPECT_THROW(serve::make_scheduler("batched", f15(), 4, 4), Error);
}

// `seqtape serve --scheduler/--max-batch`: bad values are usage errors (exit 2, a plain
// message, before the model is loaded); --help documents both.
TEST(Serve, CommandChecksSchedulerMaxBatchAndLimits) {
  const auto run = [](const std::string& flags) {
    const std::string cmd = std::string(SEQTAPE_CLI_PATH) + " serve --model " +
                            serve_test::f15_path() + " --port 0 " + flags + " 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    std::string out;
    char buf[4096];
    size_t n;
    while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    const int status = pclose(p);
    return std::make_pair(WIFEXITED(status) ? WEXITSTATUS(status) : -1, out);
  };
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"--scheduler batched", "--scheduler must be continuous or serial, got 'batched'"},
      {"--max-batch 0", "--max-batch must be in [1, 4096], got 0"},
      {"--max-batch 5000", "--max-batch must be in [1, 4096], got 5000"},
      {"--max-batch -3", "--max-batch must be in [1, 4096], got -3"},
      {"--max-batch many", "--max-batch"},
      {"--scheduler serial --max-batch 4", "--max-batch applies to --scheduler continuous only"},
      // the unsigned limits took -1 as 2^64 - 1: --http-threads -1 (then --threads) started
      // threads until none were left
      {"--http-threads -1", "--http-threads: must be an integer in [2, 4096], got -1"},
      {"--http-threads 5000", "--http-threads: must be an integer in [2, 4096], got 5000"},
      {"--threads 8", "serve has no --threads: connections served at once is --http-threads"},
      {"--queue -1", "--queue: must be an integer in [1, 1048576], got -1"},
      {"--max-body 0", "--max-body: must be an integer in [1, 1073741824], got 0"},
      {"--max-input -5", "--max-input: must be an integer in [1, 1073741824], got -5"},
      {"--max-inputs 99999999999999999999", "--max-inputs: must be an integer in [1, 4096]"},
      {"--beam-limit 5000", "--beam-limit: must be an integer in [1, 4096], got 5000"},
      {"--max-new-limit 0", "--max-new-limit: must be an integer in [1, 1048576], got 0"},
      {"--drain-ms -1", "--drain-ms: must be an integer in [0, 86400000], got -1"},
      {"--read-timeout-ms 0", "--read-timeout-ms: must be an integer in [1, 86400000], got 0"},
      {"--request-timeout-ms 0",
       "--request-timeout-ms: must be an integer in [1, 86400000], got 0"},
      {"--max-client-connections 0",
       "--max-client-connections: must be an integer in [1, 1024], got 0"}};
  for (const auto& [flags, message] : bad) {
    const auto [code, out] = run(flags);
    EXPECT_EQ(code, 2) << flags << ": " << out;
    EXPECT_NE(out.find(message), std::string::npos) << flags << ": " << out;
    EXPECT_EQ(out.find("serving"), std::string::npos) << flags << ": " << out;
  }
  const auto [code, help] = run("--help");
  EXPECT_EQ(code, 0);
  for (const char* f : {"--scheduler", "--max-batch", "continuous", "serial"})
    EXPECT_NE(help.find(f), std::string::npos) << f << " not in --help:\n" << help;
}

// `seqtape serve --model f15 --port 0 <extra>` as a child process: what it printed up to and
// including its "port N" line, and the port (0 when it exited first).
struct SpawnedServe {
  pid_t pid = -1;
  std::string printed;
  int port = 0;
  explicit SpawnedServe(const std::vector<std::string>& extra) {
    int out[2];
    if (pipe(out) != 0) return;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, out[1], 1);
    posix_spawn_file_actions_addclose(&fa, out[0]);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    std::vector<std::string> args = {SEQTAPE_CLI_PATH,       "serve",  "--model",
                                     serve_test::f15_path(), "--port", "0"};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (posix_spawn(&pid, SEQTAPE_CLI_PATH, &fa, nullptr, argv.data(), environ) != 0) pid = -1;
    posix_spawn_file_actions_destroy(&fa);
    close(out[1]);
    char c;
    while (pid > 0 && port == 0 && read(out[0], &c, 1) == 1) {
      printed += c;
      const size_t at = printed.find("port ");
      if (c == '\n' && at != std::string::npos && printed.find('\n', at) == printed.size() - 1)
        port = std::atoi(printed.c_str() + at + 5);
    }
    close(out[0]);
  }
  // SIGTERM, then waits up to 10 s: the exit status, or -1 (killed) when it did not stop.
  int stop() {
    if (pid <= 0) return -1;
    kill(pid, SIGTERM);
    int status = 0;
    pid_t done = 0;
    for (int i = 0; i < 200 && done == 0; ++i) {
      done = waitpid(pid, &status, WNOHANG);
      if (done == 0) std::this_thread::sleep_for(50ms);
    }
    if (done == 0) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      status = -1;
    }
    pid = -1;
    return status;
  }
  ~SpawnedServe() { stop(); }
};

// The binary: --port 0 prints the port; SIGTERM lets the in-flight request finish (drain 5 s),
// answers it and exits 0. /v1/model names the model file, not the server's path to it.
TEST(Serve, CommandPrintsItsPortAndStopsOnSigterm) {
  SpawnedServe child({"--drain-ms", "5000"});
  const int port = child.port;
  ASSERT_GT(port, 0) << child.printed;
  EXPECT_NE(child.printed.find("http://127.0.0.1:" + std::to_string(port) + "/"), std::string::npos)
      << child.printed;
  EXPECT_EQ(get_json(port, "/healthz")["status"], "ok");
  EXPECT_EQ(get_json(port, "/v1/model")["model"], "checkpoint.bin");
  json answer;
  std::thread client([&] {
    httplib::Client cli("127.0.0.1", port);
    auto r = cli.Post("/v1/generate", R"({"input": "我爱"})", "application/json");
    if (r && r->status == 200) answer = json::parse(r->body);
  });
  client.join();
  const int status = child.stop();
  ASSERT_NE(status, -1) << "seqtape serve did not stop within 10 s of SIGTERM";
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(answer.value("text", ""), "学习！");
}

// --http-threads defaults to 128, or to --max-batch when that is larger: every row of a full
// batch can have its client connected.
TEST(Serve, HttpThreadsDefaultIsAtLeastMaxBatch) {
  for (const auto& [flags, threads] : std::vector<std::pair<std::vector<std::string>, int>>{
           {{}, 128}, {{"--max-batch", "300"}, 300}, {{"--http-threads", "40"}, 40}}) {
    SpawnedServe child(flags);
    ASSERT_GT(child.port, 0) << child.printed;
    EXPECT_EQ(get_json(child.port, "/v1/model")["http_threads"], threads)
        << testing::PrintToString(flags);
  }
}

// An IPv6 host is printed in brackets, as a URL needs it.
TEST(Serve, CommandPrintsAnIpv6HostInBrackets) {
  SpawnedServe child({"--host", "::1"});
  if (child.port == 0) GTEST_SKIP() << "no IPv6 loopback here: " << child.printed;
  EXPECT_NE(child.printed.find("http://[::1]:" + std::to_string(child.port) + "/"),
            std::string::npos)
      << child.printed;
}

// The playground page in headless Chromium (tests/serve/playground_test.mjs), against a server
// slowed to 300 ms per step so that the streaming is visible.
TEST(Serve, PlaygroundStreamsInHeadlessChromium) {
  const char* chromium_env = std::getenv("SEQTAPE_CHROMIUM");
  const std::string chromium = chromium_env ? chromium_env : "/usr/bin/chromium";
  if (access(chromium.c_str(), X_OK) != 0)
    GTEST_SKIP() << chromium << " is not installed (scripts/setup.sh installs Debian's chromium)";
  serve::ServerOptions o = test_options();
  o.before_step = [] { std::this_thread::sleep_for(300ms); };
  RunningServer srv(f15(), o);
  const std::string cmd =
      "node '" + std::string(SEQTAPE_SOURCE_DIR) +
      "/tests/serve/playground_test.mjs' --url http://127.0.0.1:" + std::to_string(srv.port) +
      "/ 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = pclose(p);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (code == 77) GTEST_SKIP() << out;
  EXPECT_EQ(code, 0) << out;
  std::printf("%s", out.c_str());
}

}  // namespace
}  // namespace seqtape
