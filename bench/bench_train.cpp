// One training step (forward, cross-entropy, backward, clip, Adam) of the encoder-decoder at
// four sizes, without dropout and with dropout 0.1 (and with the GELU activation in place of ReLU),
// reported as tokens/s and as achieved GFLOP/s
// over the ceilings measured in the same run: the CPU's multiply-add ceiling (fma/ceiling), the
// best float32 gemm at the model's own largest gemm shape, and the best bf16 gemm there where
// the CPU has bf16 units. After the benchmarks: the training-speed targets with "met" / "not met",
// then a profile table per config (time per op kind, forward and backward, as a share of the
// step) and the allocation counters of a steady step. Beside them, a dropout mask's own passes
// against a plain memory pass.
//
// Dimension key: B batch, S source length, T target length, C d_model, F FFN width,
// V vocabulary, H heads.
#include <cblas.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <new>
#include <thread>
#include <tuple>

#include "autograd/ops.h"
#include "bench/bench_util.h"
#include "nn/loss.h"
#include "tensor/matmul_backend.h"
#include "tensor/philox.h"
#include "tensor/profile.h"
#include "train/dist.h"
#include "train/flat_params.h"
#include "train/grad_reducer.h"
#include "train/optim.h"
#include "train/trainer.h"

// Every plain operator new made while g_counting is set is counted, so the bench can show how
// many heap allocations a steady training step still makes (tensor buffers come from the pool;
// shapes, closures and tape nodes do not yet). Only the one counted step pays for the atomic
// add: a locked add on every allocation of every timed step would be the bench's own cost (a
// visible share of the seed model's step), not seqtape's.
namespace {
std::atomic<bool> g_counting{false};
std::atomic<uint64_t> g_news{0};
}  // namespace
// None is inlined: GCC would otherwise pair malloc/free with its built-in operator new/delete and
// warn (-Wmismatched-new-delete).
__attribute__((noinline)) void* operator new(std::size_t n) {
  if (g_counting.load(std::memory_order_relaxed)) g_news.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
__attribute__((noinline)) void operator delete(void* p) noexcept {
  std::free(p);
}
__attribute__((noinline)) void operator delete(void* p, std::size_t) noexcept {
  std::free(p);
}

namespace seqtape {
namespace {

struct Cfg {
  const char* name;
  int64_t C, H, layers, F, B, S, T, V;
};
// seed: the reference model on the 7-token sentence; small, medium and short: the configurations
// the training-speed targets were set on.
const Cfg kCfgs[] = {{"seed", 4, 1, 2, 16, 1, 7, 7, 10},
                     {"small", 64, 4, 2, 256, 64, 16, 16, 64},
                     {"medium", 256, 4, 3, 1024, 32, 32, 32, 64},
                     {"short", 128, 4, 3, 512, 64, 10, 9, 64}};

// The dropout of the "/dropout" rows: the rate the regularized recipes use.
constexpr double kDropout = 0.1;

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
  const double B = static_cast<double>(c.B), S = static_cast<double>(c.S),
               T = static_cast<double>(c.T), C = static_cast<double>(c.C),
               F = static_cast<double>(c.F), V = static_cast<double>(c.V),
               n = static_cast<double>(c.layers);
  auto proj = [&](double L) { return 2 * B * L * C * C; };  // one [B·L, C]·[C, C] projection
  auto attn = [&](double Lq, double Lk) { return 2 * 2 * B * Lq * Lk * C; };  // Q·Kᵀ and P·V
  auto ffn = [&](double L) { return 2 * 2 * B * L * C * F; };                 // two products
  const double enc = n * (4 * proj(S) + attn(S, S) + ffn(S));
  const double cross = 2 * proj(T) + 2 * proj(S) + attn(T, S);  // Q, O on T; K, V on S
  const double dec = n * (4 * proj(T) + attn(T, T) + cross + ffn(T));
  return enc + dec + 2 * B * T * C * V;
}

struct Setup {
  std::unique_ptr<TransformerModel> model;
  NamedParams params;
  std::unique_ptr<FlatParams> flat;  // as the trainer has them: one buffer each
  std::unique_ptr<Optimizer> opt;
  Batch batch;
  Rng rng{1};
};

Setup make_setup(const Cfg& c, double dropout = 0.0, Activation act = Activation::Relu) {
  Setup s;
  ModelConfig m = model_config(c);
  m.dropout = dropout;
  m.activation = act;
  s.model = make_model(m);
  s.params = s.model->named_parameters();
  s.flat = std::make_unique<FlatParams>(s.params);
  s.opt = make_optimizer(s.params, OptimizerConfig{});
  Rng r(7);
  Batch& b = s.batch;
  b.B = c.B;
  b.S = c.S;
  b.T = c.T;
  auto token = [&] { return static_cast<int32_t>(3 + r.below(static_cast<uint64_t>(c.V - 3))); };
  for (int64_t i = 0; i < c.B * c.S; ++i) b.src.push_back(token());
  for (int64_t i = 0; i < c.B * c.T; ++i) {
    b.tgt_in.push_back(token());
    b.labels.push_back(token());
  }
  b.src_len.assign(static_cast<size_t>(c.B), static_cast<int32_t>(c.S));
  b.tgt_len.assign(static_cast<size_t>(c.B), static_cast<int32_t>(c.T));
  b.n_label_tokens = c.B * c.T;
  return s;
}

// One step; with a reducer, the gradients are summed over its ranks during backward (TwoRanks).
void train_step(Setup& s, GradReducer* reducer = nullptr) {
  Tape& tape = Tape::current();
  profile::begin_step();
  tape.clear();
  for (auto& [n, p] : s.params) p.zero_grad();
  Var loss = sequence_loss(s.model->logits(s.batch, s.rng), s.batch.labels);
  if (reducer) reducer->before_last_backward();
  tape.backward(loss);
  if (reducer) reducer->finish();
  s.opt->step(1e-4, clip_scale(grad_global_norm(s.params), 1.0));
  profile::end_step();
  benchmark::DoNotOptimize(loss.item());
}

// The step as `train --ranks 2` takes it: two ranks that are threads of this process, each a
// Setup on half of the batch's rows with one kernel thread, the flat gradients summed in shared
// memory (thread_ranks) in the trainer's buckets during backward, before each rank's optimizer
// step.
struct TwoRanks {
  explicit TwoRanks(const Cfg& c) : comms(thread_ranks(2)) {
    Cfg half = c;
    half.B = c.B / 2;
    for (int r = 0; r < 2; ++r) setups.push_back(make_setup(half));
    for (int r = 0; r < 2; ++r)  // the trainer's default buckets, started during backward
      reducers.push_back(std::make_unique<GradReducer>(setups[static_cast<size_t>(r)].params,
                                                       *comms[static_cast<size_t>(r)],
                                                       TrainOptions{}.bucket_bytes, true));
  }
  // Wall seconds per step over `steps` steps on both ranks (the BLAS threads set to 1 around).
  double seconds_per_step(int steps) {
    const int threads = kernels::blas_num_threads();
    kernels::blas_set_num_threads(1);
    const bool profiling = profile::enabled();
    auto rank = [&](int r) {
      profile::set_enabled(profiling);
      for (int i = 0; i < steps; ++i)
        train_step(setups[static_cast<size_t>(r)], reducers[static_cast<size_t>(r)].get());
      Tape::current().clear();
    };
    const auto t0 = std::chrono::steady_clock::now();
    std::thread other(rank, 1);
    rank(0);
    other.join();
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    kernels::blas_set_num_threads(threads);
    return secs / steps;
  }
  std::vector<std::shared_ptr<Communicator>> comms;
  std::vector<Setup> setups;
  std::vector<std::unique_ptr<GradReducer>> reducers;
};

// How a step's float products run: OpenBLAS float32 (the default), oneDNN float32, or bf16
// operands on oneDNN (tensor/matmul_backend.h).
enum class Mode { OpenBLAS, OneDNN, BF16 };
const Mode kModes[] = {Mode::OpenBLAS, Mode::OneDNN, Mode::BF16};
const char* mode_suffix(Mode m) {
  return m == Mode::OpenBLAS ? "" : m == Mode::OneDNN ? "/onednn" : "/bf16";
}
kernels::MatmulBackend mode_backend(Mode m) {
  return m == Mode::OpenBLAS ? kernels::MatmulBackend::OpenBLAS : kernels::MatmulBackend::OneDNN;
}
kernels::Precision mode_precision(Mode m) {
  return m == Mode::BF16 ? kernels::Precision::BF16 : kernels::Precision::F32;
}
bool mode_runs(Mode m) {
  return kernels::matmul_problem(mode_backend(m), mode_precision(m)).empty();
}

void BM_train_step(benchmark::State& st, Cfg c, Mode mode, double dropout,
                   Activation act = Activation::Relu) {
  const kernels::MatmulScope matmul(mode_backend(mode), mode_precision(mode));
  Setup s = make_setup(c, dropout, act);
  for (auto _ : st) train_step(s);
  Tape::current().clear();
  st.counters["tokens/s"] =
      benchmark::Counter(static_cast<double>(c.B * c.T) * static_cast<double>(st.iterations()),
                         benchmark::Counter::kIsRate);
  st.counters["GFLOP/s"] =
      benchmark::Counter(3 * forward_flops(c) * static_cast<double>(st.iterations()) / 1e9,
                         benchmark::Counter::kIsRate);
}

// The model's largest gemm, [B·T, C]·[C, F], once: raw cblas_sgemm on `threads` OpenBLAS
// threads (0: as configured), or oneDNN through kernels::gemm (onednn) in float32 or, with
// bf16, in bf16 as a --precision bf16 step runs it (operands rounded on the way in).
struct ModelGemm {
  int64_t m, k, n;
  std::vector<float> a, b, out;
  explicit ModelGemm(const Cfg& c)
      : m(c.B * c.T),
        k(c.C),
        n(c.F),
        a(static_cast<size_t>(m * k), 0.5f),
        b(static_cast<size_t>(k * n), 0.25f),
        out(static_cast<size_t>(m * n)) {}
  double flops() const { return 2.0 * static_cast<double>(m * n * k); }
  void run(int threads, bool onednn, bool bf16 = false) {
    if (onednn) {
      const kernels::MatmulScope dnn(kernels::MatmulBackend::OneDNN,
                                     bf16 ? kernels::Precision::BF16 : kernels::Precision::F32);
      kernels::gemm<float>(false, false, m, n, k, 1.f, a.data(), k, b.data(), n, 0.f, out.data(),
                           n);
      return;
    }
    const int prev = kernels::blas_num_threads();
    if (threads > 0) kernels::blas_set_num_threads(threads);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m), static_cast<int>(n),
                static_cast<int>(k), 1.f, a.data(), static_cast<int>(k), b.data(),
                static_cast<int>(n), 0.f, out.data(), static_cast<int>(n));
    if (threads > 0) kernels::blas_set_num_threads(prev);
  }
};

