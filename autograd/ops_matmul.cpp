// matmul: 2-D and batched, with transpose flags, forward and backward through BLAS gemm.
//
// Dimension key: M rows of op(A), K the contracted size, N columns of op(B); A is stored
// [M,K] (or [K,M] when trans_a), B is stored [K,N] (or [N,K] when trans_b).
#include <memory>

#include "autograd/ops_util.h"
#include "tensor/kernels.h"
#include "tensor/matmul_backend.h"
#include "tensor/profile.h"

namespace seqtape {

namespace {

struct MatmulPlan {
  int64_t batch = 1;  // number of gemms (1 when a shared 2-D b lets us flatten a's rows)
  int64_t m = 0, n = 0, k = 0;
  bool shared_b = false;  // b is 2-D and used by every batch of a
  Shape out;
};

MatmulPlan plan_matmul(const Var& a, const Var& b, bool ta, bool tb) {
  const char* op = "matmul";
  detail::check_same_dtype(a, b, op);
  const Shape& sa = a.shape();
  const Shape& sb = b.shape();
  auto both = [&] {
    return "A" + shape_str(sa) + (ta ? "ᵀ" : "") + " · B" + shape_str(sb) + (tb ? "ᵀ" : "");
  };
  if (sa.size() < 2 || sb.size() < 2) fail(op, "needs operands of rank >= 2, got " + both());
  MatmulPlan p;
  const size_t na = sa.size(), nb = sb.size();
  p.m = ta ? sa[na - 1] : sa[na - 2];
  const int64_t ka = ta ? sa[na - 2] : sa[na - 1];
  const int64_t kb = tb ? sb[nb - 1] : sb[nb - 2];
  p.n = tb ? sb[nb - 2] : sb[nb - 1];
  if (ka != kb)
    fail(op, "inner dimensions differ (" + std::to_string(ka) + " vs " + std::to_string(kb) +
                 "): " + both());
  p.k = ka;
  Shape lead(sa.begin(), sa.end() - 2);
  if (nb == 2) {
    p.shared_b = na > 2;
    p.batch = shape_numel(lead);
  } else {
    Shape lead_b(sb.begin(), sb.end() - 2);
    if (lead != lead_b) fail(op, "batch dimensions differ: " + both());
    p.batch = shape_numel(lead);
  }
  p.out = lead;
  p.out.push_back(p.m);
  p.out.push_back(p.n);
  return p;
}

// Where the products of a batch lie: `count` products, the i-th at a + i·a, b + i·b, c + i·c
// (b = 0: one B shared by all).
struct Steps {
  int64_t count = 1, a = 0, b = 0, c = 0;
};

// The backward of one product, or of a batch of them: dA = beta_a·dA + ∂/∂A, dB = beta_b·dB +
// ∂/∂B of C = op(A)·op(B) (beta 1 accumulates; beta 0 writes a freshly allocated gradient
// without zero-filling it). A shared B sums its gradient over the batch.
//   !ta: dA += dC·op(B)ᵀ           ta: dA += op(B)·dCᵀ
//   !tb: dB += op(A)ᵀ·dC           tb: dB += dCᵀ·op(A)
template <typename T>
void gemm_backward(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const T* a, const T* b,
                   const T* dc, T* da, T* db, T beta_a, T beta_b, const Steps& st = {}) {
  const int64_t lda = ta ? m : k, ldb = tb ? k : n;
  if (da) {
    if (!ta)
      kernels::gemm_batched<T>(false, !tb, m, k, n, T(1), dc, n, b, ldb, beta_a, da, k,
                               {st.count, 1, st.c, 0, st.b, 0, st.a, 0});
    else
      kernels::gemm_batched<T>(tb, true, k, m, n, T(1), b, ldb, dc, n, beta_a, da, m,
                               {st.count, 1, st.b, 0, st.c, 0, st.a, 0});
  }
  if (!db) return;
  // A shared B: one product per batch, each adding to the same dB after the first.
  const int64_t count = st.b == 0 ? st.count : 1, per = st.b == 0 ? 1 : st.count;
  for (int64_t i = 0; i < count; ++i) {
    const T beta = i == 0 ? beta_b : T(1);
    const T *ai = a + i * st.a, *ci = dc + i * st.c;
    if (!tb)
      kernels::gemm_batched<T>(!ta, false, k, n, m, T(1), ai, lda, ci, n, beta, db, n,
                               {per, 1, st.a, 0, st.c, 0, st.b, 0});
    else
      kernels::gemm_batched<T>(true, ta, n, k, m, T(1), ci, n, ai, lda, beta, db, k,
                               {per, 1, st.c, 0, st.a, 0, st.b, 0});
  }
}

// The bf16 roundings of a single product's operands, made in its forward and kept for its
// backward (kernels::Bf16Memo), which reads the same stored matrices again: null unless the
// op has a backward and its products run in bf16.
std::shared_ptr<kernels::Bf16Memo> forward_memo(bool grad, DType dt) {
  if (!grad || dt != DType::F32 || kernels::matmul_precision() != kernels::Precision::BF16)
    return nullptr;
  return std::make_shared<kernels::Bf16Memo>();
}

// A backward's memos: its forward's (the op's inputs), and its own for the output's gradient,
// which two of its products read and which lives only while the backward runs.
struct BackwardMemos {
  explicit BackwardMemos(kernels::Bf16Memo* forward)
      : fwd(forward), own(forward ? &mine : nullptr) {}
  kernels::Bf16MemoScope fwd;
  kernels::Bf16Memo mine;
  kernels::Bf16MemoScope own;
};

}  // namespace

Var matmul(const Var& a, const Var& b, bool ta, bool tb) {
  profile::Scope prof_("matmul", profile::Phase::Forward);
  MatmulPlan p = plan_matmul(a, b, ta, tb);
  // A shared B with untransposed A: all batches' rows stack into one [batch·M, K] gemm.
  const bool flat = p.shared_b && !ta;
  const int64_t gemms = flat ? 1 : p.batch;
  const int64_t m = flat ? p.batch * p.m : p.m;
  const int64_t a_step = p.m * p.k, b_step = p.shared_b || b.ndim() == 2 ? 0 : p.k * p.n,
                c_step = p.m * p.n;
  Tensor out = Tensor::empty(p.out, a.dtype());  // [..., M, N]
  const bool grad = detail::wants_grad({&a, &b});
  auto memo = forward_memo(grad && gemms == 1, a.dtype());
  dispatch(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    kernels::Bf16MemoScope memo_scope(memo.get());
    const T* pa = a.value().data<T>();
    const T* pb = b.value().data<T>();
    T* pc = out.data<T>();
    kernels::gemm_batched<T>(ta, tb, m, p.n, p.k, T(1), pa, ta ? p.m : p.k, pb, tb ? p.k : p.n,
                             T(0), pc, p.n, {gemms, 1, a_step, 0, b_step, 0, c_step, 0});
  });
  return detail::make_result("matmul", std::move(out), grad,
                             [ai = a.shared(), bi = b.shared(), ta, tb, gemms, m, n = p.n, k = p.k,
                              a_step, b_step, c_step, memo](VarImpl& o) {
                               BackwardMemos memos(memo.get());
                               dispatch(o.value.dtype(), [&](auto tag) {
                                 using T = decltype(tag);
                                 const T* pa = ai->value.data<T>();
                                 const T* pb = bi->value.data<T>();
                                 const T* dc = o.grad.data<T>();
                                 const auto wa = detail::GradWriter<T>::of(*ai);
                                 const auto wb = detail::GradWriter<T>::of(*bi);
                                 // Each batch writes its own slice of dA; a shared B (b_step 0)
                                 // sums over batches.
                                 gemm_backward<T>(ta, tb, m, n, k, pa, pb, dc, wa.d, wb.d,
                                                  wa.beta(), wb.beta(),
                                                  {gemms, a_step, b_step, c_step});
                               });
                             });
}

