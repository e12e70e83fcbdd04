// The matmul backend layer (matmul_backend.h): routing of float gemms between OpenBLAS and
// oneDNN, oneDNN's matmul primitives cached per shape, and the bf16 operand rounding.
#include "tensor/matmul_backend.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <limits>
#include <map>
#include <mutex>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tensor/kernels.h"
#include "tensor/tensor.h"

#ifdef SEQTAPE_HAVE_ONEDNN
#include <immintrin.h>
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace seqtape::kernels {

namespace {

std::atomic<MatmulBackend> g_backend{MatmulBackend::OpenBLAS};
std::atomic<Precision> g_precision{Precision::F32};
std::atomic<int64_t> g_openblas{0}, g_onednn_f32{0}, g_onednn_bf16{0}, g_primitives{0}, g_split{0},
    g_bf16_values{0};

// This thread's memos, innermost last (Bf16MemoScope).
thread_local std::vector<Bf16Memo*> t_memos;

// x [rows, cols] (row stride ld) rounded to bf16 into y [rows, cols], dense: the CPU's
// conversion where the build has oneDNN (below), round_to_bf16 elsewhere.
void round_rows_dense(const float* x, int64_t rows, int64_t cols, int64_t ld, uint16_t* y);

}  // namespace

const uint16_t* Bf16Memo::find(const float* src, int64_t rows, int64_t cols, int64_t ld) const {
  for (const Entry& e : entries_)
    if (e.src == src && e.rows == rows && e.cols == cols && e.ld == ld)
      return reinterpret_cast<const uint16_t*>(e.storage.data<float>());
  return nullptr;
}

const uint16_t* Bf16Memo::add(const float* src, int64_t rows, int64_t cols, int64_t ld) {
  // from the tensor pool, as a step's other buffers (with a fresh heap allocation per product,
  // 300 steps of the CMUdict recipe took longer than without the memo); every element is
  // written below
  Tensor storage = Tensor::empty({(rows * cols + 1) / 2}, DType::F32);
  uint16_t* y = reinterpret_cast<uint16_t*>(storage.data<float>());
  parallel_range(rows, double(cols) * kCostSimple, [&](int64_t r0, int64_t r1) {
    round_rows_dense(src + r0 * ld, r1 - r0, cols, ld, y + r0 * cols);
  });
  g_bf16_values.fetch_add(rows * cols, std::memory_order_relaxed);
  entries_.push_back({src, rows, cols, ld, std::move(storage)});
  return y;
}

Bf16MemoScope::Bf16MemoScope(Bf16Memo* memo) : pushed_(memo != nullptr) {
  if (pushed_) t_memos.push_back(memo);
}
Bf16MemoScope::~Bf16MemoScope() {
  if (pushed_) t_memos.pop_back();
}

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
  const std::string flag = p == Precision::BF16 ? std::string("--precision bf16")
                                                : std::string("--matmul ") + matmul_backend_name(b);
  if (wants_onednn && !info.built)
    return flag +
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

Idle idle_between_ops() {
  return g_backend == MatmulBackend::OneDNN || g_precision == Precision::BF16 ? Idle::Poll
                                                                              : Idle::Sleep;
}

MatmulScope::MatmulScope(MatmulBackend b, Precision p) : prev_b_(g_backend), prev_p_(g_precision) {
  set_matmul(b, p);
}
MatmulScope::~MatmulScope() {
  g_backend = prev_b_;
  g_precision = prev_p_;
}

MatmulCounts matmul_counts() {
  return {g_openblas.load(),   g_onednn_f32.load(), g_onednn_bf16.load(),
          g_primitives.load(), g_split.load(),      g_bf16_values.load()};
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
                             const float*, int64_t, float, float*, int64_t, const GemmBatch&,
                             const float*, bool) {
  return false;
}

void detail::round_rows_to_bf16(const float* x, int64_t rows, int64_t cols, int64_t ld, float* y) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) y[r * cols + j] = round_to_bf16(x[r * ld + j]);
}

namespace {
void round_rows_dense(const float* x, int64_t rows, int64_t cols, int64_t ld, uint16_t* y) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) {
      const float v = round_to_bf16(x[r * ld + j]);
      uint32_t u;
      std::memcpy(&u, &v, 4);
      y[r * cols + j] = static_cast<uint16_t>(u >> 16);
    }
}
}  // namespace

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
// seqtape's own threads for the cores: under load, a product on two spinning threads took many
// times as long as on one (docs/performance.md). So oneDNN runs on one thread (never a worker),
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
  dnnl::memory src, wei, dst, bia;
  std::string impl;
  std::unordered_map<int, dnnl::memory> args;  // built once: execute() takes them by reference
};

