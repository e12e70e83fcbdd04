// Quantized matrices (int8 per output row, bf16) and their product with float32 rows.
//
// Dimension key: N rows of x, In inputs, Out outputs, Ld In rounded up to kQuantPad.
#include "infer/quant.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "infer/quant_kernels.h"
#include "tensor/tensor.h"  // fail

namespace seqtape {

namespace qk = quant_kernels;

namespace {

// Products of fewer multiply-adds than this stay on the calling thread.
constexpr double kParallelQuantWork = 262144.0;  // 2^18
// Each thread's share of the outputs is a multiple of this many (the kernels' output block).
constexpr int64_t kOutputGrain = 16;

int64_t padded(int64_t in) {
  return (in + kQuantPad - 1) / kQuantPad * kQuantPad;
}

void check_in(int64_t in) {
  if (in < 1 || in > kQuantMaxIn)
    fail("quantize", "a matrix of " + std::to_string(in) + " inputs: int8 and bf16 take 1 to " +
                         std::to_string(kQuantMaxIn));
}

QuantMatrix empty_matrix(ComputeType t, int64_t out, int64_t in) {
  check_in(in);
  QuantMatrix m;
  m.type = t;
  m.out = out;
  m.in = in;
  m.ld = padded(in);
  m.out16 = (out + kQuantStrip - 1) / kQuantStrip * kQuantStrip;
  if (t == ComputeType::Int8) {
    m.q.assign(size_t(m.out16 * m.ld), 0);
    m.scale.assign(size_t(m.out16), 1.f);
    m.sum.assign(size_t(m.out16), 0);
  } else {
    m.bf16.assign(size_t(m.out16 * m.ld), 0);
  }
  return m;
}

void fill_sums(QuantMatrix& m) {
  for (int64_t j = 0; j < m.out; ++j) {
    int32_t s = 0;
    for (int64_t p = 0; p < m.in; ++p) s += m.q_at(j, p);
    m.sum[size_t(j)] = s;
  }
}

// The calling thread's scratch for the quantized input rows.
template <typename T>
T* scratch(size_t n) {
  thread_local std::vector<T> buffer;
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}

// y [N, Out] over the pool's threads, each taking a run of outputs for every row.
template <typename F>
void split_outputs(const QuantMatrix& w, int64_t N, F&& rows) {
  const double work = double(N) * double(w.out) * double(w.in);
  const int64_t chunks = std::min<int64_t>(kernels::gemm_nt_rowwise_threads(),
                                           (w.out + kOutputGrain - 1) / kOutputGrain);
  if (chunks < 2 || work < kParallelQuantWork) return rows(int64_t{0}, w.out);
  auto task = [&](int64_t c) {
    const int64_t blocks = (w.out + kOutputGrain - 1) / kOutputGrain;
    const int64_t j0 = std::min(w.out, blocks * c / chunks * kOutputGrain);
    const int64_t j1 = std::min(w.out, blocks * (c + 1) / chunks * kOutputGrain);
    if (j0 < j1) rows(j0, j1);
  };
  kernels::parallel_for(chunks, task);
}

}  // namespace

const char* to_string(ComputeType t) {
  switch (t) {
    case ComputeType::F32:
      return "f32";
    case ComputeType::Bf16:
      return "bf16";
    case ComputeType::Int8:
      return "int8";
    case ComputeType::Auto:
      return "auto";
  }
  return "f32";
}

std::optional<ComputeType> parse_compute_type(std::string_view s) {
  for (ComputeType t : {ComputeType::F32, ComputeType::Bf16, ComputeType::Int8, ComputeType::Auto})
    if (s == to_string(t)) return t;
  return std::nullopt;
}

std::string compute_type_missing(ComputeType t) {
  if (t == ComputeType::Int8 && qk::int8_path() == qk::Int8Path::Portable)
    return "AVX2 (int8 runs on AVX-512 VNNI or AVX2)";
  if (t == ComputeType::Bf16 && !qk::bf16_native()) return "AVX-512 BF16";
  return "";
}

ComputeType resolve_compute_type(ComputeType requested) {
  if (requested == ComputeType::Auto)
    return qk::int8_path() == qk::Int8Path::Vnni ? ComputeType::Int8 : ComputeType::F32;
  const std::string missing = compute_type_missing(requested);
  if (!missing.empty())
    fail("--compute-type " + std::string(to_string(requested)),
         "this CPU lacks " + missing + " (use f32, or auto to fall back to it)");
  return requested;
}

const char* compute_kernel_name(ComputeType t) {
  if (t == ComputeType::Int8)
    return qk::int8_path() == qk::Int8Path::Vnni   ? "avx512_vnni"
           : qk::int8_path() == qk::Int8Path::Avx2 ? "avx2"
                                                   : "portable";
  if (t == ComputeType::Bf16) return qk::bf16_native() ? "avx512_bf16" : "portable";
  return "f32";
}

size_t QuantMatrix::bytes() const {
  return q.size() + scale.size() * sizeof(float) + sum.size() * sizeof(int32_t) +
         bf16.size() * sizeof(uint16_t);
}

void QuantMatrix::dequantize_row(int64_t j, float* y) const {
  if (type == ComputeType::Int8) {
    const float s = scale[size_t(j)];
    for (int64_t p = 0; p < in; ++p) y[p] = float(q_at(j, p)) / s;
  } else {
    for (int64_t p = 0; p < in; ++p) y[p] = from_bf16(bf16_at(j, p));
  }
}

uint16_t to_bf16(float x) {
  uint32_t u = 0;
  std::memcpy(&u, &x, sizeof u);
  // round to nearest, ties to even; a NaN stays a (quiet) NaN. No branch, so that the loop
  // over an input row vectorizes.
  const uint32_t rounded = (u + 0x7fff + ((u >> 16) & 1)) >> 16;
  const uint32_t nan = (u >> 16) | 0x40;
  return static_cast<uint16_t>((u & 0x7fffffff) > 0x7f800000 ? nan : rounded);
}

float from_bf16(uint16_t b) {
  const uint32_t u = uint32_t(b) << 16;
  float x = 0;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

namespace {

// The largest |x[p]| of x [In], or NaN when some x[p] is NaN or infinite.
float largest_magnitude(const float* x, int64_t in) {
  constexpr float kMax = std::numeric_limits<float>::max();
  float most = 0;
  bool bad = false;
  int64_t p = 0;
#if defined(__SSE2__)
  // Four lanes at a time: the compiler keeps the scalar loop below scalar (a float max is a
  // reduction it may not reorder), and it took most of an int8 product's time at batch 32.
  const __m128 sign = _mm_set1_ps(-0.f), big = _mm_set1_ps(kMax);
  __m128 most4 = _mm_setzero_ps();
  int bad4 = 0;
  for (; p + 4 <= in; p += 4) {
    const __m128 a = _mm_andnot_ps(sign, _mm_loadu_ps(x + p));
    most4 = _mm_max_ps(most4, a);
    bad4 |= _mm_movemask_ps(_mm_cmpnle_ps(a, big));  // (true for NaN too: unordered)
  }
  alignas(16) float lanes[4];
  _mm_store_ps(lanes, most4);
  most = std::max(std::max(lanes[0], lanes[1]), std::max(lanes[2], lanes[3]));
  bad = bad4 != 0;
#endif
  for (; p < in; ++p) {
    const float a = std::fabs(x[p]);
    most = std::max(most, a);
    bad = bad || !(a <= kMax);
  }
  return bad ? std::numeric_limits<float>::quiet_NaN() : most;
}

}  // namespace

float quantize_row(const float* x, int64_t in, int64_t ld, int8_t* q) {
  const float most = largest_magnitude(x, in);
  // A row that overflowed: its outputs become NaN, as float32 products would make them (and no
  // NaN is ever converted to an integer).
  if (std::isnan(most)) {
    std::fill(q, q + ld, int8_t{0});
    return std::numeric_limits<float>::quiet_NaN();
  }
  const float s = most > 0 ? 127.f / most : 1.f;
  int64_t p = 0;
#if defined(__SSE2__)
  // 16 at a time: cvtps2dq rounds to nearest even (the default rounding mode, which the scalar
  // loop's addition relies on too), so these are the scalar loop's values.
  const __m128 s4 = _mm_set1_ps(s), lo = _mm_set1_ps(-127.f), hi = _mm_set1_ps(127.f);
  for (; p + 16 <= in; p += 16) {
    __m128i v[4];
    for (int k = 0; k < 4; ++k)
      v[k] = _mm_cvtps_epi32(
          _mm_min_ps(_mm_max_ps(_mm_mul_ps(_mm_loadu_ps(x + p + 4 * k), s4), lo), hi));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(q + p),
                     _mm_packs_epi16(_mm_packs_epi32(v[0], v[1]), _mm_packs_epi32(v[2], v[3])));
  }
#endif
  // Rounded to nearest even by adding and taking off 1.5·2^23 (exact for |v| <= 2^22, here
  // <= 127): what std::nearbyint gives, without its library call.
  constexpr float kRound = 12582912.f;
  for (; p < in; ++p) {
    const float v = std::clamp(x[p] * s, -127.f, 127.f);
    q[p] = static_cast<int8_t>((v + kRound) - kRound);
  }
  std::fill(q + in, q + ld, int8_t{0});
  return s;
}

QuantMatrix quantize(ComputeType t, const float* w, int64_t out, int64_t in, int64_t stride_out,
                     int64_t stride_in) {
  QuantMatrix m = empty_matrix(t, out, in);
  std::vector<float> row(static_cast<size_t>(in));
  std::vector<int8_t> qrow(static_cast<size_t>(m.ld));
  for (int64_t j = 0; j < out; ++j) {
    for (int64_t p = 0; p < in; ++p) row[size_t(p)] = w[j * stride_out + p * stride_in];
    if (t == ComputeType::Int8) {
      m.scale[size_t(j)] = quantize_row(row.data(), in, m.ld, qrow.data());
      for (int64_t p = 0; p < in; ++p)
        m.q[size_t(QuantMatrix::at(j, p, m.ld, 4))] = qrow[size_t(p)];
    } else {
      for (int64_t p = 0; p < in; ++p)
        m.bf16[size_t(QuantMatrix::at(j, p, m.ld, 2))] = to_bf16(row[size_t(p)]);
    }
  }
  if (t == ComputeType::Int8) fill_sums(m);
  return m;
}

QuantMatrix int8_matrix(const int8_t* q, const float* scale, int64_t out, int64_t in,
                        int64_t stride_out, int64_t stride_in) {
  QuantMatrix m = empty_matrix(ComputeType::Int8, out, in);
  for (int64_t j = 0; j < out; ++j) {
    for (int64_t p = 0; p < in; ++p)
      m.q[size_t(QuantMatrix::at(j, p, m.ld, 4))] = q[j * stride_out + p * stride_in];
    m.scale[size_t(j)] = scale[j];
  }
  fill_sums(m);
  return m;
}

QuantMatrix bf16_matrix(const uint16_t* bits, int64_t out, int64_t in, int64_t stride_out,
                        int64_t stride_in) {
  QuantMatrix m = empty_matrix(ComputeType::Bf16, out, in);
  for (int64_t j = 0; j < out; ++j)
    for (int64_t p = 0; p < in; ++p)
      m.bf16[size_t(QuantMatrix::at(j, p, m.ld, 2))] = bits[j * stride_out + p * stride_in];
  return m;
}

void quant_linear(const QuantMatrix& w, const float* x, int64_t N, float* y,
                  const kernels::RowwiseEpilogue& e) {
  const int64_t ld = w.ld, out = w.out;
  if (w.type == ComputeType::Int8) {
    int8_t* xq = scratch<int8_t>(size_t(N * ld));
    float* sx = scratch<float>(size_t(N));
    for (int64_t r = 0; r < N; ++r) sx[r] = quantize_row(x + r * w.in, w.in, ld, xq + r * ld);
    split_outputs(w, N,
                  [&](int64_t j0, int64_t j1) { qk::int8_rows(N, xq, sx, w, j0, j1, y, out); });
  } else {
    uint16_t* xb = scratch<uint16_t>(size_t(N * ld));
    for (int64_t r = 0; r < N; ++r) {
      for (int64_t p = 0; p < w.in; ++p) xb[r * ld + p] = to_bf16(x[r * w.in + p]);
      std::fill(xb + r * ld + w.in, xb + (r + 1) * ld, uint16_t{0});
    }
    split_outputs(w, N, [&](int64_t j0, int64_t j1) { qk::bf16_rows(N, xb, w, j0, j1, y, out); });
  }
  if (e.bias) kernels::add_row_bias<float>(y, e.bias, N, out);
  if (e.activate) kernels::activate<float>(y, y, N * out, e.act);
}

}  // namespace seqtape
