// Elementwise ops: binary with NumPy broadcasting, scalar forms, and unary functions.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "autograd/ops_util.h"
#include "tensor/kernels.h"
#include "tensor/kernels_exp.h"
#include "tensor/profile.h"

namespace seqtape {
namespace detail {

void check_finite_result(const Tensor& t, const char* op) {
  dispatch(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = t.data<T>();
    for (int64_t i = 0, n = t.numel(); i < n; ++i)
      if (!std::isfinite(p[i]))
        fail(op, "anomaly: non-finite value " + std::to_string(static_cast<double>(p[i])) +
                     " at element " + std::to_string(i) + " of the result " + shape_str(t.shape()));
  });
}

Broadcast broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  Broadcast bc;
  bc.same = a == b;
  const size_t nd = std::max(a.size(), b.size());
  bc.out.assign(nd, 1);
  bc.sa.assign(nd, 0);
  bc.sb.assign(nd, 0);
  for (size_t i = 0; i < nd; ++i) {
    int64_t da = i < nd - a.size() ? 1 : a[i - (nd - a.size())];
    int64_t db = i < nd - b.size() ? 1 : b[i - (nd - b.size())];
    if (da != db && da != 1 && db != 1)
      fail(op, "shapes " + shape_str(a) + " and " + shape_str(b) + " do not broadcast");
    bc.out[i] = da == 1 ? db : da;
  }
  int64_t ra = 1, rb = 1;
  for (size_t i = nd; i-- > 0;) {
    int64_t da = i < nd - a.size() ? 1 : a[i - (nd - a.size())];
    int64_t db = i < nd - b.size() ? 1 : b[i - (nd - b.size())];
    bc.sa[i] = da == 1 ? 0 : ra;
    bc.sb[i] = db == 1 ? 0 : rb;
    ra *= da;
    rb *= db;
  }
  if (!bc.same && a == bc.out && b.size() <= a.size() &&
      std::equal(b.begin(), b.end(), a.end() - static_cast<long>(b.size())))
    bc.suffix_inner = shape_numel(b);
  return bc;
}

}  // namespace detail

using detail::Broadcast;
using detail::broadcast_loop;
using detail::make_result;
using detail::wants_grad;

namespace {

// out = f(a, b) with broadcasting; backward da += ga(g, a, b, out), db += gb(g, a, b, out),
// summed over the broadcast dimensions of each input. The same-shape and bias-like loops run on
// the pool's threads when big (kernels::parallel_range; a bias's sum over rows is split by
// columns); the general broadcast stays on one thread.
template <typename F, typename GA, typename GB>
Var binary(const char* op, const Var& a, const Var& b, F f, GA ga, GB gb) {
  using kernels::kCostSimple;
  using kernels::parallel_range;
  profile::Scope prof_(op, profile::Phase::Forward);
  detail::check_same_dtype(a, b, op);
  Broadcast bc = detail::broadcast_shapes(a.shape(), b.shape(), op);
  Tensor out = Tensor::empty(bc.out, a.dtype());
  dispatch(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* pa = a.value().data<T>();
    const T* pb = b.value().data<T>();
    T* po = out.data<T>();
    if (bc.same) {
      parallel_range(out.numel(), kCostSimple, [&](int64_t i0, int64_t i1) {
        for (int64_t i = i0; i < i1; ++i) po[i] = f(pa[i], pb[i]);
      });
    } else if (const int64_t in = bc.suffix_inner; in > 0) {
      parallel_range(out.numel() / in, double(in) * kCostSimple, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0 * in; r < r1 * in; r += in)
          for (int64_t j = 0; j < in; ++j) po[r + j] = f(pa[r + j], pb[j]);
      });
    } else {
      broadcast_loop(bc, [&](int64_t io, int64_t ia, int64_t ib) { po[io] = f(pa[ia], pb[ib]); });
    }
  });
  const bool grad = wants_grad({&a, &b});
  return make_result(
      op, std::move(out), grad, [ai = a.shared(), bi = b.shared(), bc, ga, gb](VarImpl& o) {
        dispatch(o.value.dtype(), [&](auto tag) {
          using T = decltype(tag);
          const T* g = o.grad.data<T>();
          const T* pa = ai->value.data<T>();
          const T* pb = bi->value.data<T>();
          const T* po = o.value.data<T>();
          // dA += ∂f/∂a · g, dB += ∂f/∂b · g (summed where broadcast)
          const int64_t n = o.value.numel();
          // Gradients whose every element is written here (same shape) need no zero fill
          // when new; summed ones (broadcast) accumulate.
          if (bc.same) {
            const auto wa = detail::GradWriter<T>::of(*ai), wb = detail::GradWriter<T>::of(*bi);
            parallel_range(n, kCostSimple, [&](int64_t i0, int64_t i1) {
              if (wa.d) wa.write(i0, i1, [&](int64_t i) { return ga(g[i], pa[i], pb[i], po[i]); });
              if (wb.d) wb.write(i0, i1, [&](int64_t i) { return gb(g[i], pa[i], pb[i], po[i]); });
            });
            return;
          }
          T* db = detail::GradWriter<T>::accumulate(*bi).d;
          if (const int64_t in = bc.suffix_inner; in > 0) {
            if (const auto wa = detail::GradWriter<T>::of(*ai); wa.d)
              parallel_range(n / in, double(in) * kCostSimple, [&](int64_t r0, int64_t r1) {
                for (int64_t r = r0 * in; r < r1 * in; r += in)
                  wa.write(r, r + in, [&](int64_t e) { return ga(g[e], pa[e], pb[e - r], po[e]); });
              });
            if (db)
              kernels::add_column_sums(db, n / in, in, kCostSimple, [&](int64_t i, int64_t j) {
                const int64_t e = i * in + j;
                return gb(g[e], pa[e], pb[j], po[e]);
              });
          } else {
            T* da = detail::GradWriter<T>::accumulate(*ai).d;
            broadcast_loop(bc, [&](int64_t io, int64_t ia, int64_t ib) {
              if (da) da[ia] += ga(g[io], pa[ia], pb[ib], po[io]);
              if (db) db[ib] += gb(g[io], pa[ia], pb[ib], po[io]);
            });
          }
        });
      });
}