// The reference is the fastest of the three, since kernels::gemm runs small gemms on one
// OpenBLAS thread and --matmul may pick oneDNN.
void BM_gemm_model_shape(benchmark::State& st, Cfg c, int threads, bool onednn, bool bf16) {
  ModelGemm g(c);
  for (auto _ : st) {
    g.run(threads, onednn, bf16);
    benchmark::DoNotOptimize(g.out.data());
  }
  st.counters["GFLOP/s"] = benchmark::Counter(
      g.flops() * static_cast<double>(st.iterations()) / 1e9, benchmark::Counter::kIsRate);
}

// A dropout mask's passes over kDropElems floats on this thread: making its keep bits (the
// Philox half-words, once per mask), a pass that reads them (the forward's product), and a plain
// scale, the memory pass a dropout is measured against.
constexpr int64_t kDropElems = int64_t(1) << 16;
enum class DropPass { Bits, Apply, Scale };
void BM_dropout_pass(benchmark::State& st, DropPass pass) {
  const philox::DropoutMask m = philox::DropoutMask::make(kDropout, 0x5eedull);
  std::vector<uint64_t> bits(static_cast<size_t>(philox::DropoutMask::bit_words(kDropElems)));
  std::vector<float> x(static_cast<size_t>(kDropElems), 1.0f), y(x.size());
  const int64_t words = static_cast<int64_t>(bits.size());
  m.bits(0, words, bits.data());
  const philox::KeepBits keep{bits.data()};
  for (auto _ : st) {
    if (pass == DropPass::Bits) m.bits(0, words, bits.data());
    if (pass == DropPass::Apply) keep.apply<float>(0, kDropElems, 1.25f, x.data(), y.data());
    if (pass == DropPass::Scale)
      for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * 1.25f;
    benchmark::DoNotOptimize(bits.data());
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
  }
}