namespace {
// m[i] = g[i] where y[i] > 0, else 0: relu's backward from its output. g[i] is loaded whatever
// the test, and the pointers are restrict, so the loop vectorizes into a compare and a blend;
// written as `y > 0 ? g[i] : 0` it compiled to a branch per element, mispredicted on about half
// of a ReLU layer's elements (docs/performance.md).
template <typename T>
void relu_mask(const T* __restrict y, const T* __restrict g, T* __restrict m, int64_t count) {
  for (int64_t i = 0; i < count; ++i) {
    const T gi = g[i];
    m[i] = y[i] > T(0) ? gi : T(0);
  }
}

// affine and affine_relu: y = x·op(W) + b, then max(y, 0) when relu.
Var affine_op(const char* op, const Var& x, const Var& w, const Var& b, bool tw, bool relu) {
  profile::Scope prof_(op, profile::Phase::Forward);
  detail::check_same_dtype(x, w, op);
  const bool has_b = b.defined();
  if (has_b) detail::check_same_dtype(x, b, op);
  if (w.ndim() != 2 || x.ndim() < 1)
    fail(op, "needs x [..., K] and a 2-D weight, got x " + shape_str(x.shape()) + " and W " +
                 shape_str(w.shape()));
  const int64_t k = x.dim(-1), n = tw ? w.dim(0) : w.dim(1);
  if ((tw ? w.dim(1) : w.dim(0)) != k)
    fail(op, "x " + shape_str(x.shape()) + " does not match W" + (tw ? "ᵀ " : " ") +
                 shape_str(w.shape()));
  if (has_b && b.shape() != Shape{n})
    fail(op, "bias " + shape_str(b.shape()) + " must be [" + std::to_string(n) + "] for W " +
                 shape_str(w.shape()));
  const int64_t r = k ? x.numel() / k : 0;
  Shape os = x.shape();
  os.back() = n;
  Tensor out = Tensor::empty(os, x.dtype());  // [..., N]
  const bool grad = has_b ? detail::wants_grad({&x, &w, &b}) : detail::wants_grad({&x, &w});
  auto memo = forward_memo(grad, x.dtype());
  dispatch(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    kernels::Bf16MemoScope memo_scope(memo.get());
    T* y = out.data<T>();
    kernels::gemm_bias<T>(tw, r, n, k, x.value().data<T>(), k, w.value().data<T>(), tw ? k : n,
                          has_b ? b.value().data<T>() : nullptr, y, n, relu);
  });
  // relu: g ← g where y > 0, else 0 (relu's backward, y > 0 exactly where its input was);
  // then dX += g·op(W)ᵀ, dW += op-transposed Xᵀ·g, db += Σ_rows g
  return detail::make_result(
      op, std::move(out), grad,
      [xi = x.shared(), wi = w.shared(), bi = has_b ? b.shared() : nullptr, tw, r, n, k, relu,
       memo](VarImpl& o) {
        BackwardMemos memos(memo.get());
        dispatch(o.value.dtype(), [&](auto tag) {
          using T = decltype(tag);
          const T* g = o.grad.data<T>();
          Tensor masked;
          if (relu) {
            masked = Tensor::empty(o.grad.shape(), o.grad.dtype());
            T* m = masked.data<T>();
            const T* y = o.value.data<T>();
            kernels::parallel_range(r * n, kernels::kCostSimple, [m, y, g](int64_t i0, int64_t i1) {
              relu_mask(y + i0, g + i0, m + i0, i1 - i0);
            });
            g = m;
          }
          const auto wx = detail::GradWriter<T>::of(*xi);
          const auto ww = detail::GradWriter<T>::of(*wi);
          gemm_backward<T>(false, tw, r, n, k, xi->value.data<T>(), wi->value.data<T>(), g, wx.d,
                           ww.d, wx.beta(), ww.beta());
          if (bi && bi->requires_grad) {
            T* db = detail::GradWriter<T>::accumulate(*bi).d;
            kernels::add_column_sums(db, r, n, kernels::kCostSimple,
                                     [g, n](int64_t i, int64_t j) { return g[i * n + j]; });
          }
        });
      });
}
}  // namespace

Var affine(const Var& x, const Var& w, const Var& b, bool tw) {
  return affine_op("affine", x, w, b, tw, false);
}

Var affine_relu(const Var& x, const Var& w, const Var& b) {
  // Anomaly mode checks each op's result: fused, a NaN sum would leave as a ReLU's 0, unseen,
  // so there the two ops run (the same bits) and the product is named.
  if (Tape::current().anomaly()) return relu(affine(x, w, b));
  return affine_op("affine_relu", x, w, b, false, true);
}

}  // namespace seqtape
