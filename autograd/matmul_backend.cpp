// The matmul backend layer (matmul_backend.h): routing of float gemms between OpenBLAS and
// oneDNN, oneDNN's matmul primitives cached per shape, and the bf16 operand rounding.
#include "autograd/matmul_backend.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <tuple>
#include <vector>

#include "autograd/kernels.h"
#include "autograd/tensor.h"

#ifdef SEQTAPE_HAVE_ONEDNN
#include <immintrin.h>
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace seqtape::kernels {

namespace {

std::atomic<MatmulBackend> g_backend{MatmulBackend::OpenBLAS};
std::atomic<Precision> g_precision{Precision::F32};
std::atomic<int64_t> g_openblas{0}, g_onednn_f32{0}, g_onednn_bf16{0}, g_primitives{0};

}  // namespace

const char* matmul_backend_name(MatmulBackend b) {
  switch (b) {
    case MatmulBackend::OpenBLAS:
      return "openblas";
    case MatmulBackend::OneDNN:
      return "onednn";
    case MatmulBackend::Auto:
      return "auto";
  }
  return "?";
}

const char* precision_name(Precision p) {
  return p == Precision::BF16 ? "bf16" : "f32";
}

MatmulBackend parse_matmul_backend(const std::string& s) {
  for (MatmulBackend b : {MatmulBackend::OpenBLAS, MatmulBackend::OneDNN, MatmulBackend::Auto})
    if (s == matmul_backend_name(b)) return b;
  throw Error("unknown matmul backend '" + s + "' (choose auto, openblas or onednn)");
}

Precision parse_precision(const std::string& s) {
  if (s == "f32" || s == "float32" || s == "fp32") return Precision::F32;
  if (s == "bf16" || s == "bfloat16") return Precision::BF16;
  throw Error("unknown precision '" + s + "' (choose f32 or bf16)");
}

float round_to_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  if ((u & 0x7f800000u) == 0)
    u &= 0x80000000u;  // subnormal: signed zero, as the CPU's conversion does
  else if ((u & 0x7fffffffu) > 0x7f800000u)
    u = (u | 0x00400000u) & 0xffff0000u;  // NaN: keep it a (quiet) NaN
  else
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;  // nearest, ties to even
  float y;
  std::memcpy(&y, &u, 4);
  return y;
}

std::string matmul_problem(MatmulBackend b, Precision p) {
  const OneDnnInfo& info = onednn_info();
  const bool wants_onednn = b != MatmulBackend::OpenBLAS || p == Precision::BF16;
  if (wants_onednn && !info.built)
    return std::string(p == Precision::BF16 ? "--precision bf16" : "--matmul ") +
           (p == Precision::BF16 ? "" : matmul_backend_name(b)) +
           " needs oneDNN, and this seqtape was built without it (install Debian's libdnnl-dev "
           "and rebuild)";
  if (p == Precision::BF16 && !info.bf16)
    return "--precision bf16 needs a CPU with bfloat16 units (AVX-512 BF16 or AMX); oneDNN " +
           info.version + " reports this CPU's best ISA as " + info.isa;
  return "";
}

void set_matmul(MatmulBackend b, Precision p) {
  if (std::string why = matmul_problem(b, p); !why.empty()) throw Error(why);
  g_backend = b;
  g_precision = p;
}
MatmulBackend matmul_backend() {
  return g_backend;
}
Precision matmul_precision() {
  return g_precision;
}

MatmulScope::MatmulScope(MatmulBackend b, Precision p) : prev_b_(g_backend), prev_p_(g_precision) {
  set_matmul(b, p);
}
MatmulScope::~MatmulScope() {
  g_backend = prev_b_;
  g_precision = prev_p_;
}

MatmulCounts matmul_counts() {
  return {g_openblas.load(), g_onednn_f32.load(), g_onednn_bf16.load(), g_primitives.load()};
}

void detail::count_openblas_gemm() {
  g_openblas.fetch_add(1, std::memory_order_relaxed);
}

#ifndef SEQTAPE_HAVE_ONEDNN

const OneDnnInfo& onednn_info() {
  static const OneDnnInfo info{false, "", "", false, false};
  return info;
}

std::string onednn_impl_name(int64_t, int64_t, int64_t, bool) {
  return "";
}

bool detail::gemm_f32_routed(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t,
                             const float*, int64_t, float, float*, int64_t) {
  return false;
}

#else