// A float gemm as kernels::gemm / gemm_batched describe it.
struct Gemm {
  bool ta, tb;
  int64_t m, n, k;
  float alpha;
  const float* a;
  int64_t lda;
  const float* b;
  int64_t ldb;
  float beta;
  float* c;
  int64_t ldc;
  GemmBatch batch;
  const float* bias = nullptr;  // [N], added to every row of C (non-batched, alpha 1, beta 0)
  bool relu = false;            // then C = max(C, 0) (non-batched, alpha 1, beta 0)
};

// Everything a primitive depends on: layouts, strides, scales, operand type, threads, batch,
// bias, ReLU.
using ProductKey = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                              float, float, bool, int, std::array<int64_t, 8>, bool, bool>;

std::array<int64_t, 8> batch_key(const GemmBatch& bt) {
  return {bt.n0, bt.n1, bt.sa0, bt.sa1, bt.sb0, bt.sb1, bt.sc0, bt.sc1};
}

bool batched(const GemmBatch& bt) {
  return bt.n0 * bt.n1 > 1;
}

// A matrix operand's description: [rows, cols] (the op's view, e.g. op(A) is [M, K]) stored
// row-major with leading dimension ld, transposed when t; batched operands get two leading
// batch axes (size 1, broadcast, where the stride is 0).
dnnl::memory::desc operand(int64_t rows, int64_t cols, bool t, int64_t ld,
                           dnnl::memory::data_type dt, const GemmBatch& bt, int64_t s0,
                           int64_t s1) {
  const int64_t rs = t ? 1 : ld, cs = t ? ld : 1;
  if (!batched(bt)) return dnnl::memory::desc({rows, cols}, dt, dnnl::memory::dims{rs, cs});
  return dnnl::memory::desc(
      {s0 || bt.n0 == 1 ? bt.n0 : 1, s1 || bt.n1 == 1 ? bt.n1 : 1, rows, cols}, dt,
      dnnl::memory::dims{s0, s1, rs, cs});
}

// oneDNN's side of this thread: its own stream and primitives (a primitive may run on several
// threads at once, but a stream and the cached memory objects may not), so gemms on different
// threads never share state.
class OneDnn {
 public:
  OneDnn() : engine_(dnnl::engine::kind::cpu, 0), stream_(engine_) {}

  // g's product; bf16: g.a and g.b point at bf16 copies laid out as g describes.
  void run(const Gemm& g, bool bf16) {
    const ProductKey k = key(g, bf16);
    omp_set_num_threads(std::get<11>(k));
    Product& p = product(k);
    p.src.set_data_handle(const_cast<float*>(g.a));
    p.wei.set_data_handle(const_cast<float*>(g.b));
    p.dst.set_data_handle(g.c);
    if (g.bias) p.bia.set_data_handle(const_cast<float*>(g.bias));
    p.prim.execute(stream_, p.args);
    stream_.wait();
  }

  // Makes g's primitive now (on this thread), so that a layout oneDNN cannot run throws here.
  void prepare(const Gemm& g, bool bf16) { product(key(g, bf16)); }

  std::string impl(int64_t m, int64_t n, int64_t k, bool bf16) {
    return product({false, false, m, n, k, k, n, n, 1.f, 0.f, bf16, onednn_threads(m, n, k),
                    batch_key(GemmBatch{}), false, false})
        .impl;
  }

 private:
  // g's key, with the threads its product runs on (onednn_threads).
  static ProductKey key(const Gemm& g, bool bf16) {
    const int threads = onednn_threads(g.m, g.n, g.k * g.batch.n0 * g.batch.n1);
    return {g.ta,
            g.tb,
            g.m,
            g.n,
            g.k,
            g.lda,
            g.ldb,
            g.ldc,
            g.alpha,
            g.beta,
            bf16,
            threads,
            batch_key(g.batch),
            g.bias != nullptr,
            g.relu};
  }

