#pragma once
// Shared by the benchmark programs: a reporter that keeps every run's time so that ratios
// between runs of the same process (op vs raw BLAS, cached vs uncached) are printed at the
// end, and the OpenBLAS banner with the generic-core warning.

#include <benchmark/benchmark.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <cstdint>
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "tensor/cpu_path.h"
#include "tensor/kernels.h"

namespace seqtape::bench {

class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      if (r.error_occurred) continue;
      // With repetitions the median stands for the benchmark; otherwise its single run.
      const bool median = r.run_type == Run::RT_Aggregate && r.aggregate_name == "median";
      if (r.run_type != Run::RT_Iteration && !median) continue;
      // Looked up as "function/args", without "/repeats:N" or "/real_time".
      std::string name = r.run_name.function_name;
      if (!r.run_name.args.empty()) name += "/" + r.run_name.args;
      if (!median && medians_.count(name)) continue;
      if (median) medians_.insert(name);
      ns_per_iter_[name] = r.GetAdjustedRealTime() * to_ns(r.time_unit);
      counters_[name] = r.counters;
    }
    ConsoleReporter::ReportRuns(runs);
  }
  bool has(const std::string& name) const { return ns_per_iter_.count(name) > 0; }
  double ns(const std::string& name) const {
    auto it = ns_per_iter_.find(name);
    return it == ns_per_iter_.end() ? 0.0 : it->second;
  }
  double counter(const std::string& name, const std::string& c) const {
    auto it = counters_.find(name);
    if (it == counters_.end()) return 0.0;
    auto jt = it->second.find(c);
    return jt == it->second.end() ? 0.0 : static_cast<double>(jt->second);
  }

 private:
  static double to_ns(benchmark::TimeUnit u) {
    switch (u) {
      case benchmark::kNanosecond:
        return 1;
      case benchmark::kMicrosecond:
        return 1e3;
      case benchmark::kMillisecond:
        return 1e6;
      default:
        return 1e9;
    }
  }
  std::map<std::string, double> ns_per_iter_;
  std::set<std::string> medians_;
  std::map<std::string, benchmark::UserCounters> counters_;
};

inline void print_blas_banner() {
  std::printf("OpenBLAS core: %s, threads: %d\n", kernels::blas_core_name().c_str(),
              kernels::blas_num_threads());
  if (kernels::blas_core_is_generic_on_modern_cpu())
    std::printf(
        "WARNING: OpenBLAS runs the generic '%s' kernel on a CPU with AVX2/AVX-512; gemm is "
        "several times slower than it could be. Set OPENBLAS_CORETYPE (e.g. "
        "OPENBLAS_CORETYPE=SkylakeX or Haswell) in your shell to fix it.\n",
        kernels::blas_core_name().c_str());
  // OpenBLAS 0.3.21 takes recent AMD CPUs with AVX-512 for Zen (AVX2 kernels): its AVX-512
  // kernels are there, but only OPENBLAS_CORETYPE picks them. The benchmarks keep the detected
  // core (what a user gets by default) and say so.
  const std::string core = kernels::blas_core_name();
  if ((core == "Haswell" || core == "Zen") && __builtin_cpu_supports("avx512f"))
    std::printf(
        "note: OpenBLAS runs its AVX2 '%s' kernels on a CPU with AVX-512; "
        "OPENBLAS_CORETYPE=SkylakeX "
        "in your shell selects its AVX-512 kernels (on the project's 2-core AMD machine: 1024^3 "
        "sgemm about 320 instead of 180 GFLOP/s). The figures below use the detected core.\n",
        core.c_str());
}

// Google Benchmark's set-up, the banner, then every benchmark the flags select, reported
// into rep (whose times the caller's summary table reads).
inline void run_benchmarks(int* argc, char** argv, RatioReporter& rep) {
  benchmark::Initialize(argc, argv);
  print_blas_banner();
  benchmark::RunSpecifiedBenchmarks(&rep);
}

