// seqtape serve under load: in-process Servers on 127.0.0.1 (free ports) over the medium
// configuration (C 256, H 4, 3+3 layers, F 1024, V 64; random-init weights, as bench_decode),
// with 1, 8, 32 and 64 concurrent clients. Each request decodes exactly 8, 16, 32 or 64 tokens
// greedily (min_new = max_new; mixed lengths, in turn) from a 31-token source; every client sends
// its requests back to back.
// Reports requests/s and p50 / p99 latency for the serial scheduler (one request at a time
// through the same server code: the baseline) and the continuous one (every request's row
// stepped in one model call, --max-batch 32), and the continuous/serial ratios. The two are
// measured interleaved: at each client count, rounds of serial then continuous (then
// continuous then serial, in turn), each round a share of the requests, so that a load that
// comes and goes on a shared machine falls on both alike. Then the target check at 32 and 64
// clients (PASS or FAIL with the ratios), and a greedy request's latency beside a debug
// request (no_cache, beam 8) against its latency alone.
//
//   build/bench/bench_serve [REQUESTS] [--rounds N] [--clients LIST] [--max-batch N]
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

// The latencies (ms) and wall time of some rounds of one scheduler at one client count.
struct Samples {
  std::vector<double> ms;
  double seconds = 0;
  int failed = 0;
  Figures figures() const {
    Figures f;
    f.requests = ms.size();
    f.failed = failed;
    if (ms.empty()) return f;
    f.rps = double(ms.size()) / seconds;
    f.p50 = percentile(ms, 0.5);
    f.p99 = percentile(ms, 0.99);
    return f;
  }
};