  Product& product(const ProductKey& key) {
    if (auto it = cache_.find(key); it != cache_.end()) return it->second;
    // Shapes vary with the batch's sequence lengths: bound the cache (oneDNN keeps its own
    // cache of kernels too, so a rebuilt primitive is cheap).
    if (cache_.size() >= 1024) cache_.clear();
    const auto& [ta, tb, m, n, k, lda, ldb, ldc, alpha, beta, bf16, threads, bk, bias, relu] = key;
    const GemmBatch bt{bk[0], bk[1], bk[2], bk[3], bk[4], bk[5], bk[6], bk[7]};
    using dt = dnnl::memory::data_type;
    const dt in = bf16 ? dt::bf16 : dt::f32;
    const dnnl::memory::desc src = operand(m, k, ta, lda, in, bt, bt.sa0, bt.sa1);
    const dnnl::memory::desc wei = operand(k, n, tb, ldb, in, bt, bt.sb0, bt.sb1);
    const dnnl::memory::desc dst = operand(m, n, false, ldc, dt::f32, bt, bt.sc0, bt.sc1);
    dnnl::primitive_attr attr;
    if (alpha != 1.f) attr.set_output_scales(0, {alpha});
    dnnl::post_ops ops;
    if (beta != 0.f) ops.append_sum(beta);
    // ReLU as clip to [0, +inf), defined as max(0, x): +0 for a negative x, as
    // kernels::activate gives (eltwise_relu is defined as alpha·x there, which allows -0)
    if (relu)
      ops.append_eltwise(1.f, dnnl::algorithm::eltwise_clip, 0.f,
                         std::numeric_limits<float>::infinity());
    if (ops.len() > 0) attr.set_post_ops(ops);
    // The bias: a float32 row [1, N] broadcast over C's rows.
    const dnnl::memory::desc bia =
        bias ? dnnl::memory::desc({1, n}, dt::f32, dnnl::memory::dims{n, 1}) : dnnl::memory::desc();
    const dnnl::matmul::primitive_desc pd(
        bias ? dnnl::matmul::desc(src, wei, bia, dst) : dnnl::matmul::desc(src, wei, dst), attr,
        engine_);
    Product p{dnnl::matmul(pd),
              dnnl::memory(src, engine_, nullptr),
              dnnl::memory(wei, engine_, nullptr),
              dnnl::memory(dst, engine_, nullptr),
              bias ? dnnl::memory(bia, engine_, nullptr) : dnnl::memory(),
              pd.impl_info_str(),
              {}};
    p.args = {{DNNL_ARG_SRC, p.src}, {DNNL_ARG_WEIGHTS, p.wei}, {DNNL_ARG_DST, p.dst}};
    if (bias) p.args[DNNL_ARG_BIAS] = p.bia;
    g_primitives.fetch_add(1, std::memory_order_relaxed);
    return cache_.emplace(key, std::move(p)).first->second;
  }

  dnnl::engine engine_;
  dnnl::stream stream_;
  std::map<ProductKey, Product> cache_;
};

OneDnn& onednn() {
  thread_local OneDnn instance;
  return instance;
}

// The conversions of the bf16 path, each a loop over the rows of a block with the per-vector
// work inlined: the rows are as short as one head's 32 values, or the 10 of a head's scores, so
// a call per row added its own cost to every short row (attention's rounding, per head and per
// product, was 9 % of the samples of the G2P model's bf16 step on a Zen 5: docs/performance.md).
// The rounding is the CPU's own conversion (VCVTNEPS2BF16: nearest even, NaN kept, subnormals to
// zero; round_to_bf16 is the same in C++). The bf16 path runs only on CPUs oneDNN found bf16 units
// on (onednn_info().bf16), which all have this instruction.
#define SEQTAPE_BF16_TARGET \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"), always_inline))

// The first `cnt` lanes (cnt <= 16).
SEQTAPE_BF16_TARGET inline __mmask16 first_lanes(int64_t cnt) {
  return static_cast<__mmask16>((1u << cnt) - 1);
}

// The lanes of `mask` of one vector of x rounded to bf16 into y: as bf16 (Out uint16_t) or
// widened back to float (Out float; by hand, bf16 being a float's high half, in the masked forms:
// GCC 12 warns that the unmasked ones' undefined pass-through "may be used uninitialized").
template <typename Out>
SEQTAPE_BF16_TARGET inline void bf16_lanes(const float* x, Out* y, __mmask16 mask) {
  const __m256bh h = _mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mask, x));
  __m256i u;
  std::memcpy(&u, &h, sizeof u);
  if constexpr (std::is_same_v<Out, float>) {
    const __m512i w = _mm512_maskz_slli_epi32(0xffff, _mm512_maskz_cvtepu16_epi32(0xffff, u), 16);
    _mm512_mask_storeu_ps(y, mask, _mm512_castsi512_ps(w));
  } else {
    _mm256_mask_storeu_epi16(y, mask, u);
  }
}

