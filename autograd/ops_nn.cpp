// Ops for networks: embedding, masked_fill, softmax, log_softmax, layer_norm, dropout, add_dropout,
// cross_entropy.
//
// Dimension key: R rows (every axis but the last, flattened), C the last axis, V vocabulary.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "autograd/ops_util.h"
#include "tensor/kernels.h"
#include "tensor/kernels_exp.h"
#include "tensor/profile.h"

namespace seqtape {

using detail::make_result;
using detail::wants_grad;

Mask Mask::causal(int64_t t) {
  Mask m = Mask::zeros({t, t});
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = i + 1; j < t; ++j) m.data[static_cast<size_t>(i * t + j)] = 1;
  return m;
}

namespace {
// d[ids[i]] += g[i] for every row i, split over the pool by blocks of 16 columns (a cache line of
// floats, so no two threads write one line): each column still adds its rows in increasing i,
// so a repeated id's sum has the same bits on any number of threads.
template <typename T>
void embedding_backward(const T* g, const std::vector<int32_t>& ids, int64_t c, T* d) {
  constexpr int64_t kCols = 16;
  const auto n = static_cast<int64_t>(ids.size());
  const int64_t blocks = (c + kCols - 1) / kCols;
  kernels::parallel_range(blocks, double(n * kCols) * kernels::kCostSimple,
                          [&](int64_t b0, int64_t b1) {
                            const int64_t j0 = b0 * kCols, j1 = std::min(c, b1 * kCols);
                            for (int64_t i = 0; i < n; ++i) {
                              T* row = d + ids[size_t(i)] * c;
                              const T* gr = g + i * c;
                              for (int64_t j = j0; j < j1; ++j) row[j] += gr[j];
                            }
                          });
}
}  // namespace

Var embedding(const Var& weight, const std::vector<int32_t>& ids, const Shape& ids_shape) {
  profile::Scope prof_("embedding", profile::Phase::Forward);
  detail::check_defined(weight, "embedding");
  if (weight.ndim() != 2)
    fail("embedding", "weight must be [V, C], got " + shape_str(weight.shape()));
  if (shape_numel(ids_shape) != static_cast<int64_t>(ids.size()))
    fail("embedding",
         std::to_string(ids.size()) + " ids do not fill shape " + shape_str(ids_shape));
  const int64_t v = weight.dim(0), c = weight.dim(1);
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= v)
      fail("embedding", "id " + std::to_string(ids[i]) + " at position " + std::to_string(i) +
                            " is outside the vocabulary [0, " + std::to_string(v) + ") of weight " +
                            shape_str(weight.shape()));
  Shape os = ids_shape;
  os.push_back(c);
  Tensor out = Tensor::empty(os, weight.dtype());  // [..., C]
  dispatch(weight.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* w = weight.value().data<T>();
    T* q = out.data<T>();
    const auto n = static_cast<int64_t>(ids.size());
    kernels::parallel_range(n, double(c) * kernels::kCostSimple, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) std::copy_n(w + ids[size_t(i)] * c, c, q + i * c);
    });
  });
  // dW[id] += g[row] for every use: a repeated id receives the sum
  return make_result("embedding", std::move(out), wants_grad({&weight}),
                     [wi = weight.shared(), ids, c](VarImpl& o) {
                       dispatch(o.value.dtype(), [&](auto tag) {
                         using T = decltype(tag);
                         embedding_backward<T>(o.grad.data<T>(), ids, c,
                                               detail::GradWriter<T>::accumulate(*wi).d);
                       });
                     });
}