// `clients` threads posting back to back, per_client requests each; client c's request i is
// bodies[(c + i + first) % size] (mixed lengths). Adds the latencies and the wall time to `out`.
void measure(int port, const std::vector<std::string>& bodies, int clients, int per_client,
             int first, Samples& out) {
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
        const std::string& body = bodies[size_t(c + i + first) % bodies.size()];
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
  out.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (auto& v : lat) out.ms.insert(out.ms.end(), v.begin(), v.end());
  out.failed += failed.load();
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

constexpr const char* kUsage =
    "usage: bench_serve [REQUESTS] [--rounds N] [--clients LIST] [--max-batch N]\n"
    "\n"
    "seqtape serve under load, in process on 127.0.0.1: the serial scheduler (one request at a\n"
    "time, the baseline) and the continuous one over the same medium model, with 1, 8, 32 and 64\n"
    "concurrent clients sending requests of 8, 16, 32 or 64 new tokens back to back; requests/s,\n"
    "p50 and p99 latency, and the continuous / serial ratios. The two are measured interleaved\n"
    "(rounds of each in turn), so that a load that comes and goes falls on both. Then the\n"
    "target at 32 and 64 clients, PASS or FAIL: >= 2x the requests/s and <= 0.7x the p99; and a\n"
    "greedy request's latency beside a debug request (no_cache, beam 8).\n"
    "\n"
    "  REQUESTS        requests per client at 1 client (default 40; fewer per client with more\n"
    "                  clients, at least 2 per round)\n"
    "  --rounds N      rounds of each scheduler per client count (default 4)\n"
    "  --clients LIST  client counts, comma-separated (default 1,8,32,64)\n"
    "  --max-batch N   the continuous scheduler's rows per model call (default 32)\n"
    "  -h, --help      this text\n";

struct Args {
  int base = 40, rounds = 4;
  int64_t max_batch = 32;
  std::vector<int> clients = {1, 8, 32, 64};
};

// A whole number in [lo, hi], or -1.
long whole(const std::string& a, long lo, long hi) {
  char* end = nullptr;
  const long n = std::strtol(a.c_str(), &end, 10);
  return a.empty() || *end != '\0' || n < lo || n > hi ? -1 : n;
}

// The arguments, or exit 2 naming the one that is wrong.
Args parse_args(int argc, char** argv) {
  Args a;
  const auto bad = [](const std::string& what) {
    std::fprintf(stderr, "bench_serve: %s\n\n%s", what.c_str(), kUsage);
    std::exit(2);
  };
  bool requests_given = false;
  for (int i = 1; i < argc; ++i) {
    const std::string x = argv[i];
    if (x == "-h" || x == "--help") {
      std::printf("%s", kUsage);
      std::exit(0);
    }
    const bool flag = x == "--rounds" || x == "--clients" || x == "--max-batch";
    if (flag && i + 1 == argc) bad(x + " needs a value");
    const std::string v = flag ? argv[++i] : "";
    if (x == "--rounds") {
      a.rounds = int(whole(v, 1, 100));
      if (a.rounds < 0) bad("--rounds '" + v + "' is not a whole number in 1..100");
    } else if (x == "--max-batch") {
      a.max_batch = whole(v, 1, 256);
      if (a.max_batch < 0) bad("--max-batch '" + v + "' is not a whole number in 1..256");
    } else if (x == "--clients") {
      a.clients.clear();
      for (size_t p = 0; p <= v.size();) {
        const size_t q = std::min(v.find(',', p), v.size());
        const long n = whole(v.substr(p, q - p), 1, 256);
        if (n < 0) bad("--clients '" + v + "' is not a list of client counts in 1..256");
        a.clients.push_back(int(n));
        p = q + 1;
      }
    } else if (!requests_given && whole(x, 1, 100000) > 0) {
      a.base = int(whole(x, 1, 100000));
      requests_given = true;
    } else {
      bad("unexpected argument '" + x + "'");
    }
  }
  return a;
}

struct Row {
  int clients;
  Figures serial, continuous;
};

// The target at 32 and 64 clients: continuous >= 2x serial's requests/s and <= 0.7x its p99.
// Prints a line per client count and the verdict; true when every row there passes.
bool check_target(const std::vector<Row>& rows) {
  std::printf(
      "\ntarget (32 and 64 clients: continuous >= 2x serial's requests/s, <= 0.7x its p99):\n");
  bool all = true, any = false;
  for (const Row& r : rows) {
    if (r.clients != 32 && r.clients != 64) continue;
    const double rps = r.continuous.rps / r.serial.rps, p99 = r.continuous.p99 / r.serial.p99;
    const bool ok = rps >= 2.0 && p99 <= 0.7 && !r.serial.failed && !r.continuous.failed;
    std::printf("%8d clients: requests/s %.2fx (%s), p99 %.2fx (%s): %s\n", r.clients, rps,
                rps >= 2.0 ? ">= 2x" : "< 2x", p99, p99 <= 0.7 ? "<= 0.7x" : "> 0.7x",
                ok ? "PASS" : "FAIL");
    all = all && ok;
    any = true;
  }
  std::printf("target: %s\n", !any ? "not measured (no 32 or 64 clients)" : all ? "PASS" : "FAIL");
  return any && all;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse_args(argc, argv);
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
    o.queue = 512;
    o.http_threads = 300;
    o.max_client_connections = 300;  // every client comes from 127.0.0.1
    o.access_log = "";
    o.scheduler = kind;
    o.max_batch = args.max_batch;
    o.limits.max_input_bytes = 1 << 12;
    servers.push_back(std::make_unique<serve::Server>(model, o));
    ports.push_back(servers.back()->bind());
    serve::Server* s = servers.back().get();
    threads.emplace_back([s] { s->run(); });
  }

  std::printf(
      "bench_serve: medium model (%zu parameters), 8, 16, 32 or 64 new tokens per request (in "
      "turn); serial vs continuous (--max-batch %lld), %d interleaved rounds each per client "
      "count\n",
      model.parameter_count(), static_cast<long long>(args.max_batch), args.rounds);
  std::printf("%8s %11s %9s %11s %10s %10s\n", "clients", "scheduler", "requests", "requests/s",
              "p50 ms", "p99 ms");
  std::vector<Row> rows;
  for (int clients : args.clients) {
    const int per_round = std::max(2, args.base * 4 / (clients + 3) / args.rounds);
    Samples samples[2];
    for (int round = 0; round < args.rounds; ++round)
      for (int j = 0; j < 2; ++j) {
        const size_t k = size_t(round % 2 == 0 ? j : 1 - j);  // S C, C S, S C, ...
        measure(ports[k], bodies, clients, per_round, round, samples[k]);
      }
    Row r{clients, samples[0].figures(), samples[1].figures()};
    for (size_t k = 0; k < kinds.size(); ++k) {
      const Figures& f = k == 0 ? r.serial : r.continuous;
      std::printf("%8d %11s %9zu %11.1f %10.1f %10.1f%s\n", clients, kinds[k].c_str(), f.requests,
                  f.rps, f.p50, f.p99,
                  f.failed ? (" (" + std::to_string(f.failed) + " failed)").c_str() : "");
    }
    std::fflush(stdout);
    rows.push_back(r);
  }
  std::printf("\ncontinuous / serial, same run:\n%8s %12s %12s %12s\n", "clients", "requests/s",
              "p50 latency", "p99 latency");
  for (const Row& r : rows)
    std::printf("%8d %11.2fx %11.2fx %11.2fx\n", r.clients, r.continuous.rps / r.serial.rps,
                r.continuous.p50 / r.serial.p50, r.continuous.p99 / r.serial.p99);
  check_target(rows);
  debug_beside_greedy(ports[1], source);
  for (auto& s : servers) s->stop(std::chrono::milliseconds(0));
  for (auto& t : threads) t.join();
  return 0;
}
