#pragma once
// The tape (a Wengert list): differentiable ops append one node per result, in execution
// order; backward walks the list in reverse and calls each node's closure. No hashing, no
// recursion. The tape is cleared (capacity kept) and reused every step.
//
// Var is a value on the tape: a Tensor, its gradient (allocated on first use, accumulated
// with +=), and whether it wants one. Leaves are made by the user (parameters, inputs);
// every other Var is the result of an op.

#ifdef SEQTAPE_NO_TAPE
#error "infer/ and serve/ decode without the tape: use tensor/tensor.h, tensor/kernels.h"
#endif

#include <cstddef>
#include <cstring>
#include <functional>
#include <memory>
#include <new>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tensor/tensor.h"

namespace seqtape {

// A node's backward: a move-only void() callable kept inside the node when it fits (kInline
// bytes: every op closure of the project does), on the heap otherwise. std::function would put
// every closure bigger than two pointers on the heap, one allocation per op per step.
class BackwardFn {
 public:
  static constexpr size_t kInline = 512;

  BackwardFn() = default;
  template <typename F, typename D = std::decay_t<F>,
            typename = std::enable_if_t<!std::is_same_v<D, BackwardFn>>>
  BackwardFn(F&& f) {  // NOLINT: converts from any closure, as std::function does
    if constexpr (sizeof(D) <= kInline && alignof(D) <= alignof(std::max_align_t) &&
                  std::is_nothrow_move_constructible_v<D>) {
      ::new (static_cast<void*>(buf_)) D(std::forward<F>(f));
      ops_ = &kInlineOps<D>;
    } else {
      D* heap = new D(std::forward<F>(f));
      std::memcpy(buf_, &heap, sizeof heap);
      ops_ = &kHeapOps<D>;
    }
  }
  BackwardFn(BackwardFn&& o) noexcept { take(o); }
  BackwardFn& operator=(BackwardFn&& o) noexcept {
    if (this != &o) {
      reset();
      take(o);
    }
    return *this;
  }
  BackwardFn(const BackwardFn&) = delete;
  BackwardFn& operator=(const BackwardFn&) = delete;
  ~BackwardFn() { reset(); }

  void operator()() { ops_->call(buf_); }
  explicit operator bool() const { return ops_ != nullptr; }

 private:
  struct Ops {
    void (*call)(void*);
    void (*move)(void* to, void* from);  // move-constructs at `to`, destroys `from`
    void (*destroy)(void*);
  };
  template <typename D>
  static D* held(void* p) {
    D* d;
    std::memcpy(&d, p, sizeof d);
    return d;
  }
  template <typename D>
  static constexpr Ops kInlineOps = {[](void* p) { (*static_cast<D*>(p))(); },
                                     [](void* to, void* from) {
                                       ::new (to) D(std::move(*static_cast<D*>(from)));
                                       static_cast<D*>(from)->~D();
                                     },
                                     [](void* p) { static_cast<D*>(p)->~D(); }};
  template <typename D>
  static constexpr Ops kHeapOps = {[](void* p) { (*held<D>(p))(); },
                                   [](void* to, void* from) { std::memcpy(to, from, sizeof(D*)); },
                                   [](void* p) { delete held<D>(p); }};

  void take(BackwardFn& o) noexcept {
    if (!o.ops_) return;
    o.ops_->move(buf_, o.buf_);
    ops_ = o.ops_;
    o.ops_ = nullptr;
  }
  void reset() noexcept {
    if (!ops_) return;
    ops_->destroy(buf_);
    ops_ = nullptr;
  }

  alignas(std::max_align_t) unsigned char buf_[kInline];
  const Ops* ops_ = nullptr;
};

struct VarImpl {
  Tensor value;
  Tensor grad;  // undefined until something is accumulated into it
  bool requires_grad = false;
  bool leaf = true;
  uint64_t tape_generation = 0;  // for results: the generation of the tape that recorded them
  // A pinned gradient is a view into a flat gradient buffer (train/flat_params.h) that is kept
  // across steps: zero_grad() marks it stale instead of dropping it, and the next write treats
  // it as new (written, not added to), so a stale one is never read as a gradient.
  bool grad_pinned = false;
  bool grad_stale = false;
};

class Var {
 public:
  Var() = default;
  explicit Var(Tensor value, bool requires_grad = false);