Var masked_fill(const Var& a, const Mask& mask, double value) {
  profile::Scope prof_("masked_fill", profile::Phase::Forward);
  detail::check_defined(a, "masked_fill");
  if (shape_numel(mask.shape) != static_cast<int64_t>(mask.data.size()))
    fail("masked_fill", "mask data does not fill its shape " + shape_str(mask.shape));
  detail::Broadcast bc = detail::broadcast_shapes(a.shape(), mask.shape, "masked_fill");
  if (bc.out != a.shape())
    fail("masked_fill",
         "mask " + shape_str(mask.shape) + " does not broadcast to " + shape_str(a.shape()));
  Tensor out = Tensor::empty(a.shape(), a.dtype());
  dispatch(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = a.value().data<T>();
    T* q = out.data<T>();
    const T fillv = static_cast<T>(value);
    detail::broadcast_loop(bc, [&](int64_t io, int64_t ia, int64_t im) {
      q[io] = mask.data[static_cast<size_t>(im)] ? fillv : p[ia];
    });
  });
  // Anomaly mode: a -inf fill (attention masks) is intended; only the kept elements count.
  const bool fill_finite = std::isfinite(value);
  if (!fill_finite && Tape::current().anomaly()) {
    dispatch(a.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* q = out.data<T>();
      detail::broadcast_loop(bc, [&](int64_t io, int64_t, int64_t im) {
        if (!mask.data[static_cast<size_t>(im)] && !std::isfinite(q[io]))
          fail("masked_fill", "anomaly: non-finite value " +
                                  std::to_string(static_cast<double>(q[io])) + " at element " +
                                  std::to_string(io) + " of the result " + shape_str(out.shape()));
      });
    });
  }
  // da += g where the mask is 0
  return make_result(
      "masked_fill", std::move(out), wants_grad({&a}),
      [ai = a.shared(), bc, m = mask.data](VarImpl& o) {
        dispatch(o.value.dtype(), [&](auto tag) {
          using T = decltype(tag);
          const T* g = o.grad.data<T>();
          T* d = detail::GradWriter<T>::accumulate(*ai).d;
          detail::broadcast_loop(bc, [&](int64_t io, int64_t ia, int64_t im) {
            if (!m[static_cast<size_t>(im)]) d[ia] += g[io];
          });
        });
      },
      /*anomaly_check=*/fill_finite);
}

namespace {
int64_t last_dim(const Var& a, const char* op) {
  detail::check_defined(a, op);
  if (a.ndim() < 1) fail(op, "needs at least one axis, got a scalar");
  return a.dim(-1);
}
}  // namespace

Var softmax(const Var& a) {
  profile::Scope prof_("softmax", profile::Phase::Forward);
  const int64_t c = last_dim(a, "softmax");
  const int64_t r = c ? a.numel() / c : 0;
  Tensor out = Tensor::empty(a.shape(), a.dtype());
  dispatch(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    kernels::softmax_rows<T>(a.value().data<T>(), out.data<T>(), r, c);
  });
  // dx = y ⊙ (g − Σ g·y) per row
  return make_result(
      "softmax", std::move(out), wants_grad({&a}), [ai = a.shared(), r, c](VarImpl& o) {
        dispatch(o.value.dtype(), [&](auto tag) {
          using T = decltype(tag);
          const T* y = o.value.data<T>();
          const T* g = o.grad.data<T>();
          const auto dx = detail::GradWriter<T>::of(*ai);  // every element written
          kernels::parallel_range(
              r, double(c) * 3 * kernels::kCostSimple, [&](int64_t i0, int64_t i1) {
                for (int64_t i = i0; i < i1; ++i) {
                  T dot = 0;
                  for (int64_t j = 0; j < c; ++j) dot += g[i * c + j] * y[i * c + j];
                  dx.write(i * c, (i + 1) * c, [&](int64_t e) { return y[e] * (g[e] - dot); });
                }
              });
        });
      });
}