// A unary op's float rows in vectors (kernels_exp.h), used for float in place of its f and df.
struct FloatRows {
  void (*forward)(const float* x, float* y, int64_t n) = nullptr;
  void (*backward)(const float* g, const float* x, float* dx, int64_t n, bool accumulate) = nullptr;
};

// out = f(a); backward da += df(g, a, out). cost: kernels::parallel_range's, per element.
template <typename F, typename DF>
Var unary(const char* op, const Var& a, F f, DF df, double cost = kernels::kCostSimple,
          FloatRows rows = {}) {
  profile::Scope prof_(op, profile::Phase::Forward);
  detail::check_defined(a, op);
  Tensor out = Tensor::empty(a.shape(), a.dtype());
  dispatch(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* pa = a.value().data<T>();
    T* po = out.data<T>();
    kernels::parallel_range(out.numel(), cost, [&](int64_t i0, int64_t i1) {
      if constexpr (std::is_same_v<T, float>)
        if (rows.forward) return rows.forward(pa + i0, po + i0, i1 - i0);
      for (int64_t i = i0; i < i1; ++i) po[i] = f(pa[i]);
    });
  });
  return make_result(op, std::move(out), wants_grad({&a}),
                     [ai = a.shared(), df, cost, rows](VarImpl& o) {
                       dispatch(o.value.dtype(), [&](auto tag) {
                         using T = decltype(tag);
                         const T* g = o.grad.data<T>();
                         const T* pa = ai->value.data<T>();
                         const T* po = o.value.data<T>();
                         const int64_t n = o.value.numel();
                         const auto da = detail::GradWriter<T>::of(*ai);  // every element written
                         kernels::parallel_range(n, cost, [&](int64_t i0, int64_t i1) {
                           if constexpr (std::is_same_v<T, float>)
                             if (rows.backward)
                               return rows.backward(g + i0, pa + i0, da.d + i0, i1 - i0, !da.fresh);
                           da.write(i0, i1, [&](int64_t i) { return df(g[i], pa[i], po[i]); });
                         });
                       });
                     });
}

}  // namespace

// d(a+b): da += g, db += g
Var add(const Var& a, const Var& b) {
  return binary(
      "add", a, b, [](auto x, auto y) { return x + y; }, [](auto g, auto, auto, auto) { return g; },
      [](auto g, auto, auto, auto) { return g; });
}
// d(a-b): da += g, db -= g
Var sub(const Var& a, const Var& b) {
  return binary(
      "sub", a, b, [](auto x, auto y) { return x - y; }, [](auto g, auto, auto, auto) { return g; },
      [](auto g, auto, auto, auto) { return -g; });
}
// d(a·b): da += g·b, db += g·a
Var mul(const Var& a, const Var& b) {
  return binary(
      "mul", a, b, [](auto x, auto y) { return x * y; },
      [](auto g, auto, auto y, auto) { return g * y; },
      [](auto g, auto x, auto, auto) { return g * x; });
}
// d(a/b): da += g/b, db -= g·a/b²
Var div(const Var& a, const Var& b) {
  return binary(
      "div", a, b, [](auto x, auto y) { return x / y; },
      [](auto g, auto, auto y, auto) { return g / y; },
      [](auto g, auto x, auto y, auto) { return -g * x / (y * y); });
}

