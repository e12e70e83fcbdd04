// One training step (forward, cross-entropy, backward, Adam) of the encoder-decoder at three
// sizes, reported as tokens/s and as achieved GFLOP/s over the fraction of cblas_sgemm
// throughput measured in the same run on the model's own largest gemm shape.
//
// Dimension key: B batch, L sequence length (source = target), C d_model, F FFN width,
// V vocabulary, H heads.
#include <cblas.h>

#include "autograd/ops.h"
#include "bench/bench_util.h"
#include "nn/loss.h"
#include "train/optim.h"
#include "train/trainer.h"

namespace seqtape {
namespace {

struct Cfg {
  const char* name;
  int64_t C, H, layers, F, B, L, V;
};
// seed: the reference model on the 7-token sentence; small and medium as in the issue.
const Cfg kCfgs[] = {{"seed", 4, 1, 2, 16, 1, 7, 10},
                     {"small", 64, 4, 2, 256, 64, 16, 64},
                     {"medium", 256, 4, 3, 1024, 32, 32, 64}};

ModelConfig model_config(const Cfg& c) {
  ModelConfig m = preset(c.C == 4 ? "seed" : "default", static_cast<int>(c.V));
  m.d_model = c.C;
  m.n_heads = c.H;
  m.n_encoder_layers = m.n_decoder_layers = c.layers;
  m.d_ff = c.F;
  return m;
}

// Forward FLOPs of one batch (2 per multiply-add, gemms and attention products only);
// a training step costs about 3× (backward computes two products per forward product).
double forward_flops(const Cfg& c) {
  const double B = static_cast<double>(c.B), L = static_cast<double>(c.L),
               C = static_cast<double>(c.C), F = static_cast<double>(c.F),
               V = static_cast<double>(c.V), n = static_cast<double>(c.layers);
  const double proj = 2 * B * L * C * C;      // one [B·L, C]·[C, C] projection
  const double attn = 2 * 2 * B * L * L * C;  // Q·Kᵀ and P·V over all heads
  const double ffn = 2 * 2 * B * L * C * F;   // two FFN products
  const double enc = n * (4 * proj + attn + ffn);
  const double dec = n * (4 * proj + attn + 4 * proj + attn + ffn);  // self + cross + FFN
  return enc + dec + 2 * B * L * C * V;
}

struct Setup {
  std::unique_ptr<TransformerModel> model;
  NamedParams params;
  std::unique_ptr<Optimizer> opt;
  Batch batch;
  Rng rng{1};
};

Setup make_setup(const Cfg& c) {
  Setup s;
  s.model = make_model(model_config(c));
  s.params = s.model->named_parameters();
  s.opt = std::make_unique<Optimizer>(s.params, OptimizerConfig{});
  Rng r(7);
  Batch& b = s.batch;
  b.B = c.B;
  b.S = b.T = c.L;
  for (int64_t i = 0; i < c.B * c.L; ++i) {
    b.src.push_back(static_cast<int32_t>(3 + r.below(static_cast<uint64_t>(c.V - 3))));
    b.tgt_in.push_back(static_cast<int32_t>(3 + r.below(static_cast<uint64_t>(c.V - 3))));
    b.labels.push_back(static_cast<int32_t>(3 + r.below(static_cast<uint64_t>(c.V - 3))));
  }
  b.src_len.assign(static_cast<size_t>(c.B), static_cast<int32_t>(c.L));
  b.tgt_len = b.src_len;
  b.n_label_tokens = c.B * c.L;
  return s;
}

void BM_train_step(benchmark::State& st, Cfg c) {
  Setup s = make_setup(c);
  Tape& tape = Tape::current();
  for (auto _ : st) {
    tape.clear();
    for (auto& [n, p] : s.params) p.zero_grad();
    Var loss = sequence_loss(batch_logits(*s.model, s.batch, s.rng), s.batch.labels);
    tape.backward(loss);
    s.opt->step(1e-4, clip_scale(grad_global_norm(s.params), 1.0));
    benchmark::DoNotOptimize(loss.item());
  }
  tape.clear();
  st.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(c.B * c.L) * static_cast<double>(st.iterations()),
                         benchmark::Counter::kIsRate);
  st.counters["GFLOP/s"] =
      benchmark::Counter(3 * forward_flops(c) * static_cast<double>(st.iterations()) / 1e9,
                         benchmark::Counter::kIsRate);
}

// The model's largest gemm, [B·L, C]·[C, F], through raw cblas_sgemm.
void BM_sgemm_model_shape(benchmark::State& st, Cfg c) {
  const int64_t m = c.B * c.L, k = c.C, n = c.F;
  std::vector<float> a(static_cast<size_t>(m * k), 0.5f), b(static_cast<size_t>(k * n), 0.25f),
      out(static_cast<size_t>(m * n));
  for (auto _ : st) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), 1.f, a.data(), static_cast<int>(k), b.data(),
                static_cast<int>(n), 0.f, out.data(), static_cast<int>(n));
    benchmark::DoNotOptimize(out.data());
  }
  st.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * static_cast<double>(m * n * k) * static_cast<double>(st.iterations()) / 1e9,
      benchmark::Counter::kIsRate);
}

const bool kRegistered = [] {
  for (const Cfg& c : kCfgs) {
    benchmark::RegisterBenchmark((std::string("BM_sgemm_model_shape/") + c.name).c_str(),
                                 BM_sgemm_model_shape, c)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond)
        ->Repetitions(3)
        ->DisplayAggregatesOnly(true);
    benchmark::RegisterBenchmark((std::string("BM_train_step/") + c.name).c_str(), BM_train_step, c)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond)
        ->Repetitions(3)
        ->DisplayAggregatesOnly(true);
  }
  return true;
}();

}  // namespace
}  // namespace seqtape

int main(int argc, char** argv) {
  using namespace seqtape;
  bench::RatioReporter rep;
  bench::run_benchmarks(&argc, argv, rep);
  std::printf(
      "\ntraining step (forward + backward + clip + Adam), GFLOP/s counted as 3x forward gemm "
      "FLOPs\n");
  std::printf("%-8s %-22s %12s %12s %12s %12s %10s\n", "config", "B x L, d/heads/layers/F",
              "us/step", "tokens/s", "GFLOP/s", "sgemm GF/s", "fraction");
  for (const Cfg& c : kCfgs) {
    std::string step = std::string("BM_train_step/") + c.name,
                gemm = std::string("BM_sgemm_model_shape/") + c.name;
    if (!rep.has(step)) continue;
    char shape[64];
    std::snprintf(shape, sizeof shape, "%lldx%lld, %lld/%lld/%lld+%lld/%lld",
                  static_cast<long long>(c.B), static_cast<long long>(c.L),
                  static_cast<long long>(c.C), static_cast<long long>(c.H),
                  static_cast<long long>(c.layers), static_cast<long long>(c.layers),
                  static_cast<long long>(c.F));
    const double gf = rep.counter(step, "GFLOP/s"), peak = rep.counter(gemm, "GFLOP/s");
    std::printf("%-8s %-22s %12.1f %12.0f %12.2f %12.2f %10.3f\n", c.name, shape,
                rep.ns(step) / 1e3, rep.counter(step, "tokens/s"), gf, peak,
                peak > 0 ? gf / peak : 0.0);
  }
  benchmark::Shutdown();
  return 0;
}
