// The program the data-parallel tests start under mpirun (and alone, as the one-rank
// reference): trains the seed preset on a copy task with train() and writes, on rank 0,
// <out>/losses.txt (one loss per step, 17 digits) and <out>/reducer.txt (buckets and the
// buckets started during backward). Every bucket is verified (GradReducer::set_verify).
//
//   dist_worker --data DIR --out DIR [--steps N] [--batch B] [--accum K] [--float64]
//               [--clip C] [--bucket-bytes N] [--no-overlap] [--save-every N] [--check-sync N]
//               [--timeout S] [--resume] [--fault kill|error|hang|diverge --fault-step N]
//
// --fault makes rank 1 fail at that step: SIGKILL itself, throw an error, hang, or change one
// of its parameters (which --check-sync must catch).
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>

#include "train/trainer.h"

using namespace seqtape;

namespace {

// The worker's options: the seed preset on a few batches unless the arguments say otherwise.
struct WorkerArgs {
  TrainOptions o;
  std::string data, fault;
  int64_t fault_step = 3;
  double timeout = 60;
};

WorkerArgs parse_args(int argc, char** argv) {
  WorkerArgs w;
  TrainOptions& o = w.o;
  std::string& data = w.data;
  std::string& fault = w.fault;
  int64_t& fault_step = w.fault_step;
  double& timeout = w.timeout;
  o.model = preset("seed", 2);
  o.steps = 10;
  o.batch = 7;
  o.clip = 0.1;  // small enough that clipping acts
  o.schedule.lr = 0.01;
  o.progress = 0;
  o.eval_max = 0;
  o.save_every = 0;
  o.threads = 1;
  o.verify_buckets = true;
  o.bucket_bytes = 2048;  // several buckets even for the seed preset
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--data")
      data = next();
    else if (a == "--out")
      o.out_dir = next();
    else if (a == "--steps")
      o.steps = std::stoll(next());
    else if (a == "--batch")
      o.batch = std::stoll(next());
    else if (a == "--accum")
      o.accum = std::stoll(next());
    else if (a == "--float64")
      o.dtype = DType::F64;
    else if (a == "--clip")
      o.clip = std::stod(next());
    else if (a == "--bucket-bytes")
      o.bucket_bytes = std::stoll(next());
    else if (a == "--no-overlap")
      o.overlap = false;
    else if (a == "--save-every")
      o.save_every = std::stoll(next());
    else if (a == "--check-sync")
      o.check_sync = std::stoll(next());
    else if (a == "--timeout")
      timeout = std::stod(next());
    else if (a == "--resume")
      o.resume = true;
    else if (a == "--fault")
      fault = next();
    else if (a == "--fault-step")
      fault_step = std::stoll(next());
    else
      throw std::runtime_error("unknown argument " + a);
  }
  return w;
}

}  // namespace

int main(int argc, char** argv) {
  std::shared_ptr<Communicator> comm;
  try {
    comm = world_communicator();
    WorkerArgs w = parse_args(argc, argv);
    TrainOptions& o = w.o;
    const std::string& fault = w.fault;
    const int64_t fault_step = w.fault_step;
    o.data = w.data + "/train.tsv";
    o.valid_data = w.data + "/valid.tsv";
    o.vocab = w.data + "/vocab.txt";
    comm->set_timeout(w.timeout);
    o.comm = comm;
    const int rank = comm->rank();
    if (!fault.empty())
      o.before_backward = [&, rank](int64_t step, TransformerModel& model) {
        if (rank != 1 || step != fault_step) return;
        if (fault == "kill") std::raise(SIGKILL);
        if (fault == "error") fail("step " + std::to_string(step), "injected failure on rank 1");
        if (fault == "hang") std::this_thread::sleep_for(std::chrono::seconds(600));
        if (fault == "diverge") {
          Var p = model.named_parameters().front().second;
          p.mutable_value().set(0, p.value().get(0) + 1e-3);
        }
      };
    std::ostream null_log(nullptr);
    const TrainReport r = train(o, rank == 0 ? std::cout : null_log);
    if (rank == 0) {
      std::ofstream losses(o.out_dir + "/losses.txt");
      losses.precision(17);
      for (double l : r.losses) losses << l << "\n";
      std::ofstream red(o.out_dir + "/reducer.txt");
      red << r.allreduce.buckets << " " << r.allreduce.overlapped << " " << r.allreduce.steps
          << "\n";
    }
    comm->barrier();
    return 0;
  } catch (const std::exception& e) {
    const int rank = comm ? comm->rank() : -1, size = comm ? comm->size() : 0;
    std::fprintf(stderr, "dist_worker: rank %d of %d: %s\n", rank, size, e.what());
    if (comm && comm->size() > 1) comm->abort(3);
    return 3;
  }
}