// d(a+s): da += g
Var add(const Var& a, double s) {
  return unary(
      "add_scalar", a, [s](auto x) { return x + static_cast<decltype(x)>(s); },
      [](auto g, auto, auto) { return g; });
}
// d(a·s): da += g·s
Var mul(const Var& a, double s) {
  return unary(
      "mul_scalar", a, [s](auto x) { return x * static_cast<decltype(x)>(s); },
      [s](auto g, auto, auto) { return g * static_cast<decltype(g)>(s); });
}
// d(s-a): da -= g
Var rsub(double s, const Var& a) {
  return unary(
      "rsub_scalar", a, [s](auto x) { return static_cast<decltype(x)>(s) - x; },
      [](auto g, auto, auto) { return -g; });
}
// d(-a): da -= g
Var neg(const Var& a) {
  return unary(
      "neg", a, [](auto x) { return -x; }, [](auto g, auto, auto) { return -g; });
}
// d exp(a): da += g·exp(a)
Var exp(const Var& a) {
  return unary(
      "exp", a, [](auto x) { return std::exp(x); }, [](auto g, auto, auto y) { return g * y; },
      kernels::kCostTranscendental);
}
// d log(a): da += g/a
Var log(const Var& a) {
  return unary(
      "log", a, [](auto x) { return std::log(x); }, [](auto g, auto x, auto) { return g / x; },
      kernels::kCostTranscendental);
}
// d sqrt(a): da += g/(2·sqrt(a))
Var sqrt(const Var& a) {
  return unary(
      "sqrt", a, [](auto x) { return std::sqrt(x); },
      [](auto g, auto, auto y) { return g / (y + y); }, kernels::kCostTranscendental);
}
// d tanh(a): da += g·(1 - tanh²)
Var tanh(const Var& a) {
  return unary(
      "tanh", a, [](auto x) { return std::tanh(x); },
      [](auto g, auto, auto y) { return g * (1 - y * y); }, kernels::kCostTranscendental);
}
// d relu(a): da += g·[a > 0]
Var relu(const Var& a) {
  return unary(
      "relu", a, [](auto x) { return x > 0 ? x : decltype(x)(0); },
      [](auto g, auto x, auto) { return x > 0 ? g : decltype(g)(0); });
}
// silu(a) = a·σ(a) = a / (1 + e^−a) (kernels::Act::Silu's expression); d silu: da += g·σ·(1 +
// a·(1 − σ)). float: in vectors (kernels_exp.h); double: std::exp.
Var silu(const Var& a) {
  return unary(
      "silu", a, [](auto x) { return x / (decltype(x)(1) + std::exp(-x)); },
      [](auto g, auto x, auto) {
        using T = decltype(x);
        const T s = T(1) / (T(1) + std::exp(-x));
        return g * s * (T(1) + x * (T(1) - s));
      },
      kernels::kCostTranscendental, {kernels::silu_forward, kernels::silu_backward});
}
// gelu(a) = a·Φ(a), Φ(a) = ½·erfc(−a/√2) (1 + erf(a/√2) would lose Φ's digits for negative a);
// d gelu: da += g·(Φ(a) + a·φ(a)). float: in vectors (kernels_exp.h); double: std::erfc.
Var gelu(const Var& a) {
  return unary(
      "gelu", a,
      [](auto x) {
        using T = decltype(x);
        return x * (T(0.5) * std::erfc(-x * static_cast<T>(M_SQRT1_2)));
      },
      [](auto g, auto x, auto) {
        using T = decltype(x);
        T cdf = T(0.5) * std::erfc(-x * static_cast<T>(M_SQRT1_2));
        T pdf = std::exp(T(-0.5) * x * x) * static_cast<T>(0.3989422804014327);
        return g * (cdf + x * pdf);
      },
      kernels::kCostTranscendental, {kernels::gelu_forward, kernels::gelu_backward});
}

}  // namespace seqtape
