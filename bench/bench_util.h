#pragma once
// Shared by the benchmark programs: a reporter that keeps every run's time so that ratios
// between runs of the same process (op vs raw BLAS, cached vs uncached) are printed at the
// end, and the OpenBLAS banner with the generic-core warning.

#include <benchmark/benchmark.h>

#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <vector>

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

}  // namespace seqtape::bench