// x [rows, cols] (row stride ld) rounded by bf16_lanes into y [rows, cols], dense (a dense x as
// one run of rows·cols values).
template <typename Out>
SEQTAPE_BF16_TARGET inline void rows_by_lanes(const float* x, int64_t rows, int64_t cols,
                                              int64_t ld, Out* y) {
  if (ld == cols) {
    cols *= rows;
    rows = 1;
  }
  for (int64_t r = 0; r < rows; ++r, x += ld, y += cols) {
    int64_t i = 0;
    for (; i + 16 <= cols; i += 16) bf16_lanes(x + i, y + i, 0xffff);
    if (i < cols) bf16_lanes(x + i, y + i, first_lanes(cols - i));
  }
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void rows_to_bf16(
    const float* x, int64_t rows, int64_t cols, int64_t ld, uint16_t* y) {
  rows_by_lanes(x, rows, cols, ld, y);
}

__attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"))) void rows_round_bf16(
    const float* x, int64_t rows, int64_t cols, int64_t ld, float* y) {
  rows_by_lanes(x, rows, cols, ld, y);
}
#undef SEQTAPE_BF16_TARGET

void round_rows_dense(const float* x, int64_t rows, int64_t cols, int64_t ld, uint16_t* y) {
  rows_to_bf16(x, rows, cols, ld, y);
}

// The batch strides of operand blocks [rows, cols] copied dense and one after the other (a
// broadcast operand, stride 0, once).
std::pair<int64_t, int64_t> dense_strides(int64_t rows, int64_t cols, const GemmBatch& bt,
                                          int64_t s0, int64_t s1) {
  const int64_t n1 = s1 ? bt.n1 : 1, block = rows * cols;
  return {s0 ? n1 * block : 0, s1 ? block : 0};
}

// A thread's dense copy made at least n values long. Grown only: resize to a larger size
// zero-fills what it adds, even within the capacity, and the products of a step alternate
// between sizes (memset was 1.7 % of the samples of the G2P model's bf16 step).
void grow(std::vector<uint16_t>& out, int64_t n) {
  if (out.size() < static_cast<size_t>(n)) out.resize(static_cast<size_t>(n));
}

// Operand blocks [rows, cols] (row stride ld) of every product of the batch, at x + i·s0 + j·s1,
// rounded to bf16 into out, laid out as dense_strides says.
void to_bf16(const float* x, int64_t rows, int64_t cols, int64_t ld, const GemmBatch& bt,
             int64_t s0, int64_t s1, std::vector<uint16_t>& out) {
  const int64_t n0 = s0 ? bt.n0 : 1, n1 = s1 ? bt.n1 : 1, block = rows * cols;
  grow(out, n0 * n1 * block);
  g_bf16_values.fetch_add(n0 * n1 * block, std::memory_order_relaxed);
  for (int64_t i = 0; i < n0; ++i)
    for (int64_t j = 0; j < n1; ++j) {
      const float* xb = x + i * s0 + j * s1;
      uint16_t* yb = out.data() + (i * n1 + j) * block;
      rows_to_bf16(xb, rows, cols, ld, yb);
    }
}

// g's product as the bf16 path runs it: stored A is [M,K] (or [K,M] transposed), stored B [K,N]
// (or [N,K]), each copied dense to a16 and b16 (null: only the layout, for prepare).
Gemm bf16_layout(const Gemm& g, const uint16_t* a16, const uint16_t* b16) {
  Gemm h = g;
  std::tie(h.batch.sa0, h.batch.sa1) =
      dense_strides(g.ta ? g.k : g.m, g.ta ? g.m : g.k, g.batch, g.batch.sa0, g.batch.sa1);
  std::tie(h.batch.sb0, h.batch.sb1) =
      dense_strides(g.tb ? g.n : g.k, g.tb ? g.k : g.n, g.batch, g.batch.sb0, g.batch.sb1);
  h.a = reinterpret_cast<const float*>(a16);
  h.b = reinterpret_cast<const float*>(b16);
  h.lda = g.ta ? g.m : g.k;
  h.ldb = g.tb ? g.k : g.n;
  return h;
}

