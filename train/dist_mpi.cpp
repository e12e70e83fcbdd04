// The Open MPI communicator (built when CMake finds MPI; see train/dist.h).
#include <mpi.h>

#include <chrono>
#include <cstdio>
#include <thread>

#include "train/dist.h"

namespace seqtape {

namespace {

using Clock = std::chrono::steady_clock;

MPI_Datatype mpi_type(DType d) {
  return d == DType::F32 ? MPI_FLOAT : MPI_DOUBLE;
}

class MpiWorld final : public Communicator {
 public:
  MpiWorld() {
    int provided = 0;
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
    // Errors come back as codes (and become an Error here) instead of ending the process in
    // MPI's own handler without saying which collective of which step failed.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(version, &len);
    std::string v(version, static_cast<size_t>(len));
    // "Open MPI v4.1.4, package: …": the name and version only.
    library_ = v.substr(0, v.find(','));
  }
  ~MpiWorld() override {
    if (!pending_.empty())
      MPI_Waitall(static_cast<int>(pending_.size()), pending_.data(), MPI_STATUSES_IGNORE);
    MPI_Finalize();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string describe() const override { return library_; }

  void start_sum(void* data, int64_t n, DType dtype) override {
    if (n > INT32_MAX) fail("allreduce", "a bucket of more than 2^31 elements");
    MPI_Request r;
    check(MPI_Iallreduce(MPI_IN_PLACE, data, static_cast<int>(n), mpi_type(dtype), MPI_SUM,
                         MPI_COMM_WORLD, &r),
          "MPI_Iallreduce");
    pending_.push_back(r);
  }

  void progress() override {
    if (pending_.empty()) return;
    int done = 0;
    check(
        MPI_Testall(static_cast<int>(pending_.size()), pending_.data(), &done, MPI_STATUSES_IGNORE),
        "MPI_Testall");
    if (done) pending_.clear();
  }

  void wait_all(const std::string& what) override { wait(what, true); }

  std::vector<uint64_t> allgather(uint64_t value, const std::string& what) override {
    std::vector<uint64_t> all(static_cast<size_t>(size_));
    MPI_Request r;
    check(MPI_Iallgather(&value, 1, MPI_UINT64_T, all.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD, &r),
          "MPI_Iallgather");
    pending_.push_back(r);
    wait(what, true);
    return all;
  }

  void broadcast(std::string& bytes, int root, const std::string& what, bool bounded) override {
    uint64_t n = bytes.size();
    MPI_Request r;
    check(MPI_Ibcast(&n, 1, MPI_UINT64_T, root, MPI_COMM_WORLD, &r), "MPI_Ibcast");
    pending_.push_back(r);
    wait(what, bounded);
    bytes.resize(n);
    for (uint64_t off = 0; off < n;) {  // in pieces that fit an int count
      const int piece = static_cast<int>(std::min<uint64_t>(n - off, 1u << 30));
      check(MPI_Ibcast(bytes.data() + off, piece, MPI_BYTE, root, MPI_COMM_WORLD, &r),
            "MPI_Ibcast");
      pending_.push_back(r);
      wait(what, bounded);
      off += static_cast<uint64_t>(piece);
    }
  }

  void barrier() override {
    MPI_Request r;
    check(MPI_Ibarrier(MPI_COMM_WORLD, &r), "MPI_Ibarrier");
    pending_.push_back(r);
    wait("the final barrier", false);
  }

  [[noreturn]] void abort(int code) override {
    std::fflush(stdout);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);  // MPI_Abort does not return; in case it does
  }

 private:
  void check(int rc, const char* call) {
    if (rc == MPI_SUCCESS) return;
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, text, &len);
    fail(who(), std::string(call) + " failed at step " + std::to_string(step_) + ": " +
                    std::string(text, static_cast<size_t>(len)));
  }

  // Tests the pending requests until they complete: spinning at first (a step's allreduce is
  // usually done within microseconds of the last bucket), then sleeping between tests so that
  // a rank waiting for a slower one leaves the core to it. Bounded by the timeout.
  void wait(const std::string& what, bool bounded) {
    const Clock::time_point t0 = Clock::now();
    for (int spins = 0;; ++spins) {
      progress();
      if (pending_.empty()) return;
      if (spins < 2000) continue;
      std::this_thread::sleep_for(std::chrono::microseconds(spins < 20000 ? 20 : 1000));
      const double waited = std::chrono::duration<double>(Clock::now() - t0).count();
      if (bounded && timeout_ > 0 && waited > timeout_) {
        std::fprintf(stderr,
                     "seqtape train: %s: %s at step %lld did not complete within "
                     "--collective-timeout %.0f s: another rank is hung or has died; stopping "
                     "every rank\n",
                     who().c_str(), what.c_str(), static_cast<long long>(step_), timeout_);
        abort(3);
      }
    }
  }

  int rank_ = 0, size_ = 1;
  std::string library_;
  std::vector<MPI_Request> pending_;
};

}  // namespace

std::shared_ptr<Communicator> mpi_world() {
  static std::weak_ptr<Communicator> world;  // MPI is initialized once per process
  static bool initialized = false;
  if (auto w = world.lock()) return w;
  if (initialized) fail("train", "MPI was finalized already in this process");
  initialized = true;
  auto w = std::make_shared<MpiWorld>();
  world = w;
  return w;
}

}  // namespace seqtape
