#include "autograd/tape.h"

#include <cstring>

#include "tensor/profile.h"

namespace seqtape {

Var::Var(Tensor value, bool requires_grad) : impl_(std::make_shared<VarImpl>()) {
  if (!value.defined()) fail("Var", "cannot wrap an undefined tensor");
  impl_->value = std::move(value);
  impl_->requires_grad = requires_grad;
}

void Var::zero_grad() {
  if (!impl_) return;
  if (impl_->grad_pinned)
    impl_->grad_stale = true;
  else
    impl_->grad = Tensor();
}

Tensor& grad_buffer(VarImpl& v) {
  if (!v.grad.defined()) {
    v.grad = Tensor::zeros(v.value.shape(), v.value.dtype());
  } else if (v.grad_stale) {
    v.grad.zero();
    v.grad_stale = false;
  }
  return v.grad;
}

bool grad_fresh(VarImpl& v) {
  if (v.grad_stale) {  // a pinned gradient: written from scratch in place
    v.grad_stale = false;
    return true;
  }
  if (v.grad.defined()) return false;
  v.grad = Tensor::empty(v.value.shape(), v.value.dtype());
  return true;
}

void accumulate_grad(VarImpl& v, Tensor&& g, const char* op) {
  if (!v.grad.defined() && g.shape() == v.value.shape() && g.dtype() == v.value.dtype()) {
    v.grad = std::move(g);
    return;
  }
  accumulate_grad(v, static_cast<const Tensor&>(g), op);
}

void accumulate_grad(VarImpl& v, const Tensor& g, const char* op) {
  if (g.shape() != v.value.shape())
    fail(op, "gradient of shape " + shape_str(g.shape()) + " added to a value of shape " +
                 shape_str(v.value.shape()));
  if (g.dtype() != v.value.dtype())
    fail(op, std::string("gradient of dtype ") + dtype_name(g.dtype()) + " added to a " +
                 dtype_name(v.value.dtype()) + " value");
  if (!v.grad.defined()) {
    v.grad = g.clone();
    return;
  }
  if (v.grad_stale) {
    std::memcpy(v.grad.raw(), g.raw(), g.nbytes());
    v.grad_stale = false;
    return;
  }
  dispatch(g.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* d = v.grad.data<T>();
    const T* s = g.data<T>();
    for (int64_t i = 0, n = g.numel(); i < n; ++i) d[i] += s[i];
  });
}

Tape& Tape::current() {
  thread_local Tape tape;
  return tape;
}

void Tape::record(const std::shared_ptr<VarImpl>& out, Backward fn, const char* op) {
  out->leaf = false;
  out->tape_generation = generation_;
  nodes_.push_back(Node{out, std::move(fn), op});
}

void Tape::backward(const Var& root) {
  if (!root.defined()) fail("backward", "called on an undefined value");
  if (root.numel() != 1)
    fail("backward", "root of shape " + shape_str(root.shape()) +
                         " is not a scalar: pass an upstream gradient of that shape");
  backward(root, Tensor::full(root.shape(), 1.0, root.dtype()));
}

void Tape::backward(const Var& root, const Tensor& upstream) {
  if (!root.defined()) fail("backward", "called on an undefined value");
  VarImpl* r = root.impl();
  if (!r->requires_grad)
    fail("backward",
         "the root does not require grad (no parameter reached it, or it was computed "
         "under NoGradGuard)");
  if (!r->leaf && r->tape_generation != generation_)
    fail("backward", "the tape was cleared after this value was computed; run the forward again");
  if (upstream.shape() != root.shape())
    fail("backward", "upstream gradient of shape " + shape_str(upstream.shape()) +
                         " for a root of shape " + shape_str(root.shape()));
  // Intermediate gradients belong to this backward alone; leaves accumulate across calls.
  for (auto& n : nodes_) n.out->grad = Tensor();
  accumulate_grad(*r, upstream, "backward");
  for (size_t i = nodes_.size(); i-- > 0;) {
    Node& n = nodes_[i];
    if (n.out->grad.defined()) {  // else not on a path to the root: no work
      profile::Scope prof(n.op, profile::Phase::Backward);
      n.fn();
    }
    if (after_node_) after_node_(i);
  }
}

void Tape::clear() {
  profile::Scope prof("tape.clear");  // mostly the release of last step's tensors
  nodes_.clear();
  ++generation_;
}

}  // namespace seqtape
