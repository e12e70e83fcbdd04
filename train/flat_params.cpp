#include "train/flat_params.h"

#include <cstring>

namespace seqtape {

FlatParams::FlatParams(const NamedParams& params) {
  if (params.empty()) fail("FlatParams", "no parameters");
  const DType dt = params.front().second.dtype();
  int64_t total = 0;
  for (const auto& [name, p] : params) {
    if (p.dtype() != dt) fail("FlatParams", "parameter '" + name + "' has another dtype");
    total += p.numel();
  }
  values_ = Tensor::empty({total}, dt);
  grads_ = Tensor::empty({total}, dt);
  int64_t off = 0;
  for (const auto& np : params) {
    Var p = np.second;
    Tensor v = Tensor::view_of(values_, off, p.shape());
    std::memcpy(v.raw(), p.value().raw(), p.value().nbytes());
    VarImpl& impl = *p.impl();
    const bool had = p.has_grad();
    Tensor g = Tensor::view_of(grads_, off, p.shape());
    if (had) std::memcpy(g.raw(), impl.grad.raw(), impl.grad.nbytes());
    impl.value = std::move(v);
    impl.grad = std::move(g);
    impl.grad_pinned = true;
    impl.grad_stale = !had;
    off += p.numel();
  }
}

const void* flat_span(const NamedParams& params, bool grads, int64_t* numel) {
  if (params.empty()) return nullptr;
  auto tensor_of = [grads](const Var& p) -> const Tensor& { return grads ? p.grad() : p.value(); };
  const Var& first = params.front().second;
  if (grads && !first.has_grad()) return nullptr;
  const char* base = static_cast<const char*>(tensor_of(first).raw());
  const size_t elem = dtype_size(first.dtype());
  int64_t n = 0;
  for (const auto& np : params) {
    const Var& p = np.second;
    if (grads && !p.has_grad()) return nullptr;
    const Tensor& t = tensor_of(p);
    if (!t.same_storage(tensor_of(first)) || static_cast<const char*>(t.raw()) != base + n * elem)
      return nullptr;
    n += t.numel();
  }
  *numel = n;
  return base;
}

}  // namespace seqtape
