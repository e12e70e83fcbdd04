// seqtape serve under load: an in-process Server on 127.0.0.1 (a free port) over the medium
// configuration (C 256, H 4, 3+3 layers, F 1024, V 64; random-init weights, as bench_decode),
// with 1, 8 and 32 concurrent clients. Each request decodes exactly 32 tokens greedily
// (min_new = max_new = 32) from a 31-token source; every client sends its requests back to back.
// Reports requests/s and p50 / p99 latency. The scheduler today is SerialScheduler (one request
// at a time), so throughput stays flat and latency grows with the clients; the figures are the
// baseline the continuous-batching scheduler is to beat.
//
//   build/bench/bench_serve [requests per client at 1 client, default 40]
//
// Dimension key: C d_model, H heads, F d_ff, V vocabulary.
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
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

}  // namespace

int main(int argc, char** argv) {
  const int base = argc > 1 ? std::max(1, std::atoi(argv[1])) : 40;
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
  const std::string body =
      nlohmann::json{{"input", source}, {"min_new", 32}, {"max_new", 32}}.dump();

  serve::ServerOptions o;
  o.host = "127.0.0.1";
  o.port = 0;
  o.queue = 64;
  o.http_threads = 48;
  o.limits.max_input_bytes = 1 << 12;
  serve::Server server(model, o);
  const int port = server.bind();
  std::thread t([&] { server.run(); });

  std::printf(
      "bench_serve: medium model (%zu parameters), %s scheduler, 32 new tokens per "
      "request, port %d\n",
      model.parameter_count(), "serial", port);
  std::printf("%8s %9s %11s %10s %10s\n", "clients", "requests", "requests/s", "p50 ms", "p99 ms");
  for (int clients : {1, 8, 32}) {
    const int per_client = std::max(2, base * 4 / (clients + 3));
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
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::vector<double> all;
    for (auto& v : lat) all.insert(all.end(), v.begin(), v.end());
    std::printf("%8d %9zu %11.1f %10.1f %10.1f%s\n", clients, all.size(), double(all.size()) / secs,
                percentile(all, 0.5), percentile(all, 0.99),
                failed ? (" (" + std::to_string(failed.load()) + " failed)").c_str() : "");
    std::fflush(stdout);
  }
  server.stop(std::chrono::milliseconds(0));
  t.join();
  return 0;
}
