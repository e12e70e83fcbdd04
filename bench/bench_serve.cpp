// seqtape serve under load: in-process Servers on 127.0.0.1 (free ports) over the medium
// configuration (C 256, H 4, 3+3 layers, F 1024, V 64; random-init weights, as bench_decode),
// with 1, 8, 32 and 64 concurrent clients. Each request decodes exactly 8, 16, 32 or 64 tokens
// greedily (min_new = max_new; mixed lengths, in turn) from a 31-token source; every client sends
// its requests back to back.
// Reports requests/s and p50 / p99 latency for the serial scheduler (one request at a time) and
// the continuous one (every request's row stepped in one model call, --max-batch 32), run back
// to back at each client count, and the continuous/serial ratios of the same run. Last, a
// greedy request's latency beside a debug request (no_cache, beam 8) against its latency alone.
//
//   build/bench/bench_serve [requests per client at 1 client, default 40]
//
// Dimension key: C d_model, H heads, F d_ff, V vocabulary.
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "infer/model.h"
#include "serve/server.h"
#include "train/trainer.h"

namespace {

using namespace seqtape;

Vocab synthetic_vocab(int64_t V) {
  std::vector<std::string> t = {"<pad>", "<bos>", "<eos>"};
  for (int64_t i = 3; i < V; ++i) t.push_back("c" + std::to_string(i));
  return Vocab::from_tokens(t);
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, size_t(p * double(v.size() - 1) + 0.5));
  return v[i];
}

struct Figures {
  double rps = 0, p50 = 0, p99 = 0;
  size_t requests = 0;
  int failed = 0;
};

// `clients` threads posting back to back, per_client requests each; client c's request i is
// bodies[(c + i) % size] (mixed lengths).
Figures measure(int port, const std::vector<std::string>& bodies, int clients, int per_client) {
  std::vector<std::vector<double>> lat(static_cast<size_t>(clients));
  std::atomic<int> failed{0};
  std::vector<std::thread> th;
  const auto t0 = std::chrono::steady_clock::now();
  for (int c = 0; c < clients; ++c)
    th.emplace_back([&, c] {
      httplib::Client cli("127.0.0.1", port);
      cli.set_read_timeout(120, 0);
      for (int i = 0; i < per_client; ++i) {
        const auto r0 = std::chrono::steady_clock::now();
        const std::string& body = bodies[size_t(c + i) % bodies.size()];
        auto res = cli.Post("/v1/generate", body, "application/json");
        const double ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - r0)
                .count();
        if (!res || res->status != 200) {
          ++failed;  // counted, not timed
          continue;
        }
        lat[size_t(c)].push_back(ms);
      }
    });
  for (auto& x : th) x.join();
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::vector<double> all;
  for (auto& v : lat) all.insert(all.end(), v.begin(), v.end());
  Figures f;
  f.requests = all.size();
  f.failed = failed.load();
  if (all.empty()) return f;
  f.rps = double(all.size()) / secs;
  f.p50 = percentile(all, 0.5);
  f.p99 = percentile(all, 0.99);
  return f;
}