Var log_softmax(const Var& a) {
  profile::Scope prof_("log_softmax", profile::Phase::Forward);
  const int64_t c = last_dim(a, "log_softmax");
  const int64_t r = c ? a.numel() / c : 0;
  Tensor out = Tensor::empty(a.shape(), a.dtype());
  dispatch(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    kernels::log_softmax_rows<T>(a.value().data<T>(), out.data<T>(), r, c);
  });
  // dx = g − exp(y)·Σ g per row
  return make_result(
      "log_softmax", std::move(out), wants_grad({&a}), [ai = a.shared(), r, c](VarImpl& o) {
        dispatch(o.value.dtype(), [&](auto tag) {
          using T = decltype(tag);
          const T* y = o.value.data<T>();
          const T* g = o.grad.data<T>();
          T* d = detail::GradWriter<T>::accumulate(*ai).d;
          kernels::parallel_range(r, double(c) * kernels::kCostTranscendental,
                                  [&](int64_t i0, int64_t i1) {
                                    for (int64_t i = i0; i < i1; ++i) {
                                      T s = 0;
                                      for (int64_t j = 0; j < c; ++j) s += g[i * c + j];
                                      for (int64_t j = 0; j < c; ++j)
                                        d[i * c + j] += g[i * c + j] - std::exp(y[i * c + j]) * s;
                                    }
                                  });
        });
      });
}

namespace {

int64_t check_layer_norm(const Var& x, const Var& gamma, const Var& beta, const char* op) {
  const int64_t c = last_dim(x, op);
  detail::check_same_dtype(x, gamma, op);
  detail::check_same_dtype(x, beta, op);
  if (gamma.shape() != Shape{c} || beta.shape() != Shape{c})
    fail(op, "gamma " + shape_str(gamma.shape()) + " and beta " + shape_str(beta.shape()) +
                 " must be [" + std::to_string(c) + "] for input " + shape_str(x.shape()));
  return c;
}

// Row i's terms of dγ and dβ (g·x̂ and g), added to the sums of its block (kernels::
// rows_with_column_sums). Restrict pointers: the sums are not the rows they add up, which lets
// the loops vectorize.
template <typename T>
void add_layer_norm_param_terms(T* __restrict pdg, T* __restrict pdb, const T* __restrict xr,
                                const T* __restrict gr, T m, T s, int64_t c) {
  if (pdg)
    for (int64_t j = 0; j < c; ++j) pdg[j] += gr[j] * ((xr[j] - m) * s);
  if (pdb)
    for (int64_t j = 0; j < c; ++j) pdb[j] += gr[j];
}

// x̂ = (x − μ)·rstd;  dγ += Σ_rows g·x̂;  dβ += Σ_rows g;
// dx = rstd·(ĝ − mean(ĝ) − x̂·mean(ĝ·x̂)) with ĝ = g·γ, put into dx1 and (when given) dx2,
// in that order per element (so one value as both inputs receives the sum of both).
// One pass over the rows for all of them: dγ and dβ are summed in fixed blocks of rows
// (kernels::rows_with_column_sums), so that x and g, no longer in cache since the forward, are
// read once (the column sums' own pass cost as much as the dx pass at the medium model's shapes).
// With drop2 on, the second input went through that dropout: dx2 gets ds·keep/(1-p).
template <typename T>
void layer_norm_backward(const T* px, const T* pg, const T* g, const T* mu, const T* rs, int64_t r,
                         int64_t c, const detail::GradWriter<T>& dx1,
                         const detail::GradWriter<T>& dx2, T* dg, T* db,
                         const detail::FusedDropout& drop2 = {}) {
  const bool dx = dx1.d || dx2.d;
  if (!dx && !dg && !db) return;
  T* const sums[2] = {dg, db};
  const double cost =
      double(c) * ((dx ? 6 : 3) * kernels::kCostSimple + (drop2.on ? detail::kCostDropout : 0));
  kernels::rows_with_column_sums(r, c, cost, sums, [&](int64_t i, T* part) {
    const T* xr = px + i * c;
    const T* gr = g + i * c;
    const T m = mu[i], s = rs[i];
    add_layer_norm_param_terms(dg ? part : nullptr, db ? part + c : nullptr, xr, gr, m, s, c);
    if (!dx) return;
    // mean(ĝ) and mean(ĝ·x̂) as 8-way sums (kernels::row_sum): vectorized
    const T m1 =
        kernels::row_sum<T>(c, [&](int64_t j) { return gr[j] * pg[j]; }) / static_cast<T>(c);
    const T m2 =
        kernels::row_sum<T>(c, [&](int64_t j) { return gr[j] * pg[j] * ((xr[j] - m) * s); }) /
        static_cast<T>(c);
    const auto v = [&](int64_t e) {
      const int64_t j = e - i * c;
      const T xh = (xr[j] - m) * s;
      return s * (gr[j] * pg[j] - m1 - xh * m2);
    };
    if (dx1.d) dx1.write(i * c, (i + 1) * c, v);
    if (dx2.d && drop2.on)
      drop2.keep().write_grad<T>(i * c, (i + 1) * c, static_cast<T>(drop2.keep_scale), v, dx2.d,
                                 dx2.fresh);
    else if (dx2.d)
      dx2.write(i * c, (i + 1) * c, v);
  });
}

// x̂ = x·rstd;  dγ += Σ_rows g·x̂;  dx = rstd·(ĝ − x̂·mean(ĝ·x̂)) with ĝ = g·γ. dγ summed in fixed
// blocks of rows as layer_norm_backward's.
template <typename T>
void rms_norm_backward(const T* px, const T* pg, const T* g, const T* rs, int64_t r, int64_t c,
                       const detail::GradWriter<T>& dx, T* dg) {
  if (!dx.d && !dg) return;
  T* const sums[1] = {dg};
  const double cost = double(c) * (dx.d ? 5 : 2) * kernels::kCostSimple;
  kernels::rows_with_column_sums(r, c, cost, sums, [&](int64_t i, T* part) {
    const T* xr = px + i * c;
    const T* gr = g + i * c;
    const T s = rs[i];
    if (dg)
      for (int64_t j = 0; j < c; ++j) part[j] += gr[j] * (xr[j] * s);
    if (!dx.d) return;
    const T m = kernels::row_sum<T>(c, [&](int64_t j) { return gr[j] * pg[j] * (xr[j] * s); }) /
                static_cast<T>(c);
    dx.write(i * c, (i + 1) * c, [&](int64_t e) {
      const int64_t j = e - i * c;
      return s * (gr[j] * pg[j] - xr[j] * s * m);
    });
  });
}

}  // namespace

