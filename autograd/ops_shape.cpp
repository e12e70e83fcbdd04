// Reductions and shape ops: sum, mean, reshape, transpose/permute, concat, slice.
//
// Dimension key: an axis splits a shape into [O, A, I] — O outer elements before it, A
// along it, I inner elements after it.
#include <numeric>

#include "autograd/ops_util.h"
#include "tensor/profile.h"

namespace seqtape {

using detail::make_result;
using detail::wants_grad;

namespace {

struct Split {
  int64_t outer = 1, along = 1, inner = 1;
};
Split split_at(const Shape& s, int axis) {
  Split sp;
  for (int i = 0; i < axis; ++i) sp.outer *= s[static_cast<size_t>(i)];
  sp.along = s[static_cast<size_t>(axis)];
  for (size_t i = static_cast<size_t>(axis) + 1; i < s.size(); ++i) sp.inner *= s[i];
  return sp;
}

// sum over everything, scaled (scale = 1 for sum, 1/n for mean).
Var reduce_all(const char* op, const Var& a, double scale) {
  profile::Scope prof_(op, profile::Phase::Forward);
  detail::check_defined(a, op);
  Tensor out = Tensor::empty({}, a.dtype());
  dispatch(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = a.value().data<T>();
    T s = 0;
    for (int64_t i = 0, n = a.numel(); i < n; ++i) s += p[i];
    out.data<T>()[0] = s * static_cast<T>(scale);
  });
  // da += g·scale everywhere
  return make_result(op, std::move(out), wants_grad({&a}), [ai = a.shared(), scale](VarImpl& o) {
    dispatch(o.value.dtype(), [&](auto tag) {
      using T = decltype(tag);
      T g = o.grad.data<T>()[0] * static_cast<T>(scale);
      T* da = detail::GradWriter<T>::accumulate(*ai).d;
      for (int64_t i = 0, n = ai->value.numel(); i < n; ++i) da[i] += g;
    });
  });
}

Var reduce_axis(const char* op, const Var& a, int axis, bool keepdim, bool is_mean) {
  profile::Scope prof_(op, profile::Phase::Forward);
  detail::check_defined(a, op);
  int ax = detail::norm_axis(axis, a.ndim(), op, a.shape());
  Split sp = split_at(a.shape(), ax);
  Shape os = a.shape();
  if (keepdim)
    os[static_cast<size_t>(ax)] = 1;
  else
    os.erase(os.begin() + ax);
  const double scale = is_mean ? (sp.along ? 1.0 / static_cast<double>(sp.along) : 0.0) : 1.0;
  Tensor out = Tensor::zeros(os, a.dtype());  // [O, I]
  dispatch(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = a.value().data<T>();
    T* q = out.data<T>();
    for (int64_t o = 0; o < sp.outer; ++o)
      for (int64_t j = 0; j < sp.along; ++j)
        for (int64_t i = 0; i < sp.inner; ++i)
          q[o * sp.inner + i] += p[(o * sp.along + j) * sp.inner + i];
    if (is_mean)
      for (int64_t i = 0, n = out.numel(); i < n; ++i) q[i] *= static_cast<T>(scale);
  });
  // da[o, j, i] += g[o, i]·scale
  return make_result(op, std::move(out), wants_grad({&a}),
                     [ai = a.shared(), sp, scale](VarImpl& o) {
                       dispatch(o.value.dtype(), [&](auto tag) {
                         using T = decltype(tag);
                         const T* g = o.grad.data<T>();
                         T* da = detail::GradWriter<T>::accumulate(*ai).d;
                         for (int64_t oo = 0; oo < sp.outer; ++oo)
                           for (int64_t j = 0; j < sp.along; ++j)
                             for (int64_t i = 0; i < sp.inner; ++i)
                               da[(oo * sp.along + j) * sp.inner + i] +=
                                   g[oo * sp.inner + i] * static_cast<T>(scale);
                       });
                     });
}

}  // namespace

Var sum(const Var& a) {
  return reduce_all("sum", a, 1.0);
}
Var mean(const Var& a) {
  detail::check_defined(a, "mean");
  if (a.numel() == 0) fail("mean", "mean of an empty tensor " + shape_str(a.shape()));
  return reduce_all("mean", a, 1.0 / static_cast<double>(a.numel()));
}
Var sum(const Var& a, int axis, bool keepdim) {
  return reduce_axis("sum", a, axis, keepdim, false);
}
Var mean(const Var& a, int axis, bool keepdim) {
  return reduce_axis("mean", a, axis, keepdim, true);
}

