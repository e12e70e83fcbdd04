#pragma once
// bench_decode's product rows, which decide between our own kernels and oneDNN's int8 and bf16
// matmul by measurement: one decode step's products at the medium model's shapes, at batch 1 and
// 32, through infer/quant's kernels (quant_linear, float rows in and out) and through oneDNN
// 2.6's matmul over the same quantized values:
//   int8 onednn u8s8: the rows quantized as quant_linear quantizes them, shifted by +128 to u8
//     (as the VNNI kernel shifts them), s8 weights, s32 output, dequantized as our kernels do
//     (float(d - 128·Σq_j) / (s_x·s_j)): the same bits as ours;
//   int8 onednn s8s8: s8 rows, s8 weights, f32 output with per-output scales 1/s_j, then each
//     row divided by s_x (oneDNN 2.6's matmul takes one scale per output, none per row); the
//     scales given when the primitive is made (they are the weights', known then), or (s8s8 rt)
//     as a runtime argument, which oneDNN 2.6 runs on its gemm:jit instead of brgemm;
//   bf16 onednn: bf16 rows and weights, f32 output.
// oneDNN's primitive is made once per shape (as tensor/matmul_backend caches the f32 path's)
// with its weights reordered into the layout it picks; that time is reported on its own. Both
// sides run on one thread: this project runs oneDNN products on one thread each (its OpenMP
// workers spin against seqtape's own, tensor/matmul_backend.cpp), and quant_linear would split a
// product's outputs over threads the same way for both. The rounds are interleaved (every shape
// and side once per round) and each cell keeps its fastest sample: the machine is shared.
//
// Dimension key: M rows (the batch), K inputs, N outputs.

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "infer/quant.h"
#include "tensor/kernels.h"

#ifdef SEQTAPE_HAVE_ONEDNN
#include <omp.h>

#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace seqtape::bench_products {

struct Shape {
  const char* what;
  int64_t m, k, n;
};
// A decode step's products at the medium model's sizes (d 256, FFN 1024, V 64): the attention
// projections, the two FFN layers, the output projection.
inline std::vector<Shape> shapes() {
  std::vector<Shape> s;
  for (int64_t m : {int64_t(1), int64_t(32)})
    for (const Shape& t : {Shape{"attn", 0, 256, 256}, Shape{"ffn1", 0, 256, 1024},
                           Shape{"ffn2", 0, 1024, 256}, Shape{"vocab", 0, 256, 64}})
      s.push_back({t.what, m, t.k, t.n});
  return s;
}

enum class Side { OursInt8, DnnlU8S8, DnnlS8S8, DnnlS8S8Rt, OursBf16, DnnlBf16 };
inline const char* side_name(Side s) {
  switch (s) {
    case Side::OursInt8:
      return "int8 ours";
    case Side::DnnlU8S8:
      return "int8 onednn u8s8";
    case Side::DnnlS8S8:
      return "int8 onednn s8s8";
    case Side::DnnlS8S8Rt:
      return "int8 onednn s8s8 rt";
    case Side::OursBf16:
      return "bf16 ours";
    case Side::DnnlBf16:
      return "bf16 onednn";
  }
  return "?";
}
inline bool is_int8(Side s) {
  return s != Side::OursBf16 && s != Side::DnnlBf16;
}

// One side of one shape: run(x, y) computes y [M, N] from x [M, K].
class Product {
 public:
  virtual ~Product() = default;
  virtual void run(const float* x, float* y) = 0;
  double create_us = 0;  // making the oneDNN primitive and reordering its weights
};

class Ours : public Product {
 public:
  Ours(const QuantMatrix& w, int64_t m) : w_(w), m_(m) {}
  void run(const float* x, float* y) override { quant_linear(w_, x, m_, y); }

 private:
  const QuantMatrix& w_;
  int64_t m_;
};