Var rms_norm(const Var& x, const Var& gamma, double eps) {
  profile::Scope prof_("rms_norm", profile::Phase::Forward);
  const int64_t c = last_dim(x, "rms_norm");
  detail::check_same_dtype(x, gamma, "rms_norm");
  if (gamma.shape() != Shape{c})
    fail("rms_norm", "gamma " + shape_str(gamma.shape()) + " must be [" + std::to_string(c) +
                         "] for input " + shape_str(x.shape()));
  const int64_t r = c ? x.numel() / c : 0;
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  Tensor rstd = Tensor::empty({r}, x.dtype());
  dispatch(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    kernels::rms_norm_rows<T>(x.value().data<T>(), gamma.value().data<T>(), out.data<T>(),
                              rstd.data<T>(), r, c, eps);
  });
  return make_result("rms_norm", std::move(out), wants_grad({&x, &gamma}),
                     [xi = x.shared(), gi = gamma.shared(), rstd, r, c](VarImpl& o) {
                       dispatch(o.value.dtype(), [&](auto tag) {
                         using T = decltype(tag);
                         rms_norm_backward<T>(xi->value.data<T>(), gi->value.data<T>(),
                                              o.grad.data<T>(), rstd.data<T>(), r, c,
                                              detail::GradWriter<T>::of(*xi),
                                              detail::GradWriter<T>::accumulate(*gi).d);
                       });
                     });
}