Var reshape(const Var& a, Shape shape) {
  profile::Scope prof_("reshape", profile::Phase::Forward);
  detail::check_defined(a, "reshape");
  int infer = -1;
  int64_t known = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (infer >= 0) fail("reshape", "more than one -1 in " + shape_str(shape));
      infer = static_cast<int>(i);
    } else if (shape[i] < 0) {
      fail("reshape", "negative dimension in " + shape_str(shape));
    } else {
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || a.numel() % known != 0)
      fail("reshape", "cannot view " + shape_str(a.shape()) + " as " + shape_str(shape));
    shape[static_cast<size_t>(infer)] = a.numel() / known;
  }
  if (shape_numel(shape) != a.numel())
    fail("reshape", "cannot view " + shape_str(a.shape()) + " as " + shape_str(shape));
  // da += g viewed in a's shape
  return make_result("reshape", a.value().reshape(shape), wants_grad({&a}),
                     [ai = a.shared()](VarImpl& o) {
                       // A copy, not a view: the input's gradient must not alias the output's.
                       const Tensor g = o.grad.reshape(ai->value.shape());
                       accumulate_grad(*ai, g, "reshape");
                     });
}

namespace {

// out = a with axes reordered: out.shape[i] = a.shape[perm[i]].
Tensor permute_tensor(const Tensor& a, const std::vector<int>& perm) {
  const size_t nd = perm.size();
  Shape os(nd);
  std::vector<int64_t> in_strides(nd), src_stride(nd);
  int64_t st = 1;
  for (size_t i = nd; i-- > 0;) {
    in_strides[i] = st;
    st *= a.shape()[i];
  }
  for (size_t i = 0; i < nd; ++i) {
    os[i] = a.shape()[static_cast<size_t>(perm[i])];
    src_stride[i] = in_strides[static_cast<size_t>(perm[i])];
  }
  Tensor out = Tensor::empty(os, a.dtype());
  dispatch(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = a.data<T>();
    T* q = out.data<T>();
    const int64_t total = out.numel();
    if (total == 0) return;
    if (nd == 0) {
      q[0] = p[0];
      return;
    }
    std::vector<int64_t> idx(nd, 0);
    int64_t src = 0;
    const int64_t inner = os[nd - 1], inner_stride = src_stride[nd - 1];
    for (int64_t o = 0; o < total; o += inner) {
      for (int64_t j = 0; j < inner; ++j) q[o + j] = p[src + j * inner_stride];
      for (size_t d = nd - 1; d-- > 0;) {
        ++idx[d];
        src += src_stride[d];
        if (idx[d] < os[d]) break;
        src -= src_stride[d] * os[d];
        idx[d] = 0;
      }
    }
  });
  return out;
}

}  // namespace

Var permute(const Var& a, const std::vector<int>& perm) {
  profile::Scope prof_("permute", profile::Phase::Forward);
  detail::check_defined(a, "permute");
  const int nd = a.ndim();
  std::string ps;
  for (int p : perm) ps += (ps.empty() ? "" : ",") + std::to_string(p);
  if (static_cast<int>(perm.size()) != nd)
    fail("permute", "permutation (" + ps + ") does not match shape " + shape_str(a.shape()));
  std::vector<int> inv(static_cast<size_t>(nd), -1);
  for (int i = 0; i < nd; ++i) {
    int p = perm[static_cast<size_t>(i)];
    if (p < 0 || p >= nd || inv[static_cast<size_t>(p)] != -1)
      fail("permute", "(" + ps + ") is not a permutation of the axes of " + shape_str(a.shape()));
    inv[static_cast<size_t>(p)] = i;
  }
  // da += g permuted back
  return make_result("permute", permute_tensor(a.value(), perm), wants_grad({&a}),
                     [ai = a.shared(), inv](VarImpl& o) {
                       accumulate_grad(*ai, permute_tensor(o.grad, inv), "permute");
                     });
}

Var transpose(const Var& a, int d0, int d1) {
  detail::check_defined(a, "transpose");
  int a0 = detail::norm_axis(d0, a.ndim(), "transpose", a.shape());
  int a1 = detail::norm_axis(d1, a.ndim(), "transpose", a.shape());
  std::vector<int> perm(static_cast<size_t>(a.ndim()));
  std::iota(perm.begin(), perm.end(), 0);
  std::swap(perm[static_cast<size_t>(a0)], perm[static_cast<size_t>(a1)]);
  return permute(a, perm);
}