const bool kRegistered = [] {
  auto reg = [](const std::string& name, auto fn, auto... args) {
    benchmark::RegisterBenchmark(name.c_str(), fn, args...)
        ->UseRealTime()
        ->Unit(benchmark::kMicrosecond)
        ->Repetitions(3)
        ->DisplayAggregatesOnly(true);
  };
  bench::register_fma_ceiling();
  reg("BM_dropout/bits", BM_dropout_pass, DropPass::Bits);
  reg("BM_dropout/apply", BM_dropout_pass, DropPass::Apply);
  reg("BM_dropout/scale", BM_dropout_pass, DropPass::Scale);
  for (const Cfg& c : kCfgs) {
    const bool seed = c.B == 1;  // the seed target is about the default path alone
    reg(std::string("BM_sgemm_1thread/") + c.name, BM_gemm_model_shape, c, 1, false, false);
    reg(std::string("BM_sgemm_model_shape/") + c.name, BM_gemm_model_shape, c, 0, false, false);
    if (!seed && mode_runs(Mode::OneDNN))
      reg(std::string("BM_onednn_model_shape/") + c.name, BM_gemm_model_shape, c, 0, true, false);
    if (!seed && mode_runs(Mode::BF16))
      reg(std::string("BM_bf16_model_shape/") + c.name, BM_gemm_model_shape, c, 0, true, true);
    for (Mode m : kModes)
      if (m == Mode::OpenBLAS || (!seed && mode_runs(m)))
        reg(std::string("BM_train_step/") + c.name + mode_suffix(m), BM_train_step, c, m, 0.0,
            Activation::Relu);
    if (!seed)
      reg(std::string("BM_train_step/") + c.name + "/dropout", BM_train_step, c, Mode::OpenBLAS,
          kDropout, Activation::Relu);
    if (!seed)  // the feed-forward activation's own cost: GELU's erfc and e^x in place of ReLU
      reg(std::string("BM_train_step/") + c.name + "/gelu", BM_train_step, c, Mode::OpenBLAS, 0.0,
          Activation::Gelu);
  }
  return true;
}();