#ifdef SEQTAPE_HAVE_ONEDNN
class Dnnl : public Product {
 public:
  Dnnl(Side side, const QuantMatrix& w, int64_t m)
      : side_(side), w_(w), m_(m), eng_(dnnl::engine::kind::cpu, 0), stream_(eng_) {
    using dt = dnnl::memory::data_type;
    using tag = dnnl::memory::format_tag;
    const auto t0 = std::chrono::steady_clock::now();
    omp_set_num_threads(1);  // before the primitive is made: it plans for the threads it sees
    const int64_t k = w.in, n = w.out;
    const dt src_t = side == Side::DnnlU8S8 ? dt::u8 : side == Side::DnnlBf16 ? dt::bf16 : dt::s8;
    const dt wei_t = side == Side::DnnlBf16 ? dt::bf16 : dt::s8;
    const dt dst_t = side == Side::DnnlU8S8 ? dt::s32 : dt::f32;
    const dnnl::memory::desc src({m, k}, src_t, tag::ab), wei_any({k, n}, wei_t, tag::any),
        dst({m, n}, dst_t, tag::ab);
    dnnl::primitive_attr attr;
    std::vector<float> inv(w.scale.size());  // 1 / s_j (int8; bf16 has no scales)
    for (size_t j = 0; j < inv.size(); ++j) inv[j] = 1.f / w.scale[j];
    if (side == Side::DnnlS8S8) attr.set_output_scales(1 << 1, inv);
    if (side == Side::DnnlS8S8Rt) attr.set_output_scales(1 << 1, {DNNL_RUNTIME_F32_VAL});
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, wei_any, dst), attr, eng_);
    prim_ = dnnl::matmul(pd);
    impl_ = pd.impl_info_str();
    // The stored weights as a plain [K, N], reordered into the primitive's layout.
    dnnl::memory plain({{k, n}, wei_t, tag::ab}, eng_);
    wei_ = dnnl::memory(pd.weights_desc(), eng_);
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p) {
        if (wei_t == dt::s8)
          static_cast<int8_t*>(plain.get_data_handle())[p * n + j] = w.q_at(j, p);
        else
          static_cast<uint16_t*>(plain.get_data_handle())[p * n + j] = w.bf16_at(j, p);
      }
    dnnl::reorder(plain, wei_).execute(stream_, plain, wei_);
    stream_.wait();
    src_ = dnnl::memory(src, eng_);
    dst_ = dnnl::memory(dst, eng_);
    args_ = {{DNNL_ARG_SRC, src_}, {DNNL_ARG_WEIGHTS, wei_}, {DNNL_ARG_DST, dst_}};
    if (side == Side::DnnlS8S8Rt) {
      scales_ = dnnl::memory({{n}, dt::f32, tag::a}, eng_);
      std::memcpy(scales_.get_data_handle(), inv.data(), size_t(n) * sizeof(float));
      args_[DNNL_ARG_ATTR_OUTPUT_SCALES] = scales_;
    }
    sx_.resize(size_t(m));
    xq_.resize(size_t(m * w.ld));
    create_us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  }
  const std::string& impl() const { return impl_; }

  void run(const float* x, float* y) override {
    const int64_t k = w_.in, n = w_.out;
    if (side_ == Side::DnnlBf16) {
      auto* xb = static_cast<uint16_t*>(src_.get_data_handle());
      for (int64_t i = 0; i < m_ * k; ++i) xb[i] = to_bf16(x[i]);
      execute(y);
      return;
    }
    auto* xs = static_cast<int8_t*>(src_.get_data_handle());
    for (int64_t r = 0; r < m_; ++r) {
      sx_[size_t(r)] = quantize_row(x + r * k, k, w_.ld, xq_.data() + r * w_.ld);
      const int8_t* q = xq_.data() + r * w_.ld;
      if (side_ == Side::DnnlU8S8)
        for (int64_t p = 0; p < k; ++p) xs[r * k + p] = static_cast<int8_t>(q[p] ^ 0x80);
      else
        std::memcpy(xs + r * k, q, size_t(k));
    }
    if (side_ != Side::DnnlU8S8) {
      execute(y);
      for (int64_t r = 0; r < m_; ++r)
        for (int64_t j = 0; j < n; ++j) y[r * n + j] /= sx_[size_t(r)];
      return;
    }
    execute(nullptr);
    const auto* d = static_cast<const int32_t*>(dst_.get_data_handle());
    for (int64_t r = 0; r < m_; ++r)
      for (int64_t j = 0; j < n; ++j)
        y[r * n + j] = static_cast<float>(d[r * n + j] - 128 * w_.sum[size_t(j)]) /
                       (sx_[size_t(r)] * w_.scale[size_t(j)]);
  }

 private:
  // The primitive, writing into y (f32 output) or its own s32 buffer (y null).
  void execute(float* y) {
    if (y) dst_.set_data_handle(y);
    omp_set_num_threads(1);
    prim_.execute(stream_, args_);
    stream_.wait();
  }

  Side side_;
  const QuantMatrix& w_;
  int64_t m_;
  dnnl::engine eng_;
  dnnl::stream stream_;
  dnnl::matmul prim_;
  dnnl::memory src_, wei_, dst_, scales_;
  std::unordered_map<int, dnnl::memory> args_;
  std::string impl_;
  std::vector<float> sx_;
  std::vector<int8_t> xq_;
};
#endif

// One table cell: the best round's microseconds per product (0: n/a, why says why).
struct Cell {
  double us = 0, create_us = 0;
  std::string why, impl;
  double max_diff = 0;  // largest |y - ours| over the outputs (the same type's own kernel)
};
struct Table {
  std::vector<Shape> shapes;
  std::vector<Side> sides;
  std::vector<std::vector<Cell>> cells;  // [shape][side]
  int rounds = 0;
};

// Where side s is in t.sides.
inline size_t reference(const Table& t, Side s) {
  return size_t(std::find(t.sides.begin(), t.sides.end(), s) - t.sides.begin());
}

// One side of one shape, ready to run: null where it cannot (its cell says why).
struct Entry {
  std::unique_ptr<Product> p;
  std::vector<float> y;
};

