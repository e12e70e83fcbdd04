#pragma once
// GradReducer: sums the parameters' gradients over the ranks of a data-parallel run
// (train/dist.h), in flat buckets, starting each bucket's allreduce during backward as soon as
// backward has finished writing every gradient in it (the PyTorch DDP / Horovod scheme), so
// that communication overlaps the rest of backward.
//
// Buckets take the parameters in reverse order (the last layers' gradients are written first)
// up to bucket_bytes each. A bucket is ready once backward has run the first node that read
// each of its parameters (noted from the tape's leaf-use hook in this reducer's side table):
// later readers come before it in backward.
// Buckets start strictly in order, the same on every rank, so every rank starts the same
// collectives in the same order whatever its timing.
//
// Each bucket also carries one "used" count per parameter, so that a parameter no rank
// computed a gradient for stays without one (the optimizer leaves it alone, as with one rank).

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "train/dist.h"
#include "train/optim.h"

namespace seqtape {

struct ReducerStats {
  int64_t buckets = 0;
  int64_t bytes = 0;          // per step, gradients and counts
  double wait_seconds = 0;    // in finish(), summed over steps: communication not hidden
  double launch_seconds = 0;  // packing and starting buckets, summed over steps
  int64_t steps = 0;
  int64_t overlapped = 0;  // buckets started during backward, summed over steps
};

class GradReducer {
 public:
  GradReducer(const NamedParams& params, Communicator& comm, int64_t bucket_bytes, bool overlap);
  ~GradReducer();
  GradReducer(const GradReducer&) = delete;
  GradReducer& operator=(const GradReducer&) = delete;

  // Before the step's last backward: buckets start from the tape's hook as they become
  // ready (with overlap), otherwise all at once in finish().
  void before_last_backward();
  // After the step's last backward (or when this rank had no rows): starts what has not
  // started, waits, and writes the sums back into the gradients.
  void finish();

  // Test hook: checksums each bucket's gradients when it starts and checks in finish() that
  // none of them changed afterwards (a bucket started before its gradients were final).
  void set_verify(bool v) { verify_ = v; }
  const ReducerStats& stats() const { return stats_; }

 private:
  struct Bucket {
    std::vector<size_t> params;  // indices into params_
    Tensor flat;                 // gradients, then one used count per parameter
    size_t ready_at = 0;         // start once backward has run node ready_at
    uint64_t checksum = 0;       // verify_
  };
  void pack(const Bucket& b, Tensor& into) const;
  void launch(Bucket& b);
  void on_node(size_t i);
  void on_leaf_use(const VarImpl& v, size_t node);

  NamedParams params_;
  Communicator& comm_;
  bool overlap_;
  bool verify_ = false;
  std::vector<Bucket> buckets_;
  size_t next_ = 0;  // the next bucket to start this step
  ReducerStats stats_;
  double last_progress_ = 0;
  // The side table of the tape's leaf-use hook: per parameter, the tape generation in which an
  // op first read it and that op's node index.
  std::unordered_map<const VarImpl*, size_t> param_index_;
  std::vector<uint64_t> use_generation_;
  std::vector<size_t> first_use_;
};

}  // namespace seqtape
