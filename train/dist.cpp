#include "train/dist.h"

#include <cstdlib>
#include <string>

namespace seqtape {

#ifdef SEQTAPE_WITH_MPI
std::shared_ptr<Communicator> mpi_world();  // dist_mpi.cpp
#endif

namespace {

// One process: a sum over one rank is the data itself.
class SingleProcess final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string describe() const override { return "one process"; }
  void start_sum(void*, int64_t, DType) override {}
  void progress() override {}
  void wait_all(const std::string&) override {}
  std::vector<uint64_t> allgather(uint64_t value, const std::string&) override { return {value}; }
  void broadcast(std::string&, int, const std::string&, bool) override {}
  void barrier() override {}
  [[noreturn]] void abort(int code) override { std::exit(code); }
};

}  // namespace

std::shared_ptr<Communicator> single_process() {
  return std::make_shared<SingleProcess>();
}

bool mpi_built() {
#ifdef SEQTAPE_WITH_MPI
  return true;
#else
  return false;
#endif
}

bool started_by_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr;
}

int local_ranks() {
  const char* v = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const int n = v ? std::atoi(v) : 1;
  return n > 0 ? n : 1;
}

std::shared_ptr<Communicator> world_communicator() {
  if (!started_by_mpirun()) return single_process();
#ifdef SEQTAPE_WITH_MPI
  return mpi_world();
#else
  fail("train",
       "started by mpirun, but this seqtape was built without MPI (CMake did not find Open MPI: "
       "install libopenmpi-dev and openmpi-bin, e.g. with scripts/setup.sh, and rebuild)");
#endif
}

}  // namespace seqtape