// Wall seconds per call of f, over n calls.
template <typename F>
double bench_seconds_per(int n, F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / n;
}

// A second, load-robust measure: rounds that alternate a few training steps in each mode with a
// few calls of the model's largest gemm (OpenBLAS on one thread and on the configured threads,
// oneDNN float32), keeping the best time of each over all rounds. Load on a shared machine only
// ever slows a measurement down, so best-of-rounds taken side by side compares them at the same
// quiet moments.
struct Robust {
  double step_us[3] = {0, 0, 0};   // best step per Mode (0: not run)
  double drop_us[3] = {0, 0, 0};   // the same with dropout kDropout (float32 modes only)
  double one_us[3] = {0, 0, 0};    // the same on one thread (float32 modes only)
  double ranks_us[3] = {0, 0, 0};  // the same as two ranks of one thread (TwoRanks)
  double gemm_gf = 0;              // best float32 gemm at the model's shape, GFLOP/s
  double bf16_gf = 0;              // best bf16 gemm there (0: no bf16 units)
  int f32_mode() const { return step_us[1] > 0 && step_us[1] < step_us[0] ? 1 : 0; }
  double f32_us() const { return step_us[f32_mode()]; }  // the faster float32 step
  const char* f32_backend() const { return f32_mode() == 1 ? "onednn" : "openblas"; }
  double fraction(const Cfg& c) const { return 3 * forward_flops(c) / (f32_us() * 1e3) / gemm_gf; }
  double bf16_fraction(const Cfg& c) const {
    return step_us[2] > 0 && bf16_gf > 0 ? 3 * forward_flops(c) / (step_us[2] * 1e3) / bf16_gf
                                         : 0.0;
  }
  // The step with dropout over the step without, both on the faster float32 backend.
  double dropout_ratio() const {
    const int m = f32_mode();
    return drop_us[m] > 0 ? drop_us[m] / step_us[m] : 0.0;
  }
  // The step on one thread over the step on the configured threads (the faster float32 backend).
  double threads_speedup() const {
    const int m = f32_mode();
    return one_us[m] > 0 ? one_us[m] / step_us[m] : 0.0;
  }
  // The step on one thread over the step as two ranks of one thread.
  double ranks_speedup() const {
    const int m = f32_mode();
    return one_us[m] > 0 && ranks_us[m] > 0 ? one_us[m] / ranks_us[m] : 0.0;
  }
};