namespace {

const char* isa_name(dnnl::cpu_isa isa) {
  using I = dnnl::cpu_isa;
  switch (isa) {
    case I::sse41:
      return "sse41";
    case I::avx:
      return "avx";
    case I::avx2:
      return "avx2";
    case I::avx2_vnni:
      return "avx2_vnni";
    case I::avx512_mic:
      return "avx512_mic";
    case I::avx512_mic_4ops:
      return "avx512_mic_4ops";
    case I::avx512_core:
      return "avx512_core";
    case I::avx512_core_vnni:
      return "avx512_core_vnni";
    case I::avx512_core_bf16:
      return "avx512_core_bf16";
    case I::avx512_core_amx:
      return "avx512_core_amx_bf16";
    default:
      return "unknown";
  }
}

// Threads a oneDNN product runs on. Debian's oneDNN threads with OpenMP, whose idle workers
// spin for a while after every parallel region unless OMP_WAIT_POLICY=passive was set before
// the program started (libgomp reads it once, at load). Spinning workers fight OpenBLAS's and
// seqtape's own threads for the cores: on this project's 2-core machine, under load, the
// small model's largest product took 11.8 ms on two spinning threads against 0.30 ms on one
// (0.57 ms for OpenBLAS on one). So oneDNN runs on one thread, which never starts a worker,
// unless the environment made OpenMP's workers sleep; then big products (>= 2^27 FLOPs, the
// line OpenBLAS's own threading draws, kernels.cpp) get the BLAS thread budget.
int onednn_threads(int64_t m, int64_t n, int64_t k) {
  static const bool passive = [] {
    const char* p = std::getenv("OMP_WAIT_POLICY");
    return p != nullptr && (std::strcmp(p, "passive") == 0 || std::strcmp(p, "PASSIVE") == 0);
  }();
  const double flops =
      2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  return passive && flops >= 134217728.0 ? std::max(1, blas_num_threads()) : 1;
}

// One cached product: the primitive and the memory objects whose data handles each call sets.
struct Product {
  dnnl::matmul prim;
  dnnl::memory src, wei, dst;
  std::string impl;
};

using ProductKey = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                              float, float, bool, int>;

class OneDnn {
 public:
  OneDnn() : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {}

  // C = alpha·op(A)·op(B) + beta·C; A and B float32 (bf16: already rounded into dense bf16
  // copies laid out like op's storage with leading dimensions lda, ldb).
  void run(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const void* a,
           int64_t lda, const void* b, int64_t ldb, float beta, float* c, int64_t ldc, bool bf16) {
    const int threads = onednn_threads(m, n, k);
    omp_set_num_threads(threads);
    Product& p = product({ta, tb, m, n, k, lda, ldb, ldc, alpha, beta, bf16, threads});
    p.src.set_data_handle(const_cast<void*>(a));
    p.wei.set_data_handle(const_cast<void*>(b));
    p.dst.set_data_handle(c);
    p.prim.execute(stream_,
                   {{DNNL_ARG_SRC, p.src}, {DNNL_ARG_WEIGHTS, p.wei}, {DNNL_ARG_DST, p.dst}});
    stream_.wait();
  }

  std::string impl(int64_t m, int64_t n, int64_t k, bool bf16) {
    return product({false, false, m, n, k, k, n, n, 1.f, 0.f, bf16, onednn_threads(m, n, k)}).impl;
  }

 private:
  Product& product(const ProductKey& key) {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = cache_.find(key); it != cache_.end()) return it->second;
    // Shapes vary with the batch's sequence lengths: bound the cache (oneDNN keeps its own
    // cache of kernels too, so a rebuilt primitive is cheap).
    if (cache_.size() >= 1024) cache_.clear();
    const auto [ta, tb, m, n, k, lda, ldb, ldc, alpha, beta, bf16, threads] = key;
    using dt = dnnl::memory::data_type;
    const dt in = bf16 ? dt::bf16 : dt::f32;
    const dnnl::memory::desc src({m, k}, in,
                                 ta ? dnnl::memory::dims{1, lda} : dnnl::memory::dims{lda, 1});
    const dnnl::memory::desc wei({k, n}, in,
                                 tb ? dnnl::memory::dims{1, ldb} : dnnl::memory::dims{ldb, 1});
    const dnnl::memory::desc dst({m, n}, dt::f32, dnnl::memory::dims{ldc, 1});
    dnnl::primitive_attr attr;
    if (alpha != 1.f) attr.set_output_scales(0, {alpha});
    if (beta != 0.f) {
      dnnl::post_ops ops;
      ops.append_sum(beta);
      attr.set_post_ops(ops);
    }
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, wei, dst), attr, engine_);
    Product p{dnnl::matmul(pd), dnnl::memory(src, engine_, nullptr),
              dnnl::memory(wei, engine_, nullptr), dnnl::memory(dst, engine_, nullptr),
              pd.impl_info_str()};
    g_primitives.fetch_add(1, std::memory_order_relaxed);
    return cache_.emplace(key, std::move(p)).first->second;
  }

  dnnl::engine engine_;
  dnnl::stream stream_;
  std::mutex mu_;
  std::map<ProductKey, Product> cache_;
};

