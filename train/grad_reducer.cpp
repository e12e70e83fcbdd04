#include "train/grad_reducer.h"

#include <xxhash.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>

#include "tensor/profile.h"

namespace seqtape {

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

GradReducer::GradReducer(const NamedParams& params, Communicator& comm, int64_t bucket_bytes,
                         bool overlap)
    : params_(params), comm_(comm), overlap_(overlap) {
  if (params_.empty()) fail("GradReducer", "no parameters");
  const DType dt = params_.front().second.dtype();
  const auto elem = static_cast<int64_t>(dtype_size(dt));
  Bucket cur;
  int64_t cur_numel = 0;
  auto close = [&] {
    if (cur.params.empty()) return;
    cur.flat = Tensor::empty({cur_numel + static_cast<int64_t>(cur.params.size())}, dt);
    stats_.bytes += static_cast<int64_t>(cur.flat.nbytes());
    buckets_.push_back(std::move(cur));
    cur = Bucket{};
    cur_numel = 0;
  };
  for (size_t j = params_.size(); j-- > 0;) {
    const Var& p = params_[j].second;
    if (p.dtype() != dt) fail("GradReducer", "parameters of mixed dtypes");
    if (cur_numel > 0 && (cur_numel + p.numel()) * elem > bucket_bytes) close();
    cur.params.push_back(j);
    cur_numel += p.numel();
  }
  close();
  stats_.buckets = static_cast<int64_t>(buckets_.size());
  for (size_t j = 0; j < params_.size(); ++j) param_index_[params_[j].second.impl()] = j;
  use_generation_.assign(params_.size(), 0);
  first_use_.assign(params_.size(), 0);
  Tape::current().set_on_leaf_use([this](const VarImpl& v, size_t node) { on_leaf_use(v, node); });
}

GradReducer::~GradReducer() {
  Tape::current().set_after_node(nullptr);
  Tape::current().set_on_leaf_use(nullptr);
}

void GradReducer::on_leaf_use(const VarImpl& v, size_t node) {
  const auto it = param_index_.find(&v);
  if (it == param_index_.end()) return;
  const uint64_t generation = Tape::current().generation();
  if (use_generation_[it->second] == generation) return;
  use_generation_[it->second] = generation;
  first_use_[it->second] = node;
}

void GradReducer::before_last_backward() {
  const Tape& tape = Tape::current();
  for (Bucket& b : buckets_) {
    // An unused parameter's gradient is final already: it does not hold the bucket back.
    b.ready_at = std::numeric_limits<size_t>::max();
    for (size_t j : b.params)
      if (use_generation_[j] == tape.generation()) b.ready_at = std::min(b.ready_at, first_use_[j]);
  }
  next_ = 0;
  last_progress_ = now_seconds();
  if (overlap_) Tape::current().set_after_node([this](size_t i) { on_node(i); });
}

void GradReducer::on_node(size_t i) {
  while (next_ < buckets_.size() && buckets_[next_].ready_at >= i) {
    launch(buckets_[next_++]);
    ++stats_.overlapped;
  }
  // Let started buckets advance every 50 µs or so of backward.
  const double t = now_seconds();
  if (t - last_progress_ > 50e-6) {
    comm_.progress();
    last_progress_ = t;
  }
}

// Copies the bucket's gradients (zeros for a parameter without one) and used counts into `into`.
void GradReducer::pack(const Bucket& b, Tensor& into) const {
  dispatch(into.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* flat = into.template data<T>();
    T* used = flat + (into.numel() - static_cast<int64_t>(b.params.size()));
    for (size_t k = 0; k < b.params.size(); ++k) {
      const Var& p = params_[b.params[k]].second;
      if (p.has_grad()) {
        std::memcpy(flat, p.grad().raw(), p.grad().nbytes());
        used[k] = T(1);
      } else {
        std::fill_n(flat, p.numel(), T(0));
        used[k] = T(0);
      }
      flat += p.numel();
    }
  });
}

void GradReducer::launch(Bucket& b) {
  profile::Scope prof("allreduce (start)");
  const double t0 = now_seconds();
  pack(b, b.flat);
  if (verify_) b.checksum = XXH3_64bits(b.flat.raw(), b.flat.nbytes());
  comm_.start_sum(b.flat.raw(), b.flat.numel(), b.flat.dtype());
  stats_.launch_seconds += now_seconds() - t0;
}

void GradReducer::finish() {
  Tape::current().set_after_node(nullptr);
  for (size_t k = 0; verify_ && k < next_; ++k) {  // started buckets' gradients must not change
    const Bucket& b = buckets_[k];
    Tensor now = Tensor::empty(b.flat.shape(), b.flat.dtype());
    pack(b, now);
    if (XXH3_64bits(now.raw(), now.nbytes()) != b.checksum)
      fail("GradReducer", "bucket " + std::to_string(k) + " (first parameter '" +
                              params_[b.params.front()].first +
                              "') was started before backward had finished its gradients");
  }
  while (next_ < buckets_.size()) launch(buckets_[next_++]);
  {
    profile::Scope prof("allreduce (wait)");
    const double t0 = now_seconds();
    comm_.wait_all("the gradient allreduce");
    stats_.wait_seconds += now_seconds() - t0;
  }
  for (Bucket& b : buckets_) {
    dispatch(b.flat.dtype(), [&](auto tag) {
      using T = decltype(tag);
      const T* flat = b.flat.template data<T>();
      const T* used = flat + (b.flat.numel() - static_cast<int64_t>(b.params.size()));
      for (size_t k = 0; k < b.params.size(); ++k) {
        Var& p = params_[b.params[k]].second;
        if (used[k] > T(0)) {
          VarImpl& v = *p.impl();
          if (!v.grad.defined()) v.grad = Tensor::empty(v.value.shape(), v.value.dtype());
          std::memcpy(v.grad.raw(), flat, v.grad.nbytes());
          v.grad_stale = false;  // a pinned gradient (FlatParams) now holds this step's sum
        } else {
          p.zero_grad();
        }
        flat += p.numel();
      }
    });
  }
  next_ = 0;
  ++stats_.steps;
}

}  // namespace seqtape