// One interleaved round's steps: each mode's best step without and with dropout.
void time_modes(Setup& s, Setup* sd, TwoRanks* two, const Cfg& c, int round, Robust& r) {
  const bool seed = c.B == 1;
  const int steps = seed ? 200 : 2;
  for (Mode m : kModes) {
    if (m != Mode::OpenBLAS && (seed || !mode_runs(m))) continue;
    const kernels::MatmulScope matmul(mode_backend(m), mode_precision(m));
    const bool with_drop = sd && m != Mode::BF16;
    if (round == 0) {  // primitives made, pool filled
      train_step(s);
      if (with_drop) train_step(*sd);
    }
    auto best_of = [&](Setup& x, double& best) {
      const double us = 1e6 * bench_seconds_per(steps, [&] { train_step(x); });
      best = best == 0 ? us : std::min(best, us);
    };
    best_of(s, r.step_us[static_cast<int>(m)]);
    if (with_drop) best_of(*sd, r.drop_us[static_cast<int>(m)]);
    if (with_drop && kernels::blas_num_threads() > 1) {  // the same step on one thread
      const int threads = kernels::blas_num_threads();
      kernels::blas_set_num_threads(1);
      best_of(s, r.one_us[static_cast<int>(m)]);
      kernels::blas_set_num_threads(threads);
      if (two && threads == 2) {
        if (round == 0) two->seconds_per_step(1);
        const double us = 1e6 * two->seconds_per_step(steps);
        double& best = r.ranks_us[static_cast<int>(m)];
        best = best == 0 ? us : std::min(best, us);
      }
    }
  }
}
Robust interleaved(const Cfg& c, int rounds) {
  const bool seed = c.B == 1;
  Setup s = make_setup(c);
  std::unique_ptr<Setup> sd = seed ? nullptr : std::make_unique<Setup>(make_setup(c, kDropout));
  std::unique_ptr<TwoRanks> two = seed ? nullptr : std::make_unique<TwoRanks>(c);
  ModelGemm g(c);
  const int calls = seed ? 200 : 10;
  const bool bf16 = !seed && mode_runs(Mode::BF16);
  Robust r;
  double best_gemm = 1e30, best_bf16 = 1e30;
  for (int round = 0; round < rounds; ++round) {
    time_modes(s, sd.get(), two.get(), c, round, r);
    for (int threads : {1, 0})
      best_gemm = std::min(best_gemm, bench_seconds_per(calls, [&] { g.run(threads, false); }));
    if (!seed && mode_runs(Mode::OneDNN))
      best_gemm = std::min(best_gemm, bench_seconds_per(calls, [&] { g.run(0, true); }));
    if (bf16)
      best_bf16 = std::min(best_bf16, bench_seconds_per(calls, [&] { g.run(0, true, true); }));
  }
  Tape::current().clear();
  r.gemm_gf = g.flops() / best_gemm / 1e9;
  r.bf16_gf = bf16 ? g.flops() / best_bf16 / 1e9 : 0.0;
  std::printf(
      "%-8s best float32 step %10.1f us (%s) = %8.2f GFLOP/s, best float32 gemm %8.2f "
      "GFLOP/s: fraction %.3f",
      c.name, r.f32_us(), r.f32_backend(), 3 * forward_flops(c) / (r.f32_us() * 1e3), r.gemm_gf,
      r.fraction(c));
  if (r.step_us[2] > 0)
    std::printf("; bf16 step %.1f us (%.2fx float32), best bf16 gemm %.2f GFLOP/s: fraction %.3f",
                r.step_us[2], r.f32_us() / r.step_us[2], r.bf16_gf, r.bf16_fraction(c));
  if (r.dropout_ratio() > 0)
    std::printf("; with dropout %.1f: %.1f us (%.3fx)", kDropout, r.drop_us[r.f32_mode()],
                r.dropout_ratio());
  if (r.threads_speedup() > 0)
    std::printf("; on 1 thread %.1f us (%d threads: %.2fx)", r.one_us[r.f32_mode()],
                kernels::blas_num_threads(), r.threads_speedup());
  if (r.ranks_speedup() > 0)
    std::printf("; as 2 ranks of 1 thread %.1f us (%.2fx)", r.ranks_us[r.f32_mode()],
                r.ranks_speedup());
  std::printf("\n");
  return r;
}

