// The gradient allreduce alone, as seqtape's data-parallel trainer runs it (train/dist.h's
// Communicator: MPI_Iallreduce of float32, in place), for bucket sizes from 64 KiB to the
// medium preset's whole gradient. Run under mpirun:
//
//   mpirun -np 2 build/bench/bench_allreduce
//
// Prints, per size, the median time of 20 sums and the bandwidth in the ring model's terms:
// bus GB/s = 2(N-1)/N x bytes / time, the figure docs/scaling.md plugs into that model.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

#include "train/dist.h"

using namespace seqtape;

int main() {
  const auto comm = world_communicator();
  const int n = comm->size();
  if (comm->rank() == 0)
    std::printf("allreduce over %d ranks (%s), float32, in place\n%12s %12s %12s %12s\n", n,
                comm->describe().c_str(), "bytes", "median ms", "alg GB/s", "bus GB/s");
  for (int64_t bytes : {int64_t{64} << 10, int64_t{1} << 20, int64_t{4} << 20, int64_t{22} << 20,
                        int64_t{64} << 20}) {
    std::vector<float> data(static_cast<size_t>(bytes / 4), 1.0f);
    std::vector<double> times;
    for (int rep = 0; rep < 23; ++rep) {
      comm->barrier();
      const auto t0 = std::chrono::steady_clock::now();
      comm->start_sum(data.data(), static_cast<int64_t>(data.size()), DType::F32);
      comm->wait_all("the benchmark's allreduce");
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (rep >= 3) times.push_back(s);  // the first ones set up buffers
    }
    std::sort(times.begin(), times.end());
    const double t = times[times.size() / 2];
    const double alg = static_cast<double>(bytes) / t / 1e9;
    if (comm->rank() == 0)
      std::printf("%12lld %12.3f %12.2f %12.2f\n", static_cast<long long>(bytes), 1e3 * t, alg,
                  alg * 2.0 * (n - 1) / std::max(1, n));
  }
  comm->barrier();
  return 0;
}