Var layer_norm(const Var& x, const Var& gamma, const Var& beta, double eps) {
  profile::Scope prof_("layer_norm", profile::Phase::Forward);
  const int64_t c = check_layer_norm(x, gamma, beta, "layer_norm");
  const int64_t r = c ? x.numel() / c : 0;
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  Tensor mean = Tensor::empty({r}, x.dtype()), rstd = Tensor::empty({r}, x.dtype());
  dispatch(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    kernels::layer_norm_rows<T>(x.value().data<T>(), gamma.value().data<T>(),
                                beta.value().data<T>(), out.data<T>(), mean.data<T>(),
                                rstd.data<T>(), r, c, eps);
  });
  return make_result(
      "layer_norm", std::move(out), wants_grad({&x, &gamma, &beta}),
      [xi = x.shared(), gi = gamma.shared(), bi = beta.shared(), mean, rstd, r, c](VarImpl& o) {
        dispatch(o.value.dtype(), [&](auto tag) {
          using T = decltype(tag);
          const auto dx = detail::GradWriter<T>::of(*xi);  // every element written
          layer_norm_backward<T>(xi->value.data<T>(), gi->value.data<T>(), o.grad.data<T>(),
                                 mean.data<T>(), rstd.data<T>(), r, c, dx, {},
                                 detail::GradWriter<T>::accumulate(*gi).d,
                                 detail::GradWriter<T>::accumulate(*bi).d);
        });
      });
}

namespace {
// kernels::add_layer_norm_rows over a + drop(b): each row's sum is made (the bits of dropout's
// apply, then the add) just before the row is normalized, while it is still in L1.
template <typename T>
void add_dropped_layer_norm_rows(const T* a, const T* b, const detail::FusedDropout& drop, T* sum,
                                 const T* gamma, const T* beta, T* y, T* mean, T* rstd, int64_t r,
                                 int64_t c, double eps) {
  const double cost = double(c) * (5 * kernels::kCostSimple + detail::kCostDropout);
  kernels::parallel_range(r, cost, [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; ++i) {
      drop.keep().add_apply<T>(i * c, (i + 1) * c, static_cast<T>(drop.keep_scale), a, b, sum);
      kernels::layer_norm_rows<T>(sum + i * c, gamma, beta, y + i * c, mean + i, rstd + i, 1, c,
                                  eps);
    }
  });
}
}  // namespace

Var add_layer_norm(const Var& x, const Var& res, const Var& gamma, const Var& beta, double eps,
                   double dropout_p, Rng* rng) {
  profile::Scope prof_("add_layer_norm", profile::Phase::Forward);
  const int64_t c = check_layer_norm(x, gamma, beta, "add_layer_norm");
  detail::check_same_dtype(x, res, "add_layer_norm");
  if (res.shape() != x.shape())
    fail("add_layer_norm", "residual " + shape_str(res.shape()) + " and input " +
                               shape_str(x.shape()) + " must have the same shape");
  const detail::FusedDropout drop =
      detail::fused_dropout(dropout_p, rng, "add_layer_norm", res.numel());
  const int64_t r = c ? x.numel() / c : 0;
  Tensor sum = Tensor::empty(x.shape(), x.dtype());  // x + res, kept for the backward
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  Tensor mean = Tensor::empty({r}, x.dtype()), rstd = Tensor::empty({r}, x.dtype());
  dispatch(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (drop.on)
      add_dropped_layer_norm_rows<T>(x.value().data<T>(), res.value().data<T>(), drop,
                                     sum.data<T>(), gamma.value().data<T>(), beta.value().data<T>(),
                                     out.data<T>(), mean.data<T>(), rstd.data<T>(), r, c, eps);
    else
      kernels::add_layer_norm_rows<T>(x.value().data<T>(), res.value().data<T>(), sum.data<T>(),
                                      gamma.value().data<T>(), beta.value().data<T>(),
                                      out.data<T>(), mean.data<T>(), rstd.data<T>(), r, c, eps);
  });
  // as layer_norm over s = x + drop(res), with ds written to dx and ds·keep/(1-p) to dres
  return make_result("add_layer_norm", std::move(out), wants_grad({&x, &res, &gamma, &beta}),
                     [xi = x.shared(), ri = res.shared(), gi = gamma.shared(), bi = beta.shared(),
                      sum, mean, rstd, r, c, drop](VarImpl& o) {
                       dispatch(o.value.dtype(), [&](auto tag) {
                         using T = decltype(tag);
                         const auto dx = detail::GradWriter<T>::of(*xi);
                         const auto dr = detail::GradWriter<T>::of(*ri);
                         layer_norm_backward<T>(sum.data<T>(), gi->value.data<T>(),
                                                o.grad.data<T>(), mean.data<T>(), rstd.data<T>(), r,
                                                c, dx, dr, detail::GradWriter<T>::accumulate(*gi).d,
                                                detail::GradWriter<T>::accumulate(*bi).d, drop);
                       });
                     });
}