// The page faults this process has taken so far (minor: a page first touched, or given back to
// the system by free() and touched again).
long minor_faults() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_minflt;
}

// The profiled steps of one config (after warm-up steps that fill the buffer pool), and the
// heap and pool allocations of one steady step.
void profile_config(const Cfg& c, Mode mode, int steps, double dropout = 0.0) {
  const kernels::MatmulScope matmul(mode_backend(mode), mode_precision(mode));
  Setup s = make_setup(c, dropout);
  for (int i = 0; i < 3; ++i) train_step(s);
  const PoolCounts p0 = pool_counts();
  const uint64_t n0 = g_news.load();
  const long f0 = minor_faults();
  g_counting.store(true);
  train_step(s);
  g_counting.store(false);
  const long f1 = minor_faults();
  const PoolCounts p1 = pool_counts();
  const uint64_t n1 = g_news.load();
  profile::reset();
  profile::set_enabled(true);
  for (int i = 0; i < steps; ++i) train_step(s);
  profile::set_enabled(false);
  Tape::current().clear();
  const std::string name =
      c.name + std::string(mode_suffix(mode)) + (dropout > 0 ? "/dropout" : "");
  std::printf("\n%s", profile::report("profile of " + name).c_str());
  std::printf(
      "allocation in one steady step: %llu tensor buffers from the pool, %llu of them by malloc; "
      "%llu operator new calls in all; %ld page faults\n",
      static_cast<unsigned long long>(p1.acquires - p0.acquires),
      static_cast<unsigned long long>(p1.mallocs - p0.mallocs),
      static_cast<unsigned long long>(n1 - n0), f1 - f0);
}

// The fastest float32 gemm at the model's shape: OpenBLAS on its configured threads or one,
// or oneDNN.
double sgemm_peak(const bench::RatioReporter& rep, const std::string& name) {
  return std::max({rep.counter("BM_sgemm_model_shape/" + name, "GFLOP/s"),
                   rep.counter("BM_sgemm_1thread/" + name, "GFLOP/s"),
                   rep.counter("BM_onednn_model_shape/" + name, "GFLOP/s")});
}

// Why the bf16 rows cannot be measured here ("" when they can).
std::string bf16_unavailable() {
  const kernels::OneDnnInfo& info = kernels::onednn_info();
  if (!info.built) return "n/a (built without oneDNN)";
  if (!info.bf16) return "n/a (no bf16 units)";
  return "";
}

struct Target {
  std::string measure, goal, now;
  bool known, met;
};

// The ceilings of the run, per config: the CPU's multiply-add ceiling (registers only), the best
// float32 and bf16 gemms at the model's shape, and the float32 step against each.
void print_ceilings(const bench::RatioReporter& rep, const std::map<std::string, Robust>& robust) {
  const double fma = rep.has(bench::kFmaName) ? rep.counter(bench::kFmaName, "GFLOP/s") : 0.0;
  std::printf(
      "\nceilings measured in this run: multiply-add ceiling (fused multiply-adds on "
      "registers only, %d threads, %s) ",
      kernels::gemm_nt_rowwise_threads(), kernels::cpu_path_name(kernels::cpu_path()));
  if (fma > 0)
    std::printf("%.1f GFLOP/s\n", fma);
  else
    std::printf("%s\n", bench::fma_ceiling_measurable() ? "not run" : "n/a (no AVX2/AVX-512 path)");
  const std::string no_bf16 = bf16_unavailable();
  for (const Cfg& c : kCfgs) {
    const auto it = robust.find(c.name);
    if (it == robust.end()) continue;
    const Robust& r = it->second;
    const double step_gf = 3 * forward_flops(c) / (r.f32_us() * 1e3);
    std::printf("  %-7s best f32 gemm %7.2f GFLOP/s (%.3f of fma), ", c.name, r.gemm_gf,
                fma > 0 ? r.gemm_gf / fma : 0.0);
    if (r.bf16_gf > 0)
      std::printf("best bf16 gemm %7.2f GFLOP/s (%.3f of fma), ", r.bf16_gf,
                  fma > 0 ? r.bf16_gf / fma : 0.0);
    else
      std::printf("bf16 gemm %s, ", c.B == 1 ? "not run" : no_bf16.c_str());
    std::printf("f32 step %.2f GFLOP/s = %.3f of the f32 gemm, %.3f of fma\n", step_gf,
                r.fraction(c), fma > 0 ? step_gf / fma : 0.0);
  }
}

