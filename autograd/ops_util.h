#pragma once
// Internal helpers shared by the ops_*.cpp files: making a result, recording its backward,
// dtype checks, NumPy broadcasting.

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "autograd/ops.h"
#include "tensor/philox.h"

namespace seqtape::detail {

// Does an op over these inputs need a tape node? Every op passes all its differentiable
// inputs here, just before it records, so that the tape learns which node first reads each
// leaf (Tape::note_leaf_use).
inline bool wants_grad(std::initializer_list<const Var*> inputs) {
  Tape& tape = Tape::current();
  if (!tape.recording()) return false;
  bool any = false;
  for (const Var* v : inputs)
    if (v->requires_grad()) {
      any = true;
      if (v->is_leaf()) tape.note_leaf_use(*v->impl());
    }
  return any;
}

void check_finite_result(const Tensor& t, const char* op);

// A dropout probability must lie in [0, 1) (1 would scale the kept elements by 1/0).
void check_dropout_p(double p, const char* op);
// parallel_range's cost of one element of a pass that reads a dropout mask's keep bits (a keep
// factor expanded, and a product).
inline constexpr double kCostDropout = 2.0 * 0.25;
// ... and of one element's Philox half-word and keep bit, made once per mask (fused_dropout).
inline constexpr double kCostPhilox = 4.0 * 0.25;
// Inverted dropout fused into an op: the mask, keyed by one draw from the run's generator (as
// dropout's own), its keep bits made once for the op's numel elements (the forward reads them,
// and the backward, which keeps them in its closure: they go with the tape), and the kept
// elements' scale 1/(1-p); off (and nothing drawn) when p is 0.
struct FusedDropout {
  philox::DropoutMask mask;
  Tensor bits;  // DropoutMask::bit_words(numel) words of 64 keep bits
  double keep_scale = 1.0;
  bool on = false;
  philox::KeepBits keep() const { return {static_cast<const uint64_t*>(bits.raw())}; }
};
// Checks p for op; a p > 0 without a generator is an error naming op.
FusedDropout fused_dropout(double p, Rng* rng, const char* op, int64_t numel);

// Wraps an op's output; if `grad` is set, records `backward` on the current tape. The
// closure receives the output's VarImpl (whose grad is the upstream gradient). An op whose
// result may hold an intended non-finite value (masked_fill with -inf) checks its result itself
// and passes anomaly_check = false.
template <typename Fn>
Var make_result(const char* op, Tensor value, bool grad, Fn&& backward, bool anomaly_check = true) {
  if (anomaly_check && Tape::current().anomaly()) check_finite_result(value, op);
  Var out(std::move(value), grad);
  if (grad) {
    VarImpl* o = out.impl();
    Tape::current().record(
        out.shared(), [o, fn = std::forward<Fn>(backward)]() { fn(*o); }, op);
  }
  return out;
}

// The one way a backward writes an input's gradient. `of` is for closures that write EVERY
// element once: a gradient allocated just now stays uninitialized and is written (write stores,
// BLAS beta 0); one that already holds a gradient is added to (write adds, beta 1). `accumulate`
// always adds (into zeros if new), for closures that write some elements, or some twice. d is
// null when the input needs no gradient. write(i0, i1, v) takes elements [i0, i1) from v(i),
// choosing store or add once per range, outside the loop, so that the loop body has no branch.
// No __restrict: a gradient may share storage with the output's gradient.
template <typename T>
struct GradWriter {
  T* d = nullptr;
  bool fresh = false;
  static GradWriter of(VarImpl& x) {
    if (!x.requires_grad) return {};
    const bool f = grad_fresh(x);
    return {x.grad.data<T>(), f};
  }
  static GradWriter accumulate(VarImpl& x) {
    if (!x.requires_grad) return {};
    return {grad_buffer(x).data<T>(), false};
  }
  T beta() const { return fresh ? T(0) : T(1); }
  template <typename V>
  void write(int64_t i0, int64_t i1, V&& v) const {
    if (fresh)
      for (int64_t i = i0; i < i1; ++i) d[i] = v(i);
    else
      for (int64_t i = i0; i < i1; ++i) d[i] += v(i);
  }
};

inline void check_defined(const Var& a, const char* op) {
  if (!a.defined()) fail(op, "input is undefined");
}

inline void check_same_dtype(const Var& a, const Var& b, const char* op) {
  check_defined(a, op);
  check_defined(b, op);
  if (a.dtype() != b.dtype())
    fail(op, std::string("dtype mismatch: ") + dtype_name(a.dtype()) + shape_str(a.shape()) +
                 " vs " + dtype_name(b.dtype()) + shape_str(b.shape()));
}

inline int norm_axis(int axis, int ndim, const char* op, const Shape& s) {
  int a = axis < 0 ? axis + ndim : axis;
  if (a < 0 || a >= ndim)
    fail(op, "axis " + std::to_string(axis) + " out of range for shape " + shape_str(s));
  return a;
}

// NumPy broadcasting of two shapes: the output shape and, for each input, its element
// strides over the output's dimensions (0 along broadcast dimensions).
struct Broadcast {
  Shape out;
  Shape sa, sb;       // element strides, kept in a Shape for its in-place storage
  bool same = false;  // a.shape == b.shape: plain elementwise loop
  // a.shape == out and b.shape is a suffix of it (a bias over rows): rows × inner loops.
  int64_t suffix_inner = 0;
};
Broadcast broadcast_shapes(const Shape& a, const Shape& b, const char* op);

// Calls f(io, ia, ib) for every output element in row-major order.
template <typename F>
void broadcast_loop(const Broadcast& bc, F&& f) {
  const int nd = static_cast<int>(bc.out.size());
  const int64_t total = shape_numel(bc.out);
  if (total == 0) return;
  if (nd == 0) {
    f(int64_t{0}, int64_t{0}, int64_t{0});
    return;
  }
  const int64_t inner = bc.out[nd - 1];
  const int64_t sa_in = bc.sa[nd - 1], sb_in = bc.sb[nd - 1];
  std::vector<int64_t> idx(static_cast<size_t>(nd), 0);
  int64_t ia = 0, ib = 0;
  for (int64_t io = 0; io < total; io += inner) {
    for (int64_t j = 0; j < inner; ++j) f(io + j, ia + j * sa_in, ib + j * sb_in);
    for (int d = nd - 2; d >= 0; --d) {  // advance the outer multi-index
      size_t du = static_cast<size_t>(d);
      ++idx[du];
      ia += bc.sa[du];
      ib += bc.sb[du];
      if (idx[du] < bc.out[du]) break;
      ia -= bc.sa[du] * bc.out[du];
      ib -= bc.sb[du] * bc.out[du];
      idx[du] = 0;
    }
  }
}

}  // namespace seqtape::detail
