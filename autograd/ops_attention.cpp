// attention: scaled, masked softmax attention over all heads in one op, reading each head in
// place through its column block of q, k, v (a strided view, row stride C) instead of
// permute copies, and writing each head's context straight into its block of the result.
//
// Dimension key: B batch, H heads, Tq query positions, Tk key positions, C = H·Dh model
// width, Dh head width. Per (b, h) with Q, K, V the head's [T, Dh] blocks:
//   P = softmax(mask(scale·Q·Kᵀ))  [Tq, Tk]    ctx = P·V  [Tq, Dh]
#include <algorithm>
#include <cmath>
#include <limits>

#include "autograd/ops_util.h"
#include "tensor/kernels.h"
#include "tensor/profile.h"

namespace seqtape {

namespace {

struct AttnDims {
  int64_t B, H, Tq, Tk, C, Dh;
  double scale;
};

// Dropout on the probabilities: kept ones scaled by keep_scale = 1/(1-p); off when p is 0.
using AttnDropout = detail::FusedDropout;

// The mask's element strides over [B, H, Tq, Tk] (0 along broadcast axes).
struct MaskView {
  const uint8_t* data = nullptr;
  int64_t sb = 0, sh = 0, si = 0, sj = 0;
};

MaskView mask_view(const Mask* mask, const AttnDims& d) {
  MaskView mv;
  if (!mask) return mv;
  const char* op = "attention";
  if (shape_numel(mask->shape) != static_cast<int64_t>(mask->data.size()))
    fail(op, "mask data does not fill its shape " + shape_str(mask->shape));
  const Shape full{d.B, d.H, d.Tq, d.Tk};
  if (mask->shape.size() > 4)
    fail(op,
         "mask " + shape_str(mask->shape) + " has more than 4 axes for scores " + shape_str(full));
  detail::Broadcast bc = detail::broadcast_shapes(full, mask->shape, op);
  if (bc.out != full)
    fail(op,
         "mask " + shape_str(mask->shape) + " does not broadcast to the scores " + shape_str(full));
  mv.data = mask->data.data();
  mv.sb = bc.sb[0];
  mv.sh = bc.sb[1];
  mv.si = bc.sb[2];
  mv.sj = bc.sb[3];
  return mv;
}

// The heads of every batch row as one batched product (kernels::gemm_batched over b, h): head
// h of a [B, T, C] tensor is its [T, Dh] column block at b·T·C + h·Dh, read in place with row
// stride C; its scores (and their gradient) are the dense block (b·H + h)·Tq·Tk of [B, H, Tq,
// Tk]. Heads as small as the bench models' (up to 64^3 multiply-adds) run on
// kernels::gemm_small_batched, each head wholly on one of the pool's threads; bigger ones on
// OpenBLAS, one gemm per head in the order b, then h, or on oneDNN, one primitive for all.
struct HeadStrides {
  int64_t s0, s1;
};
HeadStrides head_of(const AttnDims& d, int64_t T) {
  return {T * d.C, d.Dh};
}
HeadStrides scores_of(const AttnDims& d) {
  return {d.H * d.Tq * d.Tk, d.Tq * d.Tk};
}
kernels::GemmBatch over_heads(const AttnDims& d, HeadStrides a, HeadStrides b, HeadStrides c) {
  return {d.B, d.H, a.s0, a.s1, b.s0, b.s1, c.s0, c.s1};
}

// Scores p[j] of one row where its mask m[j·sj] is set become −∞. The key axis is the mask's
// last: contiguous (sj 1) or broadcast (sj 0). Restrict pointers and a select rather than a
// branch let the loop vectorize (a branch per score, with m a uint8_t that may alias p as far as
// the compiler knows, and the row's indices divided out per row, made the pass 10% of the small
// model's attention forward).
template <typename T>
void mask_row(const uint8_t* __restrict m, int64_t sj, T* __restrict p, int64_t n) {
  const T ninf = -std::numeric_limits<T>::infinity();
  if (sj == 0) {
    if (*m) std::fill_n(p, n, ninf);
    return;
  }
  for (int64_t j = 0; j < n; ++j) p[j] = m[j] ? ninf : p[j];
}

// The probabilities after dropout, D = P ⊙ keep, into out (all B·H·Tq·Tk of them).
template <typename T>
void drop_probs(const AttnDims& d, const AttnDropout& dr, const T* probs, T* out) {
  kernels::parallel_range(d.B * d.H * d.Tq * d.Tk, detail::kCostDropout,
                          [&](int64_t i0, int64_t i1) {
                            dr.keep().apply<T>(i0, i1, static_cast<T>(dr.keep_scale), probs, out);
                          });
}

// The forward in three passes: every head's scores p [Tq, Tk] = scale·Q·Kᵀ, then mask and
// softmax over all B·H·Tq rows at once (rows split over the pool's threads when big:
// kernels::softmax_rows), then every head's ctx block = p·V (or D·V with dropout, D in
// `dropped`).
template <typename T>
void attention_forward(const AttnDims& d, const MaskView& mv, const AttnDropout& dr, const T* q,
                       const T* k, const T* v, T* probs, T* dropped, T* ctx) {
  const HeadStrides hq = head_of(d, d.Tq), hk = head_of(d, d.Tk), sc = scores_of(d);
  kernels::gemm_batched<T>(false, true, d.Tq, d.Tk, d.Dh, static_cast<T>(d.scale), q, d.C, k, d.C,
                           T(0), probs, d.Tk, over_heads(d, hq, hk, sc));
  const int64_t rows = d.B * d.H * d.Tq;
  if (mv.data)
    kernels::parallel_range(rows, double(d.Tk) * kernels::kCostSimple, [&](int64_t r0, int64_t r1) {
      // r = (b·H + h)·Tq + i, its indices counted along rather than divided out per row
      int64_t i = r0 % d.Tq, h = r0 / d.Tq % d.H, b = r0 / (d.Tq * d.H);
      for (int64_t r = r0; r < r1; ++r) {
        mask_row(mv.data + b * mv.sb + h * mv.sh + i * mv.si, mv.sj, probs + r * d.Tk, d.Tk);
        if (++i == d.Tq) {
          i = 0;
          if (++h == d.H) h = 0, ++b;
        }
      }
    });
  kernels::softmax_rows<T>(probs, probs, rows, d.Tk);
  if (dr.on) drop_probs(d, dr, probs, dropped);
  kernels::gemm_batched<T>(false, false, d.Tq, d.Dh, d.Tk, T(1), dr.on ? dropped : probs, d.Tk, v,
                           d.C, T(0), ctx, d.C, over_heads(d, sc, hk, hq));
}

// The backward, with dp a [B, H, Tq, Tk] scratch, in three passes like the forward:
//   dP = dctx·Vᵀ;  dV += Pᵀ·dctx;  then dS = scale·P ⊙ (dP − Σ_j dP·P) over all rows (split
//   over the pool's threads when big);  then dQ += dS·K;  dK += dSᵀ·Q.
// Masked entries have P = 0, so their dS is 0 (a fully masked row gives zeros throughout). Each
// head writes its own blocks of dQ, dK, dV, so every element receives its terms in the same
// order whatever the batching (dV, then dQ, then dK, when q, k, v are one value).
// With dropout, D = P ⊙ keep is made again into `dropped` (from the forward's keep bits) for
// dV += Dᵀ·dctx, and the row pass first takes dP = dD ⊙ keep in place, from the same bits.
template <typename T>
void attention_backward(const AttnDims& d, const AttnDropout& dr, const T* q, const T* k,
                        const T* v, const T* probs, T* dropped, const T* dctx, T* dp, T* dq, T* dk,
                        T* dv, T beta_q, T beta_k, T beta_v) {
  const HeadStrides hq = head_of(d, d.Tq), hk = head_of(d, d.Tk), sc = scores_of(d);
  kernels::gemm_batched<T>(false, true, d.Tq, d.Tk, d.Dh, T(1), dctx, d.C, v, d.C, T(0), dp, d.Tk,
                           over_heads(d, hq, hk, sc));
  if (dv) {
    if (dr.on) drop_probs(d, dr, probs, dropped);
    kernels::gemm_batched<T>(true, false, d.Tk, d.Dh, d.Tq, T(1), dr.on ? dropped : probs, d.Tk,
                             dctx, d.C, beta_v, dv, d.C, over_heads(d, sc, hq, hk));
  }
  const T scale = static_cast<T>(d.scale);
  const double cost =
      double(d.Tk) * (3 * kernels::kCostSimple + (dr.on ? detail::kCostDropout : 0));
  kernels::parallel_range(d.B * d.H * d.Tq, cost, [&](int64_t r0, int64_t r1) {
    if (dr.on) dr.keep().apply<T>(r0 * d.Tk, r1 * d.Tk, static_cast<T>(dr.keep_scale), dp, dp);
    for (int64_t r = r0; r < r1; ++r) {
      const T* pr = probs + r * d.Tk;
      T* gr = dp + r * d.Tk;
      const T dot = kernels::row_sum<T>(d.Tk, [gr, pr](int64_t j) { return gr[j] * pr[j]; });
      for (int64_t j = 0; j < d.Tk; ++j) gr[j] = scale * pr[j] * (gr[j] - dot);
    }
  });
  if (dq)
    kernels::gemm_batched<T>(false, false, d.Tq, d.Dh, d.Tk, T(1), dp, d.Tk, k, d.C, beta_q, dq,
                             d.C, over_heads(d, sc, hk, hq));
  if (dk)
    kernels::gemm_batched<T>(true, false, d.Tk, d.Dh, d.Tq, T(1), dp, d.Tk, q, d.C, beta_k, dk, d.C,
                             over_heads(d, sc, hq, hk));
}

AttnDims attention_dims(const Var& q, const Var& k, const Var& v, int64_t heads) {
  const char* op = "attention";
  detail::check_same_dtype(q, k, op);
  detail::check_same_dtype(q, v, op);
  auto all = [&] {
    return "q " + shape_str(q.shape()) + ", k " + shape_str(k.shape()) + ", v " +
           shape_str(v.shape()) + ", " + std::to_string(heads) + " heads";
  };
  if (q.ndim() != 3 || k.ndim() != 3 || k.shape() != v.shape() || q.dim(0) != k.dim(0) ||
      q.dim(2) != k.dim(2))
    fail(op, "needs q [B, Tq, C] and k, v [B, Tk, C]: " + all());
  if (heads < 1 || q.dim(2) % heads != 0)
    fail(op, "width is not divisible by the number of heads: " + all());
  AttnDims d{q.dim(0), heads, q.dim(1), k.dim(1), q.dim(2), q.dim(2) / heads, 0};
  d.scale = d.Dh > 0 ? 1.0 / std::sqrt(static_cast<double>(d.Dh)) : 1.0;
  return d;
}

}  // namespace

Var attention(const Var& q, const Var& k, const Var& v, int64_t heads, const Mask* mask,
              Tensor* weights, double dropout_p, Rng* rng) {
  profile::Scope prof_("attention", profile::Phase::Forward);
  const AttnDims d = attention_dims(q, k, v, heads);
  const MaskView mv = mask_view(mask, d);
  const AttnDropout dr =
      detail::fused_dropout(dropout_p, rng, "attention", d.B * d.H * d.Tq * d.Tk);
  Tensor out = Tensor::empty(q.shape(), q.dtype());                 // [B, Tq, C]
  Tensor probs = Tensor::empty({d.B, d.H, d.Tq, d.Tk}, q.dtype());  // [B, H, Tq, Tk]
  dispatch(q.dtype(), [&](auto tag) {
    using T = decltype(tag);
    Tensor dropped = dr.on ? Tensor::empty(probs.shape(), q.dtype()) : Tensor();  // D
    attention_forward<T>(d, mv, dr, q.value().data<T>(), k.value().data<T>(), v.value().data<T>(),
                         probs.data<T>(), dr.on ? dropped.data<T>() : nullptr, out.data<T>());
  });
  if (weights) *weights = probs.clone();
  return detail::make_result(
      "attention", std::move(out), detail::wants_grad({&q, &k, &v}),
      [qi = q.shared(), ki = k.shared(), vi = v.shared(), probs, d, dr](VarImpl& o) {
        dispatch(o.value.dtype(), [&](auto tag) {
          using T = decltype(tag);
          // Each (b, h) writes its own blocks of dQ, dK, dV, so a fresh gradient is written
          // whole without zero-filling — unless two of q, k, v are one value.
          const bool alias = qi == ki || qi == vi || ki == vi;
          auto writer = [alias](VarImpl& x) {
            return alias ? detail::GradWriter<T>::accumulate(x) : detail::GradWriter<T>::of(x);
          };
          const auto wq = writer(*qi), wk = writer(*ki), wv = writer(*vi);
          Tensor scratch = Tensor::empty(probs.shape(), o.value.dtype());  // dP / dS
          Tensor dropped = dr.on ? Tensor::empty(probs.shape(), o.value.dtype()) : Tensor();
          attention_backward<T>(
              d, dr, qi->value.data<T>(), ki->value.data<T>(), vi->value.data<T>(), probs.data<T>(),
              dr.on ? dropped.data<T>() : nullptr, o.grad.data<T>(), scratch.data<T>(), wq.d, wk.d,
              wv.d, wq.beta(), wk.beta(), wv.beta());
        });
      });
}

}  // namespace seqtape