// One POST on a fresh connection: its wall time in ms, or -1 when it failed.
double post_ms(int port, const std::string& body) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(600, 0);
  const auto t0 = std::chrono::steady_clock::now();
  auto res = cli.Post("/v1/generate", body, "application/json");
  if (!res || res->status != 200) return -1;
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// A 5-token greedy request alone, then sent while a debug request (no_cache, beam 8, 128
// tokens: every step recomputes the whole prefix of 8 hypotheses) decodes on the same
// continuous server. The debug one is decoded off the shared loop, so the greedy one should
// take about as long as alone, not as long as the debug one.
void debug_beside_greedy(int port, const std::string& source) {
  const std::string greedy =
      nlohmann::json{{"input", source}, {"min_new", 5}, {"max_new", 5}}.dump();
  const std::string debug = nlohmann::json{
      {"input", source},
      {"no_cache", true},
      {"beam", 8},
      {"min_new", 128},
      {"max_new", 128}}.dump();
  const double alone = post_ms(port, greedy);
  double debug_ms = 0;
  std::thread d([&] { debug_ms = post_ms(port, debug); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const double beside = post_ms(port, greedy);
  d.join();
  std::printf(
      "\ncontinuous: a 5-token greedy request alone %.1f ms; sent 200 ms into a debug request "
      "(no_cache, beam 8, 128 tokens) %.1f ms (%.2fx alone); the debug request %.1f ms\n",
      alone, beside, beside / alone, debug_ms);
}

}  // namespace

constexpr const char* kUsage =
    "usage: bench_serve [REQUESTS]\n"
    "\n"
    "seqtape serve under load, in process on 127.0.0.1: the serial and the continuous scheduler\n"
    "over the same medium model, with 1, 8, 32 and 64 concurrent clients sending requests of\n"
    "8, 16, 32 or 64 new tokens back to back; requests/s, p50 and p99 latency, and the\n"
    "continuous / serial ratios of the same run (target at 32 and 64 clients: >= 2x the\n"
    "requests/s, <= 0.7x the p99);\n"
    "then a greedy request's latency beside a debug request (no_cache, beam 8).\n"
    "\n"
    "  REQUESTS   requests per client at 1 client (default 40; fewer per client with more\n"
    "             clients)\n"
    "  -h, --help this text\n";

int main(int argc, char** argv) {
  int base = 40;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::printf("%s", kUsage);
      return 0;
    }
    char* end = nullptr;
    const long n = std::strtol(a.c_str(), &end, 10);
    if (a.empty() || *end != '\0' || n < 1 || n > 100000 || i > 1) {
      std::fprintf(stderr, "bench_serve: unexpected argument '%s'\n\n%s", a.c_str(), kUsage);
      return 2;
    }
    base = int(n);
  }
  const int64_t V = 64;
  ModelConfig cfg = preset("medium", int(V));
  cfg.max_positions = 600;
  cfg.init_seed = 1;
  auto net = make_model(cfg);
  std::vector<NamedTensor> w;
  for (auto& [n, p] : net->named_parameters()) w.push_back({n, p.value()});
  const InferenceModel model(cfg, synthetic_vocab(V), w, "medium", WeightLayout::Decode);
  std::string source;
  for (int i = 0; i < 31; ++i) source += "c" + std::to_string(3 + (i * 7) % (V - 3));
  // Mixed lengths: 8, 16, 32 and 64 new tokens in turn (30 on average).
  std::vector<std::string> bodies;
  for (int n : {8, 16, 32, 64})
    bodies.push_back(nlohmann::json{{"input", source}, {"min_new", n}, {"max_new", n}}.dump());

  const std::vector<std::string> kinds = {"serial", "continuous"};
  std::vector<std::unique_ptr<serve::Server>> servers;
  std::vector<std::thread> threads;
  std::vector<int> ports;
  for (const std::string& kind : kinds) {
    serve::ServerOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.queue = 128;
    o.http_threads = 96;
    o.max_client_connections = 96;  // every client comes from 127.0.0.1
    o.access_log = "";
    o.scheduler = kind;
    o.max_batch = 32;
    o.limits.max_input_bytes = 1 << 12;
    servers.push_back(std::make_unique<serve::Server>(model, o));
    ports.push_back(servers.back()->bind());
    serve::Server* s = servers.back().get();
    threads.emplace_back([s] { s->run(); });
  }

  std::printf(
      "bench_serve: medium model (%zu parameters), 8, 16, 32 or 64 new tokens per request (in "
      "turn); serial vs continuous (--max-batch 32), back to back at each client count\n",
      model.parameter_count());
  std::printf("%8s %11s %9s %11s %10s %10s\n", "clients", "scheduler", "requests", "requests/s",
              "p50 ms", "p99 ms");
  struct Row {
    int clients;
    Figures serial, continuous;
  };
  std::vector<Row> rows;
  for (int clients : {1, 8, 32, 64}) {
    const int per_client = std::max(2, base * 4 / (clients + 3));
    Row r{clients, {}, {}};
    for (size_t k = 0; k < kinds.size(); ++k) {
      const Figures f = measure(ports[k], bodies, clients, per_client);
      (k == 0 ? r.serial : r.continuous) = f;
      std::printf("%8d %11s %9zu %11.1f %10.1f %10.1f%s\n", clients, kinds[k].c_str(), f.requests,
                  f.rps, f.p50, f.p99,
                  f.failed ? (" (" + std::to_string(f.failed) + " failed)").c_str() : "");
      std::fflush(stdout);
    }
    rows.push_back(r);
  }
  std::printf("\ncontinuous / serial, same run:\n%8s %12s %12s %12s\n", "clients", "requests/s",
              "p50 latency", "p99 latency");
  for (const Row& r : rows)
    std::printf("%8d %11.2fx %11.2fx %11.2fx\n", r.clients, r.continuous.rps / r.serial.rps,
                r.continuous.p50 / r.serial.p50, r.continuous.p99 / r.serial.p99);
  debug_beside_greedy(ports[1], source);
  for (auto& s : servers) s->stop(std::chrono::milliseconds(0));
  for (auto& t : threads) t.join();
  return 0;
}