namespace detail {
void check_dropout_p(double p, const char* op) {
  if (!(p >= 0.0 && p < 1.0))
    fail(op, "dropout probability " + std::to_string(p) + " is not in [0, 1)");
}

FusedDropout fused_dropout(double p, Rng* rng, const char* op, int64_t numel) {
  check_dropout_p(p, op);
  if (p == 0.0) return {};
  if (!rng) fail(op, "dropout " + std::to_string(p) + " needs a random generator");
  // One draw per call keys the whole mask: the run's Rng (saved in checkpoints) still decides
  // every bit. The Philox words cost several times a memory pass, so they are made once here,
  // as bits, and every pass of the forward and backward reads those.
  FusedDropout drop{philox::DropoutMask::make(p, rng->next_u64()),
                    Tensor::empty({philox::DropoutMask::bit_words(numel)}, DType::F64),
                    1.0 / (1.0 - p), true};
  uint64_t* bits = static_cast<uint64_t*>(drop.bits.raw());
  kernels::parallel_range(philox::DropoutMask::bit_words(numel), 64 * kCostPhilox,
                          [&](int64_t u0, int64_t u1) {
                            drop.mask.bits(static_cast<uint64_t>(u0), u1 - u0, bits + u0);
                          });
  return drop;
}
}  // namespace detail

Var dropout(const Var& a, double p, bool training, Rng& rng) {
  profile::Scope prof_("dropout", profile::Phase::Forward);
  detail::check_defined(a, "dropout");
  detail::check_dropout_p(p, "dropout");
  if (!training || p == 0.0) return a;
  const detail::FusedDropout drop = detail::fused_dropout(p, &rng, "dropout", a.numel());
  const philox::KeepBits keep = drop.keep();
  const double scale = drop.keep_scale;
  Tensor out = Tensor::empty(a.shape(), a.dtype());
  dispatch(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* x = a.value().data<T>();
    T* q = out.data<T>();
    kernels::parallel_range(a.numel(), detail::kCostDropout, [&](int64_t i0, int64_t i1) {
      keep.apply<T>(i0, i1, static_cast<T>(scale), x, q);
    });
  });
  // da += g·keep, keep = mask/(1-p) from the forward's bits
  return make_result("dropout", std::move(out), wants_grad({&a}),
                     [ai = a.shared(), bits = drop.bits, keep, scale](VarImpl& o) {
                       dispatch(o.value.dtype(), [&](auto tag) {
                         using T = decltype(tag);
                         const T* g = o.grad.data<T>();
                         T* d = detail::GradWriter<T>::accumulate(*ai).d;
                         kernels::parallel_range(
                             o.value.numel(), detail::kCostDropout, [&](int64_t i0, int64_t i1) {
                               keep.apply_add<T>(i0, i1, static_cast<T>(scale), g, d);
                             });
                       });
                     });
}