// A target row from a measured ratio: `known` false prints "-" and `why` as the figure.
Target ratio_row(const std::string& measure, const char* goal, double value, bool at_least,
                 double bound, bool known, const char* fmt, const std::string& why = "not run") {
  char now[96];
  if (known)
    std::snprintf(now, sizeof now, fmt, value);
  else
    std::snprintf(now, sizeof now, "%s", why.c_str());
  return {measure, goal, now, known, known && (at_least ? value >= bound : value <= bound)};
}

// The training-speed targets, judged on the load-robust figures (best of interleaved rounds).
void print_targets(const std::map<std::string, Robust>& robust) {
  std::vector<Target> rows;
  auto find = [&](const char* name) {
    const auto it = robust.find(name);
    return it == robust.end() ? nullptr : &it->second;
  };
  const Cfg& small = kCfgs[1];
  const Cfg& medium = kCfgs[2];
  const Cfg& short_cfg = kCfgs[3];
  for (const auto& [c, goal, g] :
       {std::tuple{&medium, 0.80, ">= 0.80"}, std::tuple{&small, 0.65, ">= 0.65"},
        std::tuple{&short_cfg, 0.65, ">= 0.65"}}) {
    const Robust* r = find(c->name);
    rows.push_back(ratio_row(std::string(c->name) + ", f32: fraction of the best f32 gemm", g,
                             r ? r->fraction(*c) : 0.0, true, goal, r != nullptr, "%.3f"));
  }
  {
    const Robust* r = find(medium.name);
    const std::string no_bf16 = bf16_unavailable();
    const bool known = no_bf16.empty() && r && r->step_us[2] > 0 && r->bf16_gf > 0;
    rows.push_back(ratio_row("medium, bf16: fraction of the best bf16 gemm", ">= 0.60",
                             known ? r->bf16_fraction(medium) : 0.0, true, 0.60, known, "%.3f",
                             no_bf16.empty() ? "not run" : no_bf16));
  }
  for (const Cfg* c : {&small, &short_cfg}) {
    const Robust* r = find(c->name);
    const bool known = r && r->threads_speedup() > 0 && kernels::blas_num_threads() == 2;
    rows.push_back(ratio_row(std::string(c->name) + ": 2 threads over 1 thread", ">= 1.7x",
                             known ? r->threads_speedup() : 0.0, true, 1.7, known, "%.2fx",
                             "needs 2 threads (OPENBLAS_NUM_THREADS / cores)"));
    const bool ranks_known = known && r->ranks_speedup() > 0;
    rows.push_back(ratio_row(std::string(c->name) + ": 2 threads as 2 ranks (--ranks 2) over 1",
                             ">= 1.7x", ranks_known ? r->ranks_speedup() : 0.0, true, 1.7,
                             ranks_known, "%.2fx",
                             "needs 2 threads (OPENBLAS_NUM_THREADS / cores)"));
  }
  {
    const Robust* r = find("seed");
    rows.push_back(ratio_row("seed step", "<= 40 us", r ? r->step_us[0] : 0.0, false, 40,
                             r != nullptr, "%.1f us"));
  }
  for (const Cfg* c : {&small, &short_cfg, &medium}) {
    const Robust* r = find(c->name);
    const bool known = r && r->dropout_ratio() > 0;
    rows.push_back(ratio_row(std::string(c->name) + ": step with dropout 0.1 over without",
                             "<= 1.08x", known ? r->dropout_ratio() : 0.0, false, 1.08, known,
                             "%.3fx"));
  }
  std::printf("\ntargets (issue 42), measured in this run (best of interleaved rounds)\n");
  std::printf("%-52s %-10s %-40s %s\n", "measure", "target", "now", "");
  for (const Target& t : rows)
    std::printf("%-52s %-10s %-40s %s\n", t.measure.c_str(), t.goal.c_str(), t.now.c_str(),
                !t.known ? "-" : (t.met ? "met" : "not met"));
}

}  // namespace
}  // namespace seqtape