// A (which 0) or B (1) of g rounded to bf16 into out, dense as bf16_layout lays it out.
void operand_to_bf16(const Gemm& g, int which, std::vector<uint16_t>& out) {
  if (which == 0)
    to_bf16(g.a, g.ta ? g.k : g.m, g.ta ? g.m : g.k, g.lda, g.batch, g.batch.sa0, g.batch.sa1, out);
  else
    to_bf16(g.b, g.tb ? g.n : g.k, g.tb ? g.k : g.n, g.ldb, g.batch, g.batch.sb0, g.batch.sb1, out);
}

// A stored operand already rounded to bf16: p [rows, cols] with row stride ld (p null: none).
struct Rounded {
  const uint16_t* p = nullptr;
  int64_t ld = 0;
};

// The stored shape of A (which 0: [M,K], or [K,M] transposed) or B (1: [K,N], or [N,K]).
std::pair<int64_t, int64_t> stored(const Gemm& g, int which) {
  if (which == 0) return {g.ta ? g.k : g.m, g.ta ? g.m : g.k};
  return {g.tb ? g.n : g.k, g.tb ? g.k : g.n};
}

// g's product (float operands) on this thread, in float32 or in bf16: then each operand is
// taken from `given` (a single product's, already rounded: used in place where dense, copied
// dense otherwise) or rounded into this thread's dense copy.
void run_here(const Gemm& g, bool bf16, const Rounded* given = nullptr) {
  if (!bf16) return onednn().run(g, false);
  thread_local std::vector<uint16_t> copy[2];
  const uint16_t* r[2] = {nullptr, nullptr};
  for (int which : {0, 1}) {
    const Rounded w = given ? given[which] : Rounded{};
    const auto [rows, cols] = stored(g, which);
    if (w.p && w.ld == cols) {
      r[which] = w.p;
      continue;
    }
    std::vector<uint16_t>& out = copy[which];
    if (w.p) {  // a strided block of a rounded whole (a part's columns): copied dense
      grow(out, rows * cols);
      for (int64_t i = 0; i < rows; ++i)
        std::memcpy(out.data() + i * cols, w.p + i * w.ld, sizeof(uint16_t) * cols);
    } else {
      operand_to_bf16(g, which, out);
    }
    r[which] = out.data();
  }
  onednn().run(bf16_layout(g, r[0], r[1]), true);
}

// Makes the primitive of g's product (as run_here runs it) on this thread.
void prepare_here(const Gemm& g, bool bf16) {
  onednn().prepare(bf16 ? bf16_layout(g, nullptr, nullptr) : g, bf16);
}

// A product of at least this many FLOPs (2·M·N·K, about 40 µs on one core) is split over
// seqtape's own threads (run_onednn); below it, waking a helper (5-50 µs) would cost more than
// it saves.
constexpr double kSplitFlops = 8388608.0;  // 2^23
constexpr int kMaxSplit = 64;              // parts of one product at most

// How a product is split: along the rows of op(A) and C, the columns of op(B) and C, or (a
// batch of products) the first or second batch axis.
enum class Split { Rows, Cols, Outer, Inner };

// Rows, columns or batch entries [r0, r1) of g's product: a product of its own over the same
// storage; whole, g's rounded operands, which become the part's (a single product's only).
Gemm part_of(const Gemm& g, Split along, int64_t r0, int64_t r1, Rounded* whole = nullptr) {
  Gemm p = g;
  GemmBatch& bt = p.batch;
  switch (along) {
    case Split::Rows:
      p.m = r1 - r0;
      p.a += g.ta ? r0 : r0 * g.lda;
      p.c += r0 * g.ldc;
      if (whole && whole[0].p) whole[0].p += g.ta ? r0 : r0 * whole[0].ld;
      break;
    case Split::Cols:
      p.n = r1 - r0;
      p.b += g.tb ? r0 * g.ldb : r0;
      p.c += r0;
      if (p.bias) p.bias += r0;
      if (whole && whole[1].p) whole[1].p += g.tb ? r0 * whole[1].ld : r0;
      break;
    case Split::Outer:
    case Split::Inner: {
      const bool outer = along == Split::Outer;
      (outer ? bt.n0 : bt.n1) = r1 - r0;
      p.a += r0 * (outer ? bt.sa0 : bt.sa1);
      p.b += r0 * (outer ? bt.sb0 : bt.sb1);
      p.c += r0 * (outer ? bt.sc0 : bt.sc1);
      break;
    }
  }
  return p;
}