Var add_dropout(const Var& x, const Var& y, double p, Rng* rng) {
  detail::check_dropout_p(p, "add_dropout");
  if (p == 0.0) return add(x, y);
  profile::Scope prof_("add_dropout", profile::Phase::Forward);
  detail::check_same_dtype(x, y, "add_dropout");
  if (x.shape() != y.shape())
    fail("add_dropout", "input " + shape_str(x.shape()) + " and dropped input " +
                            shape_str(y.shape()) + " must have the same shape");
  const detail::FusedDropout drop = detail::fused_dropout(p, rng, "add_dropout", y.numel());
  Tensor out = Tensor::empty(x.shape(), x.dtype());
  dispatch(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T *a = x.value().data<T>(), *b = y.value().data<T>();
    T* q = out.data<T>();
    kernels::parallel_range(
        x.numel(), kernels::kCostSimple + detail::kCostDropout, [&](int64_t i0, int64_t i1) {
          drop.keep().add_apply<T>(i0, i1, static_cast<T>(drop.keep_scale), a, b, q);
        });
  });
  // dx += g;  dy += g·keep/(1-p), keep from the forward's bits
  return make_result("add_dropout", std::move(out), wants_grad({&x, &y}),
                     [xi = x.shared(), yi = y.shared(), drop](VarImpl& o) {
                       dispatch(o.value.dtype(), [&](auto tag) {
                         using T = decltype(tag);
                         const T* g = o.grad.data<T>();
                         const auto dx = detail::GradWriter<T>::of(*xi);
                         const auto dy = detail::GradWriter<T>::of(*yi);
                         const auto gv = [g](int64_t i) { return g[i]; };
                         kernels::parallel_range(
                             o.value.numel(), 2 * kernels::kCostSimple + detail::kCostDropout,
                             [&](int64_t i0, int64_t i1) {
                               if (dx.d) dx.write(i0, i1, gv);
                               if (dy.d)
                                 drop.keep().write_grad<T>(i0, i1, static_cast<T>(drop.keep_scale),
                                                           gv, dy.d, dy.fresh);
                             });
                       });
                     });
}

namespace {

// Checks cross_entropy's targets and smoothing; returns the rows not ignored.
int64_t valid_targets(const Var& logits, const std::vector<int32_t>& targets,
                      const CrossEntropyOptions& opt, int64_t v, int64_t r) {
  if (static_cast<int64_t>(targets.size()) != r)
    fail("cross_entropy", std::to_string(targets.size()) + " targets for logits " +
                              shape_str(logits.shape()) + " (" + std::to_string(r) + " rows)");
  if (!(opt.label_smoothing >= 0.0 && opt.label_smoothing < 1.0))
    fail("cross_entropy",
         "label smoothing " + std::to_string(opt.label_smoothing) + " is not in [0, 1)");
  int64_t n_valid = 0;
  for (size_t i = 0; i < targets.size(); ++i) {
    int32_t t = targets[i];
    if (t == opt.ignore_index) continue;
    if (t < 0 || t >= v)
      fail("cross_entropy", "target " + std::to_string(t) + " at row " + std::to_string(i) +
                                " is outside [0, " + std::to_string(v) + ") for logits " +
                                shape_str(logits.shape()));
    ++n_valid;
  }
  return n_valid;
}

// One row of cross_entropy: pr = softmax(xr) (kept for backward) and, unless t is ignored, the
// row's loss, −log p_t smoothed by e towards the mean over the vocabulary.
template <typename T>
double softmax_nll_row(const T* xr, T* pr, int64_t v, int32_t t, int32_t ignore, double e) {
  T mx = -std::numeric_limits<T>::infinity();
  for (int64_t j = 0; j < v; ++j) mx = std::max(mx, xr[j]);
  T s = 0;
  if constexpr (std::is_same_v<T, float>) {
    kernels::exp_shifted(xr, mx, pr, v);  // (float: vectorized, kernels_exp.h)
    for (int64_t j = 0; j < v; ++j) s += pr[j];
  } else {
    for (int64_t j = 0; j < v; ++j) {
      pr[j] = std::exp(xr[j] - mx);
      s += pr[j];
    }
  }
  for (int64_t j = 0; j < v; ++j) pr[j] /= s;
  if (t == ignore) return 0;
  const double lse = static_cast<double>(mx) + std::log(static_cast<double>(s));
  double nll = lse - static_cast<double>(xr[t]);
  if (e > 0) {
    double mean_x = 0;
    for (int64_t j = 0; j < v; ++j) mean_x += static_cast<double>(xr[j]);
    mean_x /= static_cast<double>(v);
    nll = (1 - e) * nll + e * (lse - mean_x);
  }
  return nll;
}

}  // namespace

