// Autograd overhead: the matmul op against raw cblas_sgemm on the same shapes, the cost of
// tiny ops, and recording + backward of a 1,000-op chain. Prints ratios measured in this run.
#include <cblas.h>

#include "autograd/ops.h"
#include "bench/bench_util.h"

namespace seqtape {
namespace {

Tensor rnd(Shape s) {
  Rng r(1);
  Tensor t = Tensor::empty(std::move(s), DType::F32);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = static_cast<float>(r.uniform() - 0.5);
  return t;
}

// (M, K, N): square sizes and Transformer-like projections (tokens × d_model × width).
const std::vector<std::vector<int64_t>> kShapes = {
    {64, 64, 64},    {128, 128, 128},   {256, 256, 256},   {512, 512, 512}, {1024, 1024, 1024},
    {512, 256, 256}, {1024, 256, 1024}, {1024, 1024, 256}, {512, 256, 8000}};

void set_flops(benchmark::State& st, int64_t m, int64_t k, int64_t n) {
  st.counters["GFLOP/s"] =
      benchmark::Counter(2.0 * m * n * k * st.iterations() / 1e9, benchmark::Counter::kIsRate);
}

void BM_sgemm_raw(benchmark::State& st) {
  const int64_t m = st.range(0), k = st.range(1), n = st.range(2);
  Tensor a = rnd({m, k}), b = rnd({k, n}), c = Tensor::empty({m, n}, DType::F32);
  for (auto _ : st) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.f, a.data<float>(), k,
                b.data<float>(), n, 0.f, c.data<float>(), n);
    benchmark::DoNotOptimize(c.data<float>());
  }
  set_flops(st, m, k, n);
}

void BM_matmul_op(benchmark::State& st) {
  const int64_t m = st.range(0), k = st.range(1), n = st.range(2);
  Var a(rnd({m, k}), true), b(rnd({k, n}), true);  // requires grad: the op records a node
  for (auto _ : st) {
    Var c = matmul(a, b);
    benchmark::DoNotOptimize(c.value().raw());
    Tape::current().clear();
  }
  set_flops(st, m, k, n);
}

// Raw and op runs of one shape are registered next to each other, so both see the same
// machine load; rates use wall time (OpenBLAS threads do not show in CPU time).
const bool kRegistered = [] {
  for (const auto& s : kShapes) {
    benchmark::RegisterBenchmark("BM_sgemm_raw", BM_sgemm_raw)
        ->Args(s)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond)
        ->Repetitions(3)
        ->DisplayAggregatesOnly(true);
    benchmark::RegisterBenchmark("BM_matmul_op", BM_matmul_op)
        ->Args(s)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond)
        ->Repetitions(3)
        ->DisplayAggregatesOnly(true);
  }
  return true;
}();

// Tiny ops: what one op costs when the arithmetic is negligible (4×4).
void BM_tiny_add(benchmark::State& st) {
  Var a(rnd({4, 4}), true), b(rnd({4, 4}), true);
  for (auto _ : st) {
    Var c = add(a, b);
    benchmark::DoNotOptimize(c.impl());
    Tape::current().clear();
  }
}
void BM_tiny_matmul(benchmark::State& st) {
  Var a(rnd({4, 4}), true), b(rnd({4, 4}), true);
  for (auto _ : st) {
    Var c = matmul(a, b);
    benchmark::DoNotOptimize(c.impl());
    Tape::current().clear();
  }
}
void BM_tiny_sgemm_raw(benchmark::State& st) {
  Tensor a = rnd({4, 4}), b = rnd({4, 4}), c = rnd({4, 4});
  for (auto _ : st) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 4, 4, 4, 1.f, a.data<float>(), 4,
                b.data<float>(), 4, 0.f, c.data<float>(), 4);
    benchmark::DoNotOptimize(c.data<float>());
  }
}
BENCHMARK(BM_tiny_add)->UseRealTime();
BENCHMARK(BM_tiny_matmul)->UseRealTime();
BENCHMARK(BM_tiny_sgemm_raw)->UseRealTime();

// Record a chain of 1,000 tiny ops (alternating add / mul / tanh on 4×4), then backward.
void BM_chain1000_forward_backward(benchmark::State& st) {
  Var x(rnd({4, 4}), true), w(rnd({4, 4}), true);
  for (auto _ : st) {
    Tape::current().clear();
    x.zero_grad();
    w.zero_grad();
    Var h = x;
    for (int i = 0; i < 333; ++i) h = tanh(mul(add(h, w), w));
    Var loss = sum(h);  // 1,000 ops recorded
    Tape::current().backward(loss);
    benchmark::DoNotOptimize(x.grad().raw());
  }
  st.counters["ns/op"] = benchmark::Counter(
      1000.0 * st.iterations(), benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  Tape::current().clear();
}
BENCHMARK(BM_chain1000_forward_backward)->Unit(benchmark::kMicrosecond)->UseRealTime();

}  // namespace
}  // namespace seqtape

int main(int argc, char** argv) {
  using namespace seqtape;
  bench::RatioReporter rep;
  bench::run_benchmarks(&argc, argv, rep);
  std::printf(
      "\nmatmul op vs raw cblas_sgemm (throughput ratio, same run; target >= 0.95 at 256+)\n");
  std::printf("%-20s %12s %12s %8s\n", "M x K x N", "raw GFLOP/s", "op GFLOP/s", "ratio");
  for (const auto& s : kShapes) {
    std::string args =
        "/" + std::to_string(s[0]) + "/" + std::to_string(s[1]) + "/" + std::to_string(s[2]);
    std::string raw = "BM_sgemm_raw" + args, op = "BM_matmul_op" + args;
    if (!rep.has(raw) || !rep.has(op)) continue;
    std::printf(
        "%-20s %12.1f %12.1f %8.3f\n",
        (std::to_string(s[0]) + "x" + std::to_string(s[1]) + "x" + std::to_string(s[2])).c_str(),
        rep.counter(raw, "GFLOP/s"), rep.counter(op, "GFLOP/s"), rep.ns(raw) / rep.ns(op));
  }
  if (rep.has("BM_tiny_add"))
    std::printf(
        "\ntiny ops (4x4): add %.0f ns, matmul %.0f ns (raw sgemm %.0f ns); chain of 1,000 ops "
        "forward+backward: %.0f ns/op\n",
        rep.ns("BM_tiny_add"), rep.ns("BM_tiny_matmul"), rep.ns("BM_tiny_sgemm_raw"),
        rep.ns("BM_chain1000_forward_backward") / 1000.0);
  benchmark::Shutdown();
  return 0;
}