// g's product on oneDNN. Debian's oneDNN threads with OpenMP, whose workers spin between
// products (onednn_threads), so a big product is instead split into one part per thread of
// seqtape's budget (gemm_nt_rowwise_threads, which the BLAS thread setting sets), and each part
// runs as a one-thread oneDNN product on its own thread, on that thread's primitives. A single
// product is split along the longer of M and N, a batch along its batch axes (one-thread oneDNN
// against OpenBLAS, and two parts against one: docs/performance.md). bf16: each part rounds its
// own operands into dense copies (oneDNN's bf16 kernels take a strided view of a part only
// through gemm:jit, slower than brgemm), so the rounding is split too; the operand every part
// reads whole is rounded once. `given`: a single product's operands already rounded whole
// (a Bf16Memo's), which the parts take their blocks of.
// The parts depend on the thread setting alone, never on which thread is free, so a product's
// bits are the same whenever the setting is (the parts' primitives may sum in another order
// than the whole one: results of different thread settings may differ in the last bits).
void run_onednn(const Gemm& g, bool bf16, const Rounded* given = nullptr) {
  const GemmBatch& bt = g.batch;
  const int64_t count = bt.n0 * bt.n1;
  const double flops = 2.0 * static_cast<double>(g.m) * static_cast<double>(g.n) *
                       static_cast<double>(g.k) * static_cast<double>(count);
  const int threads = gemm_nt_rowwise_threads();
  // A single product along its longer side (each part reads all of the other operand); parts
  // of a multiple of `align` rows or columns, the last one taking the rest.
  const Split along = count > 1    ? (bt.n0 > 1 ? Split::Outer : Split::Inner)
                      : g.m >= g.n ? Split::Rows
                                   : Split::Cols;
  const int64_t extent = along == Split::Rows    ? g.m
                         : along == Split::Cols  ? g.n
                         : along == Split::Outer ? bt.n0
                                                 : bt.n1;
  const int64_t align = along == Split::Rows ? 8 : along == Split::Cols ? 16 : 1;
  if (threads < 2 || flops < kSplitFlops || extent < 2 * align ||
      onednn_threads(g.m, g.n, g.k * count) > 1) {
    run_here(g, bf16, given);
    return;
  }
  const int64_t parts = std::min<int64_t>({threads, kMaxSplit, extent / align});
  const int64_t per = (extent / parts + align - 1) / align * align;
  // bf16: the operand every part of a single product reads whole (B for a split of rows, A for
  // one of columns) is rounded once, here, unless given; each part rounds its own slice of the
  // other, unless given.
  Rounded whole[2] = {given ? given[0] : Rounded{}, given ? given[1] : Rounded{}};
  const int shared = along == Split::Rows ? 1 : 0;
  thread_local std::vector<uint16_t> shared16;
  if (bf16 && count == 1 && !whole[shared].p) {
    operand_to_bf16(g, shared, shared16);
    whole[shared] = {shared16.data(), stored(g, shared).second};
  }
  struct Job {
    const Gemm* g;
    bool bf16;
    Split along;
    int64_t per, extent;
    Rounded whole[2];
    std::exception_ptr error[kMaxSplit];
    // Part c, and in r its rounded operands.
    Gemm part(int64_t c, Rounded* r) const {
      r[0] = whole[0];
      r[1] = whole[1];
      return part_of(*g, along, c * per, std::min(extent, (c + 1) * per), r);
    }
  };
  Job job{&g, bf16, along, per, extent, {whole[0], whole[1]}, {}};
  const int64_t used = (extent + per - 1) / per;
  g_split.fetch_add(1, std::memory_order_relaxed);
  // The primitives first, here: a layout oneDNN has no implementation for throws now, before
  // any part has written C (routed then gives the whole product to OpenBLAS).
  for (int64_t c = 0; c < used; ++c) {
    Rounded r[2];
    prepare_here(job.part(c, r), bf16);
  }
  parallel_chunks(
      used,
      [](void* p, int64_t c) {
        Job& j = *static_cast<Job*>(p);
        try {
          Rounded r[2];
          const Gemm part = j.part(c, r);
          run_here(part, j.bf16, r);
        } catch (...) {
          j.error[c] = std::current_exception();
        }
      },
      &job, idle_between_ops());
  for (int64_t c = 0; c < used; ++c)
    if (job.error[c]) std::rethrow_exception(job.error[c]);
}