Var cross_entropy(const Var& logits, const std::vector<int32_t>& targets, CrossEntropyOptions opt) {
  profile::Scope prof_("cross_entropy", profile::Phase::Forward);
  const int64_t v = last_dim(logits, "cross_entropy");
  const int64_t r = v ? logits.numel() / v : 0;
  const int64_t n_valid = valid_targets(logits, targets, opt, v, r);
  const double e = opt.label_smoothing;
  Tensor prob = Tensor::empty(logits.shape(), logits.dtype());  // softmax, kept for backward
  Tensor out = Tensor::empty({}, logits.dtype());
  Tensor row_nll = Tensor::empty({r}, DType::F64);  // per row, summed in order after
  dispatch(logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* x = logits.value().data<T>();
    T* pp = prob.data<T>();
    double* nlls = row_nll.data<double>();
    kernels::parallel_range(
        r, double(v) * kernels::kCostTranscendental, [&](int64_t i0, int64_t i1) {
          for (int64_t i = i0; i < i1; ++i)
            nlls[i] = softmax_nll_row(x + i * v, pp + i * v, v, targets[static_cast<size_t>(i)],
                                      opt.ignore_index, e);
        });
    double total = 0;
    for (int64_t i = 0; i < r; ++i)
      if (targets[static_cast<size_t>(i)] != opt.ignore_index) total += nlls[i];
    // All targets ignored: loss 0 (and zero gradients below), never 0/0.
    out.data<T>()[0] = n_valid ? static_cast<T>(total / static_cast<double>(n_valid)) : T(0);
  });
  // dlogits[i, j] += g/n · (p_j − (1−e)·[j = t_i] − e/V) for rows not ignored
  return make_result(
      "cross_entropy", std::move(out), wants_grad({&logits}),
      [li = logits.shared(), prob, targets, n_valid, e, v, r, ig = opt.ignore_index](VarImpl& o) {
        if (n_valid == 0) {
          grad_buffer(*li);
          return;
        }
        dispatch(o.value.dtype(), [&](auto tag) {
          using T = decltype(tag);
          const T g = o.grad.data<T>()[0] / static_cast<T>(n_valid);
          const T* pp = prob.data<T>();
          T* d = detail::GradWriter<T>::accumulate(*li).d;
          const T smooth = static_cast<T>(e / static_cast<double>(v));
          const T on = static_cast<T>(1 - e);
          kernels::parallel_range(r, double(v) * kernels::kCostSimple, [&](int64_t i0, int64_t i1) {
            for (int64_t i = i0; i < i1; ++i) {
              int32_t t = targets[static_cast<size_t>(i)];
              if (t == ig) continue;
              for (int64_t j = 0; j < v; ++j) d[i * v + j] += g * (pp[i * v + j] - smooth);
              d[i * v + t] -= g * on;
            }
          });
        });
      });
}

}  // namespace seqtape