  bool defined() const { return impl_ != nullptr; }
  const Tensor& value() const { return impl_->value; }
  Tensor& mutable_value() { return impl_->value; }  // optimizers update parameters in place
  const Tensor& grad() const { return impl_->grad; }
  bool has_grad() const { return impl_->grad.defined() && !impl_->grad_stale; }
  bool requires_grad() const { return impl_->requires_grad; }
  void set_requires_grad(bool r) { impl_->requires_grad = r; }
  bool is_leaf() const { return impl_->leaf; }
  // Drops the gradient (has_grad() becomes false); the next backward writes a fresh one, so
  // nothing is zero-filled. Optimizers skip parameters without a gradient.
  void zero_grad();

  const Shape& shape() const { return impl_->value.shape(); }
  int64_t dim(int i) const { return impl_->value.dim(i); }
  int ndim() const { return impl_->value.ndim(); }
  int64_t numel() const { return impl_->value.numel(); }
  DType dtype() const { return impl_->value.dtype(); }
  double item() const { return impl_->value.item(); }

  VarImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<VarImpl>& shared() const { return impl_; }

 private:
  std::shared_ptr<VarImpl> impl_;
};

// Adds g into v's gradient (allocating zeros first); refuses a gradient of the wrong shape.
void accumulate_grad(VarImpl& v, const Tensor& g, const char* op);
// The same, taking g's storage when v has no gradient yet (g must not be used afterwards).
void accumulate_grad(VarImpl& v, Tensor&& g, const char* op);
// v's gradient buffer, allocated as zeros if needed — for backward closures that write with
// BLAS beta = 1 or loop with +=.
Tensor& grad_buffer(VarImpl& v);
// For backward closures that write EVERY element of v's gradient: makes sure it exists and
// returns true when it was just allocated (uninitialized: write with = or BLAS beta = 0),
// false when it already holds a gradient to add to (+= or beta = 1). Saves zero-filling.
bool grad_fresh(VarImpl& v);

class Tape {
 public:
  using Backward = BackwardFn;

  // The tape ops record into on this thread.
  static Tape& current();

  // Records a node. Ops call this through make_result() in ops_util.h; `op` (a string
  // literal) names the node's backward in the profiler.
  void record(const std::shared_ptr<VarImpl>& out, Backward fn, const char* op = "op");

  // Reverse-mode from a one-element root (seed 1) or from any root with an upstream
  // gradient of the root's shape. Intermediate gradients are reset first, so calling
  // backward twice on the same tape gives the same leaf increments.
  void backward(const Var& root);
  void backward(const Var& root, const Tensor& upstream);

  // Called by backward after each node index i, from the last node down to 0, whether or not
  // the node had work. Empty: no call.
  void set_after_node(std::function<void(size_t i)> hook) { after_node_ = std::move(hook); }
  // Called when a recording op reads a leaf that requires grad, with the index its node gets.
  // Backward has written a leaf's whole gradient once it has run the first such node (every
  // other reader comes later on the tape): the data-parallel reducer keeps that index per
  // parameter to start an allreduce while backward goes on (train/grad_reducer.h). Empty: no call.
  void set_on_leaf_use(std::function<void(const VarImpl& v, size_t node)> hook) {
    on_leaf_use_ = std::move(hook);
  }
  // Notes that a recording op reads leaf v (the node it records gets index size()).
  void note_leaf_use(const VarImpl& v) {
    if (on_leaf_use_) on_leaf_use_(v, nodes_.size());
  }

  // Drops every node (and the intermediate values they hold); keeps the vector's capacity.
  void clear();
  size_t size() const { return nodes_.size(); }
  size_t capacity() const { return nodes_.capacity(); }
  uint64_t generation() const { return generation_; }

  bool recording() const { return recording_; }
  void set_recording(bool r) { recording_ = r; }

  // Anomaly mode: every op checks its result for NaN/Inf and throws naming itself.
  bool anomaly() const { return anomaly_; }
  void set_anomaly(bool a) { anomaly_ = a; }

 private:
  struct Node {
    std::shared_ptr<VarImpl> out;
    Backward fn;
    const char* op;
  };
  std::vector<Node> nodes_;
  std::function<void(size_t)> after_node_;
  std::function<void(const VarImpl&, size_t)> on_leaf_use_;
  uint64_t generation_ = 1;
  bool recording_ = true;
  bool anomaly_ = false;
};

// Within this scope ops record nothing and results do not require grad.
class NoGradGuard {
 public:
  NoGradGuard() : prev_(Tape::current().recording()) { Tape::current().set_recording(false); }
  ~NoGradGuard() { Tape::current().set_recording(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace seqtape