// g's operands (a single product's) from this thread's memos, rounded into the innermost when
// not found there; nothing without a memo.
void from_memos(const Gemm& g, Rounded* given) {
  if (t_memos.empty() || g.batch.n0 * g.batch.n1 != 1) return;
  for (int which : {0, 1}) {
    const float* src = which == 0 ? g.a : g.b;
    const int64_t ld = which == 0 ? g.lda : g.ldb;
    const auto [rows, cols] = stored(g, which);
    const uint16_t* p = nullptr;
    for (const Bf16Memo* m : t_memos)
      if ((p = m->find(src, rows, cols, ld))) break;
    if (!p) p = t_memos.back()->add(src, rows, cols, ld);
    given[which] = {p, cols};
  }
}

// auto: per product shape, the faster of OpenBLAS and oneDNN float32, timed the first time it
// is seen (best of 3 each, on a scratch output) and remembered for the process.
bool auto_picks_onednn(const Gemm& g) {
  using ShapeKey = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                              std::array<int64_t, 8> >;
  static std::mutex mu;
  static std::map<ShapeKey, bool> table;
  const ShapeKey key{g.ta, g.tb, g.m, g.n, g.k, g.lda, g.ldb, g.ldc, batch_key(g.batch)};
  {
    std::lock_guard<std::mutex> lock(mu);
    if (auto it = table.find(key); it != table.end()) return it->second;
  }
  const GemmBatch& bt = g.batch;
  const int64_t extent = (bt.n0 - 1) * bt.sc0 + (bt.n1 - 1) * bt.sc1 + g.m * g.ldc;
  std::vector<float> scratch(static_cast<size_t>(extent));
  Gemm t = g;
  t.c = scratch.data();
  t.alpha = 1.f;
  t.beta = 0.f;
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
    for (int64_t i = 0; i < bt.n0; ++i)
      for (int64_t j = 0; j < bt.n1; ++j)
        detail::gemm_openblas(t.ta, t.tb, t.m, t.n, t.k, 1.f, t.a + i * bt.sa0 + j * bt.sa1, t.lda,
                              t.b + i * bt.sb0 + j * bt.sb1, t.ldb, 0.f,
                              t.c + i * bt.sc0 + j * bt.sc1, t.ldc);
  });
  const double dnn = best_of([&] { run_onednn(t, false); });
  const bool pick = dnn < blas;
  std::lock_guard<std::mutex> lock(mu);
  table[key] = pick;
  return pick;
}

bool routed(const Gemm& g) {
  const MatmulBackend backend = g_backend;
  try {
    if (g_precision == Precision::BF16) {
      Rounded given[2];
      from_memos(g, given);
      run_onednn(g, true, given);
      g_onednn_bf16.fetch_add(1, std::memory_order_relaxed);
      return true;
    }
    if (backend == MatmulBackend::OpenBLAS ||
        (backend == MatmulBackend::Auto && !auto_picks_onednn(g)))
      return false;
    run_onednn(g, false);
  } catch (const dnnl::error& e) {
    // A layout this oneDNN build has no implementation for: OpenBLAS (in float32) does the
    // product, and the first time says so, since a bf16 run then multiplies it unrounded.
    static std::once_flag once;
    std::call_once(once, [&] {
      std::fprintf(stderr,
                   "seqtape: warning: oneDNN could not run a %lldx%lldx%lld product (%s); "
                   "OpenBLAS runs such products in float32\n",
                   static_cast<long long>(g.m), static_cast<long long>(g.n),
                   static_cast<long long>(g.k), e.what());
    });
    return false;
  }
  g_onednn_f32.fetch_add(1, std::memory_order_relaxed);
  return true;
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
                             float* c, int64_t ldc, const GemmBatch& batch, const float* bias,
                             bool relu) {
  return routed({ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc, batch, bias, relu});
}

void detail::round_rows_to_bf16(const float* x, int64_t rows, int64_t cols, int64_t ld, float* y) {
  rows_round_bf16(x, rows, cols, ld, y);
}

#endif

}  // namespace seqtape::kernels