// The CPU's multiply-add ceiling in the same run: fused multiply-adds on registers only (no
// memory operand), in more independent chains than the FMA units' latency × throughput, on each
// of the decoder's threads (kernels::gemm_nt_rowwise_threads(), through the same pool). No
// product of any shape, by any library, can run faster per FLOP; sgemm's best reaches 0.8-0.9
// of it. Measured on the vector path the project's kernels take (AVX-512 or AVX2): x86-64 only.
// bench_decode and bench_train both print their figures against it.
inline const char* const kFmaName = "fma/ceiling";
#if defined(__x86_64__)
constexpr int64_t kFmaIters = int64_t(1) << 20;  // per chunk
constexpr int kFmaChunksPerThread = 8;  // taken as threads come free, so a late helper costs little
constexpr int kChains512 = 24, kChains256 = 12;  // 16 and 8 floats each

// One chunk: iters × Chains fused multiply-adds of a vector each; returns a sum that depends on
// all of them (so the compiler keeps them; stored and summed, as GCC 12's _mm512_reduce_add_ps
// warns of an uninitialized operand).
#define SEQTAPE_FMA_CHAINS(name, isa, Vec, Chains, set1, fmadd, add, store)               \
  __attribute__((target(isa))) inline float name(int64_t iters) {                         \
    Vec a[Chains];                                                                        \
    const Vec b = set1(0.999999f), c = set1(1e-7f);                                       \
    for (int i = 0; i < Chains; ++i) a[i] = set1(float(i));                               \
    for (int64_t it = 0; it < iters; ++it) {                                              \
      _Pragma("GCC unroll 32") for (int i = 0; i < Chains; ++i) a[i] = fmadd(a[i], b, c); \
    }                                                                                     \
    Vec s = a[0];                                                                         \
    for (int i = 1; i < Chains; ++i) s = add(s, a[i]);                                    \
    alignas(64) float f[sizeof(Vec) / sizeof(float)];                                     \
    store(f, s);                                                                          \
    float sum = 0;                                                                        \
    for (float x : f) sum += x;                                                           \
    return sum;                                                                           \
  }
SEQTAPE_FMA_CHAINS(fma_chains_avx512, "avx512f", __m512, kChains512, _mm512_set1_ps,
                   _mm512_fmadd_ps, _mm512_add_ps, _mm512_store_ps)
SEQTAPE_FMA_CHAINS(fma_chains_avx2, "avx2,fma", __m256, kChains256, _mm256_set1_ps, _mm256_fmadd_ps,
                   _mm256_add_ps, _mm256_store_ps)
#undef SEQTAPE_FMA_CHAINS

// FLOPs of one chunk on this process's path; 0 on the portable path (not measured).
inline double fma_chunk_flops() {
  switch (kernels::cpu_path()) {
    case kernels::CpuPath::Avx512:
      return 2.0 * kChains512 * 16 * double(kFmaIters);
    case kernels::CpuPath::Avx2:
      return 2.0 * kChains256 * 8 * double(kFmaIters);
    case kernels::CpuPath::Portable:
      break;
  }
  return 0;
}

inline void BM_fma_ceiling(benchmark::State& st) {
  const bool wide = kernels::cpu_path() == kernels::CpuPath::Avx512;
  const int64_t chunks = int64_t(kFmaChunksPerThread) * kernels::gemm_nt_rowwise_threads();
  std::vector<float> sink(static_cast<size_t>(chunks));
  auto chunk = [&](int64_t c) {
    sink[size_t(c)] = wide ? fma_chains_avx512(kFmaIters) : fma_chains_avx2(kFmaIters);
  };
  for (auto _ : st) {
    kernels::parallel_for(chunks, chunk);
    benchmark::DoNotOptimize(sink.data());
  }
  st.counters["GFLOP/s"] =
      benchmark::Counter(fma_chunk_flops() * double(chunks) * double(st.iterations()) / 1e9,
                         benchmark::Counter::kIsRate);
}
#endif

// Can this process's path measure kFmaName (AVX-512 or AVX2)?
inline bool fma_ceiling_measurable() {
#if defined(__x86_64__)
  return fma_chunk_flops() > 0;
#else
  return false;
#endif
}

// Registers kFmaName where this process's path can measure it.
inline void register_fma_ceiling() {
#if defined(__x86_64__)
  if (fma_ceiling_measurable())
    benchmark::RegisterBenchmark(kFmaName, BM_fma_ceiling)
        ->UseRealTime()
        ->Repetitions(3)
        ->Unit(benchmark::kMillisecond);
#endif
}

}  // namespace seqtape::bench