Var concat(const std::vector<Var>& parts, int axis) {
  profile::Scope prof_("concat", profile::Phase::Forward);
  if (parts.empty()) fail("concat", "no inputs");
  for (const Var& p : parts) detail::check_same_dtype(parts[0], p, "concat");
  const Shape& s0 = parts[0].shape();
  int ax = detail::norm_axis(axis, static_cast<int>(s0.size()), "concat", s0);
  Shape os = s0;
  os[static_cast<size_t>(ax)] = 0;
  for (const Var& p : parts) {
    Shape s = p.shape();
    bool ok = s.size() == s0.size();
    for (size_t i = 0; ok && i < s.size(); ++i)
      if (static_cast<int>(i) != ax && s[i] != s0[i]) ok = false;
    if (!ok)
      fail("concat", "shapes " + shape_str(s0) + " and " + shape_str(s) + " differ off axis " +
                         std::to_string(axis));
    os[static_cast<size_t>(ax)] += s[static_cast<size_t>(ax)];
  }
  Split so = split_at(os, ax);
  Tensor out = Tensor::empty(os, parts[0].dtype());
  std::vector<int64_t> widths;  // each part's along·inner block
  dispatch(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* q = out.data<T>();
    int64_t offset = 0;
    for (const Var& p : parts) {
      int64_t w = p.shape()[static_cast<size_t>(ax)] * so.inner;
      widths.push_back(w);
      const T* src = p.value().data<T>();
      for (int64_t o = 0; o < so.outer; ++o)
        std::copy_n(src + o * w, w, q + o * so.along * so.inner + offset);
      offset += w;
    }
  });
  bool grad = false;
  for (const Var& p : parts) grad = detail::wants_grad({&p}) || grad;  // notes every leaf
  std::vector<std::shared_ptr<VarImpl>> impls;
  for (const Var& p : parts) impls.push_back(p.shared());
  // each part's gradient is its block of g
  return make_result("concat", std::move(out), grad, [impls, widths, so](VarImpl& o) {
    dispatch(o.value.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* g = o.grad.data<T>();
      int64_t offset = 0;
      for (size_t k = 0; k < impls.size(); ++k) {
        int64_t w = widths[k];
        if (impls[k]->requires_grad) {
          T* d = detail::GradWriter<T>::accumulate(*impls[k]).d;
          for (int64_t oo = 0; oo < so.outer; ++oo) {
            const T* src = g + oo * so.along * so.inner + offset;
            for (int64_t j = 0; j < w; ++j) d[oo * w + j] += src[j];
          }
        }
        offset += w;
      }
    });
  });
}

Var slice(const Var& a, int axis, int64_t start, int64_t end) {
  profile::Scope prof_("slice", profile::Phase::Forward);
  detail::check_defined(a, "slice");
  int ax = detail::norm_axis(axis, a.ndim(), "slice", a.shape());
  Split sp = split_at(a.shape(), ax);
  if (start < 0 || end < start || end > sp.along)
    fail("slice", "range [" + std::to_string(start) + ", " + std::to_string(end) +
                      ") out of bounds for axis " + std::to_string(axis) + " of " +
                      shape_str(a.shape()));
  Shape os = a.shape();
  os[static_cast<size_t>(ax)] = end - start;
  const int64_t w = (end - start) * sp.inner, src_off = start * sp.inner, row = sp.along * sp.inner;
  Tensor out = Tensor::empty(os, a.dtype());
  dispatch(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* p = a.value().data<T>();
    T* q = out.data<T>();
    for (int64_t o = 0; o < sp.outer; ++o) std::copy_n(p + o * row + src_off, w, q + o * w);
  });
  // da[.., start:end, ..] += g
  return make_result("slice", std::move(out), wants_grad({&a}),
                     [ai = a.shared(), sp, w, src_off, row](VarImpl& o) {
                       dispatch(o.value.dtype(), [&](auto tag) {
                         using T = decltype(tag);
                         const T* g = o.grad.data<T>();
                         T* d = detail::GradWriter<T>::accumulate(*ai).d;
                         for (int64_t oo = 0; oo < sp.outer; ++oo)
                           for (int64_t j = 0; j < w; ++j)
                             d[oo * row + src_off + j] += g[oo * w + j];
                       });
                     });
}

}  // namespace seqtape