// The product of `side` over w for M rows, or null with c.why set.
inline std::unique_ptr<Product> make_product(Side side, const QuantMatrix& w, int64_t m, Cell& c) {
  const std::string missing =
      compute_type_missing(is_int8(side) ? ComputeType::Int8 : ComputeType::Bf16);
  if (!missing.empty()) {
    c.why = is_int8(side) ? "n/a (no " + missing + ")" : "n/a (no bf16 units)";
    return nullptr;
  }
  if (side == Side::OursInt8 || side == Side::OursBf16) return std::make_unique<Ours>(w, m);
#ifdef SEQTAPE_HAVE_ONEDNN
  try {
    auto d = std::make_unique<Dnnl>(side, w, m);
    c.impl = d->impl();
    c.create_us = d->create_us;
    return d;
  } catch (const dnnl::error& err) {
    c.why = std::string("n/a (") + err.what() + ")";
  }
#else
  c.why = "n/a (no oneDNN)";
#endif
  return nullptr;
}

// Microseconds per product of e, the fastest of samples of a few calls each (~1M multiply-adds
// per sample, about 2M per cell and round): a sample that the scheduler interrupts (the
// machine is shared) is dropped, where a mean over all calls would keep the interruption.
inline double best_sample_us(Entry& e, const Shape& s, const float* x) {
  const double work = double(s.m * s.k * s.n);
  const int inner = int(std::clamp(1e6 / work, 1.0, 200.0));
  const int samples = int(std::clamp(2e6 / (work * inner), 5.0, 200.0));
  double best = 1e30;
  for (int r = 0; r < samples; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < inner; ++i) e.p->run(x, e.y.data());
    best = std::min(
        best,
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
            inner);
  }
  return best;
}

// The sides of every shape, interleaved over `rounds` rounds on one thread; each cell keeps its
// best sample of all rounds.
inline Table measure(int rounds) {
  Table t{shapes(),
          {Side::OursInt8, Side::DnnlU8S8, Side::DnnlS8S8, Side::DnnlS8S8Rt, Side::OursBf16,
           Side::DnnlBf16},
          {},
          rounds};
  std::vector<QuantMatrix> weights;  // [shape][int8, bf16]
  std::vector<std::vector<Entry>> runs(t.shapes.size());
  std::vector<std::vector<float>> xs;
  t.cells.assign(t.shapes.size(), std::vector<Cell>(t.sides.size()));
  weights.reserve(2 * t.shapes.size());
  for (size_t i = 0; i < t.shapes.size(); ++i) {
    const Shape& s = t.shapes[i];
    std::vector<float> w(size_t(s.n * s.k)), x(size_t(s.m * s.k));
    for (size_t e = 0; e < w.size(); ++e) w[e] = float((e * 7919) % 2001) / 1000.f - 1.f;
    for (size_t e = 0; e < x.size(); ++e) x[e] = float((e * 104729) % 1999) / 999.f - 1.f;
    xs.push_back(std::move(x));
    weights.push_back(quantize(ComputeType::Int8, w.data(), s.n, s.k, s.k, 1));
    weights.push_back(quantize(ComputeType::Bf16, w.data(), s.n, s.k, s.k, 1));
    for (size_t k = 0; k < t.sides.size(); ++k) {
      const QuantMatrix& w8 = weights[2 * i + (is_int8(t.sides[k]) ? 0 : 1)];
      runs[i].push_back({make_product(t.sides[k], w8, s.m, t.cells[i][k]),
                         std::vector<float>(size_t(s.m * s.n), 0.f)});
    }
  }
  kernels::gemm_nt_rowwise_set_threads(1);
  for (int round = 0; round < rounds; ++round)
    for (size_t i = 0; i < t.shapes.size(); ++i)
      for (size_t k = 0; k < t.sides.size(); ++k) {
        if (!runs[i][k].p) continue;
        const double us = best_sample_us(runs[i][k], t.shapes[i], xs[i].data());
        Cell& c = t.cells[i][k];
        c.us = c.us == 0 ? us : std::min(c.us, us);
      }
  kernels::gemm_nt_rowwise_set_threads(0);  // (bench_decode runs on the default otherwise)
  // Each side's outputs against its type's own kernel's.
  const size_t ours_bf16 = reference(t, Side::OursBf16);
  for (size_t i = 0; i < t.shapes.size(); ++i)
    for (size_t k = 0; k < t.sides.size(); ++k) {
      const size_t ref = is_int8(t.sides[k]) ? 0 : ours_bf16;
      if (!runs[i][k].p || !runs[i][ref].p) continue;
      for (size_t e = 0; e < runs[i][k].y.size(); ++e)
        t.cells[i][k].max_diff = std::max<double>(t.cells[i][k].max_diff,
                                                  std::fabs(runs[i][k].y[e] - runs[i][ref].y[e]));
    }
  return t;
}

}  // namespace seqtape::bench_products