int main(int argc, char** argv) {
  using namespace seqtape;
  bench::RatioReporter rep;
  bench::run_benchmarks(&argc, argv, rep);
  std::printf(
      "\ntraining step (forward + backward + clip + Adam), GFLOP/s counted as 3x forward gemm "
      "FLOPs\n");
  std::printf("%-15s %-24s %12s %12s %12s %12s %10s\n", "config", "B x S/T, d/heads/layers/F",
              "us/step", "tokens/s", "GFLOP/s", "f32 gemm GF/s", "fraction");
  // f32 gemm GF/s: the fastest of OpenBLAS's configured threads, one thread, and oneDNN.
  std::vector<const Cfg*> ran;
  for (const Cfg& c : kCfgs) {
    if (!rep.has(std::string("BM_train_step/") + c.name)) continue;
    ran.push_back(&c);
    char shape[64];
    std::snprintf(shape, sizeof shape, "%lldx%lld/%lld, %lld/%lld/%lld+%lld/%lld",
                  static_cast<long long>(c.B), static_cast<long long>(c.S),
                  static_cast<long long>(c.T), static_cast<long long>(c.C),
                  static_cast<long long>(c.H), static_cast<long long>(c.layers),
                  static_cast<long long>(c.layers), static_cast<long long>(c.F));
    const double peak = sgemm_peak(rep, c.name);
    for (const char* suffix : {"", "/onednn", "/bf16", "/dropout", "/gelu"}) {
      const std::string step = std::string("BM_train_step/") + c.name + suffix;
      if (!rep.has(step)) continue;
      const double gf = rep.counter(step, "GFLOP/s");
      std::printf("%-15s %-24s %12.1f %12.0f %12.2f %12.2f %10.3f\n",
                  (c.name + std::string(suffix)).c_str(), shape, rep.ns(step) / 1e3,
                  rep.counter(step, "tokens/s"), gf, peak, peak > 0 ? gf / peak : 0.0);
    }
  }
  if (rep.has("BM_dropout/bits") && rep.has("BM_dropout/apply") && rep.has("BM_dropout/scale"))
    std::printf(
        "\ndropout mask over %lld floats, one thread (%s path): keep bits %.3f ns/element, a pass "
        "reading them %.3f, a plain scale %.3f (%.2fx and %.2fx of it)\n",
        static_cast<long long>(kDropElems), kernels::cpu_path_name(kernels::cpu_path()),
        rep.ns("BM_dropout/bits") / kDropElems, rep.ns("BM_dropout/apply") / kDropElems,
        rep.ns("BM_dropout/scale") / kDropElems,
        rep.ns("BM_dropout/bits") / rep.ns("BM_dropout/scale"),
        rep.ns("BM_dropout/apply") / rep.ns("BM_dropout/scale"));
  const kernels::OneDnnInfo& info = kernels::onednn_info();
  if (info.built)
    std::printf(
        "\noneDNN %s: ISA %s (bf16 units: %s, AMX: %s); medium's largest product runs "
        "on %s in float32, %s in bf16\n",
        info.version.c_str(), info.isa.c_str(), info.bf16 ? "yes" : "no", info.amx ? "yes" : "no",
        kernels::onednn_impl_name(32 * 32, 1024, 256, false).c_str(),
        info.bf16 ? kernels::onednn_impl_name(32 * 32, 1024, 256, true).c_str() : "-");
  else
    std::printf("\nbuilt without oneDNN: float32 OpenBLAS rows only\n");
  std::printf(
      "\nthe same fractions, load-robust: best of 8 rounds alternating training steps (each "
      "backend and precision, and float32 with dropout %.1f) with the model's largest gemms\n",
      kDropout);
  std::map<std::string, Robust> robust;
  for (const Cfg* c : ran) robust[c->name] = interleaved(*c, 8);
  print_ceilings(rep, robust);
  print_targets(robust);
  // Profiled steps are slower (two clock reads per op): the table's shares are what count.
  for (const Cfg* c : ran)
    for (Mode m : kModes)
      if (m == Mode::OpenBLAS || (c->B > 1 && mode_runs(m)))
        profile_config(*c, m, c->B == 1 ? 2000 : 20);
  for (const Cfg* c : ran)
    if (c->B > 1) profile_config(*c, Mode::OpenBLAS, 20, kDropout);
  benchmark::Shutdown();
  return 0;
}