OneDnn& onednn() {
  static OneDnn instance;
  return instance;
}

// x[0..n) rounded to bf16 by the CPU's own conversion (VCVTNEPS2BF16: nearest even, NaN kept,
// subnormals to zero; round_to_bf16 is the same in C++). The bf16 path runs only on CPUs
// oneDNN found bf16 units on (onednn_info().bf16), which all have this instruction.
__attribute__((target("avx512f,avx512bf16"))) void floats_to_bf16(const float* x, int64_t n,
                                                                  uint16_t* y) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256bh h = _mm512_cvtneps_pbh(_mm512_loadu_ps(x + i));
    std::memcpy(y + i, &h, sizeof h);
  }
  if (i < n) {
    const __mmask16 tail = static_cast<__mmask16>((1u << (n - i)) - 1);
    const __m256bh h = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(tail, x + i));
    std::memcpy(y + i, &h, static_cast<size_t>(n - i) * 2);
  }
}

// A [rows, cols] float block with row stride ld, rounded to bf16 into a dense [rows, cols].
void to_bf16(const float* x, int64_t rows, int64_t cols, int64_t ld, std::vector<uint16_t>& out) {
  out.resize(static_cast<size_t>(rows * cols));
  if (ld == cols) return floats_to_bf16(x, rows * cols, out.data());
  for (int64_t r = 0; r < rows; ++r) floats_to_bf16(x + r * ld, cols, out.data() + r * cols);
}

void run_bf16(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a,
              int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  thread_local std::vector<uint16_t> a16, b16;
  // Stored A is [M,K] (or [K,M] transposed), stored B [K,N] (or [N,K]): copied dense.
  to_bf16(a, ta ? k : m, ta ? m : k, lda, a16);
  to_bf16(b, tb ? n : k, tb ? k : n, ldb, b16);
  onednn().run(ta, tb, m, n, k, alpha, a16.data(), ta ? m : k, b16.data(), tb ? k : n, beta, c, ldc,
               true);
  g_onednn_bf16.fetch_add(1, std::memory_order_relaxed);
}

// auto: per shape, the faster of OpenBLAS and oneDNN float32, timed the first time the shape
// is seen (best of 3 each, on scratch outputs) and remembered for the process.
using ShapeKey = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t>;

bool auto_picks_onednn(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a,
                       int64_t lda, const float* b, int64_t ldb, int64_t ldc) {
  static std::mutex mu;
  static std::map<ShapeKey, bool> table;
  const ShapeKey key{ta, tb, m, n, k, lda, ldb};
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = table.find(key); it != table.end()) return it->second;
  }
  std::vector<float> scratch(static_cast<size_t>(m * ldc));
  auto best_of = [&](auto&& f) {
    double best = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
      const auto t0 = std::chrono::steady_clock::now();
      f();
      best = std::min(best,
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    return best;
  };
  const double blas = best_of([&] {
    MatmulScope only_blas(MatmulBackend::OpenBLAS, Precision::F32);
    gemm<float>(ta, tb, m, n, k, 1.f, a, lda, b, ldb, 0.f, scratch.data(), ldc);
  });
  const double dnn = best_of(
      [&] { onednn().run(ta, tb, m, n, k, 1.f, a, lda, b, ldb, 0.f, scratch.data(), ldc, false); });
  const bool pick = dnn < blas;
  std::lock_guard<std::mutex> lock(mu);
  table[key] = pick;
  return pick;
}

}  // namespace

const OneDnnInfo& onednn_info() {
  static const OneDnnInfo info = [] {
    OneDnnInfo i;
    i.built = true;
    const dnnl_version_t* v = dnnl_version();
    i.version =
        std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
    const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
    i.isa = isa_name(isa);
    i.amx = isa == dnnl::cpu_isa::avx512_core_amx;
    i.bf16 = i.amx || isa == dnnl::cpu_isa::avx512_core_bf16;
    return i;
  }();
  return info;
}

std::string onednn_impl_name(int64_t m, int64_t n, int64_t k, bool bf16) {
  return onednn().impl(m, n, k, bf16);
}

bool detail::gemm_f32_routed(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                             const float* a, int64_t lda, const float* b, int64_t ldb, float beta,
                             float* c, int64_t ldc) {
  const MatmulBackend backend = g_backend;
  if (g_precision == Precision::BF16) {
    run_bf16(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    return true;
  }
  if (backend == MatmulBackend::OpenBLAS ||
      (backend == MatmulBackend::Auto && !auto_picks_onednn(ta, tb, m, n, k, a, lda, b, ldb, ldc)))
    return false;
  onednn().run(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, false);
  g_onednn_f32.fetch_add(1, std::memory_order_relaxed);
  return true;
}

#endif

}  // namespace seqtape::kernels
