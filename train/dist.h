#pragma once
// Data-parallel training: the processes of one training run and the collectives the
// trainer needs between them. `mpirun -np N seqtape train …` gives N ranks over Open MPI
// (dist_mpi.cpp, built when CMake finds MPI); without mpirun a run is one rank and nothing
// here talks to anything. `seqtape train --ranks N` gives N ranks that are threads of this
// process, summing in shared memory (dist_threads.cpp).
//
// Every wait is bounded: a collective that has not completed within the timeout (a rank hung
// or gone) aborts the whole job with a message naming this rank, the collective and the step.
// Only the calling thread uses MPI (MPI_THREAD_FUNNELED); BLAS threads never do.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace seqtape {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "Open MPI 4.1.4", or "one process".
  virtual std::string describe() const = 0;
  // True when the ranks are threads of one process (thread_ranks): what belongs to the process
  // (signal handlers, the BLAS thread count, the matmul route) is then set once, around them.
  virtual bool shares_process() const { return false; }
  // "rank R of N", how every message of a rank names it.
  std::string who() const {
    return "rank " + std::to_string(rank()) + " of " + std::to_string(size());
  }

  // Starts an in-place sum over the ranks of data[0, n) (float32 or float64); the data must
  // not be touched until wait_all(). Requests complete in the order they were started on
  // every rank.
  virtual void start_sum(void* data, int64_t n, DType dtype) = 0;
  // Lets started requests advance (MPI progresses nonblocking collectives only inside MPI
  // calls); cheap, called often during backward.
  virtual void progress() = 0;
  // Waits for every started request. `what` names the collective in a timeout message.
  virtual void wait_all(const std::string& what) = 0;

  // Blocking sum of a few doubles, in place.
  void sum(double* data, int n, const std::string& what) {
    start_sum(data, n, DType::F64);
    wait_all(what);
  }
  // Every rank's value, in rank order.
  virtual std::vector<uint64_t> allgather(uint64_t value, const std::string& what) = 0;
  // Rank root's bytes to every rank. bounded = false waits without a timeout (rank 0 may be
  // evaluating for a long time).
  virtual void broadcast(std::string& bytes, int root, const std::string& what,
                         bool bounded = true) = 0;
  // Waits, without a timeout and without spinning, until every rank has arrived.
  virtual void barrier() = 0;

  // Ends every rank of the job with this exit code (after this rank has said why).
  [[noreturn]] virtual void abort(int code) = 0;

  // Seconds a collective may take before the job is aborted (0: no limit).
  void set_timeout(double seconds) { timeout_ = seconds; }
  double timeout() const { return timeout_; }
  // The step being trained, for messages.
  void set_step(int64_t step) { step_ = step; }
  int64_t step() const { return step_; }

 protected:
  double timeout_ = 300;
  int64_t step_ = 0;
};

// The communicator of a process that is the whole run.
std::shared_ptr<Communicator> single_process();

// n ranks that are threads of this process, one Communicator per rank (each used by its own
// thread): blocking collectives over shared memory, the sums in rank order so that two ranks
// give MPI's bits. A collective waits at most the timeout (then every rank stops with an Error
// naming the one that gave up), except the unbounded ones.
std::vector<std::shared_ptr<Communicator>> thread_ranks(int n);
// Wakes every rank of thread_ranks waiting in a collective with an Error saying `why` (a rank's
// thread failed and will make no more collectives). Does nothing for other communicators.
void fail_thread_ranks(Communicator& any_rank, const std::string& why);

// True when this binary was built with MPI support.
bool mpi_built();
// True when this process was started by mpirun (Open MPI's environment is present).
bool started_by_mpirun();
// Under mpirun with MPI built: initializes MPI (once) and returns the world. Under mpirun
// without MPI built: an Error saying so. Otherwise single_process().
std::shared_ptr<Communicator> world_communicator();

// Ranks of this job on this machine (Open MPI's OMPI_COMM_WORLD_LOCAL_SIZE; 1 without mpirun).
int local_ranks();

// Rows [begin, end) of `rows` for this rank: rank r of n gets rows r·B/n .. (r+1)·B/n, so the
// shards differ by at most one row.
inline std::pair<int64_t, int64_t> shard_rows(int64_t rows, int rank, int n) {
  return {rows * rank / n, rows * (rank + 1) / n};
}

}  // namespace seqtape
