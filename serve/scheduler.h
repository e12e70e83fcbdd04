#pragma once
// The scheduler between the HTTP handlers and the decoding engine. Handlers submit Jobs; the
// scheduler's decoding loop owns the model and runs them. SerialScheduler runs one job at a time
// on one thread: infer/ today decodes a request to its end inside generate() (the strategy owns
// the step loop), so requests cannot yet be interleaved step by step. A continuous-batching
// scheduler (a request joins the running batch at the next step and leaves it when finished)
// implements the same interface over infer's batched engine; nothing else in serve/ changes.
//
// Dimension key: B inputs of one job.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "infer/model.h"
#include "infer/options.h"

namespace seqtape::serve {

// One request: B inputs decoded with the same options. The scheduler fills the results and
// calls the hooks on its thread; the handler waits with wait_done().
struct Job {
  std::vector<std::string> texts;            // [B] as the client sent them
  std::vector<std::vector<int32_t>> inputs;  // [B] encode_input() ids
  GenerateOptions options;                   // checked; on_stream / cancel are set by the scheduler
  std::function<void(const StreamEvent&)> on_stream;  // optional; event.input = index in [B]
  std::function<void(size_t input)> on_input_done;    // optional; after results[input] is set

  std::atomic<bool> cancel{false};  // the client went away (or shutdown): stop reason cancelled

  // Filled by the scheduler.
  std::vector<GenerateResult> results;  // [B]
  std::vector<double> seconds;          // [B] decoding wall time of each input
  std::string error;                    // non-empty: decoding failed (a bug; answered 500)

  void finish();
  // Waits until finished or `timeout`; true when finished.
  bool wait_done(std::chrono::milliseconds timeout);
  bool done() const;

 private:
  mutable std::mutex m_;
  std::condition_variable cv_;
  bool done_ = false;
};

struct SchedulerStats {
  int64_t queued = 0, running = 0;                     // now
  int64_t completed = 0, cancelled = 0, rejected = 0;  // since start (jobs)
};

class Scheduler {
 public:
  virtual ~Scheduler() = default;
  // Takes the job, or returns false when the queue is full or the scheduler is stopping (the
  // handler answers 503).
  virtual bool submit(std::shared_ptr<Job> job) = 0;
  // Stops taking jobs; lets queued and running ones finish until `deadline`, then cancels what
  // is left (stop reason cancelled) and joins the decoding thread.
  virtual void shutdown(std::chrono::steady_clock::time_point deadline) = 0;
  virtual SchedulerStats stats() const = 0;
  virtual const char* name() const = 0;
};

// One decoding thread, one job at a time, FIFO; at most `capacity` jobs queued or running.
// `before_step` (tests) runs before every decoding step on the decoding thread.
class SerialScheduler final : public Scheduler {
 public:
  SerialScheduler(const InferenceModel& model, size_t capacity,
                  std::function<void()> before_step = {});
  ~SerialScheduler() override;
  bool submit(std::shared_ptr<Job> job) override;
  void shutdown(std::chrono::steady_clock::time_point deadline) override;
  SchedulerStats stats() const override;
  const char* name() const override { return "serial"; }

 private:
  void loop();
  void run(Job& job);

  const InferenceModel& model_;
  const size_t capacity_;
  std::function<void()> before_step_;
  mutable std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool running_job_ = false, stopping_ = false;
  std::atomic<bool> cancel_all_{false};
  SchedulerStats counts_;
  std::thread thread_;
};

}  // namespace seqtape::serve
