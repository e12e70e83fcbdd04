#pragma once
// The scheduler between the HTTP handlers and the decoding engine. Handlers submit Jobs; the
// scheduler's decoding thread owns the model and runs them. Two implement the interface:
//   - ContinuousScheduler (the default): one decoding loop over one session of up to max_batch
//     rows. Before every step it admits inputs into free rows in rounds: the next queued job
//     (arrival order), then one input of each started job (a job of many inputs or wide beams
//     cannot hold back the short jobs behind it; an input waiting for rows is overtaken by new
//     jobs for kMaxOvertakenSteps steps at most); one model call then
//     steps every live row, whatever its request and options (greedy, sampling and beam rows
//     share the call); a finished input leaves and its rows are reused at the next step. Each
//     input is a RowSearch (infer/row_search.h), and a row's logits do not depend on the rows
//     beside it, so every answer is exactly what `seqtape generate` gives for that input alone.
//   - SerialScheduler: one job at a time, each input decoded to its end by generate().
// Both bound the jobs queued or running (more: submit() is refused, and the handler answers
// 503), honour cancellation (stop reason cancelled) and drain until a shutdown deadline.
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
#include "infer/row_search.h"
#include "infer/stepper.h"

namespace seqtape::serve {

// One request: B inputs decoded with the same options. The scheduler fills the results and
// calls the hooks on its thread; the handler waits with wait_done().
struct Job {
  std::vector<std::string> texts;            // [B] as the client sent them
  std::vector<std::vector<int32_t>> inputs;  // [B] encode_input() ids
  GenerateOptions options;                   // checked; on_stream / cancel are set by the scheduler
  std::function<void(const StreamEvent&)> on_stream;  // optional; event.input = index in [B]
  std::function<void(size_t input)> on_input_done;    // optional; after results[input] is set,
                                                      // in input order

  std::atomic<bool> cancel{false};  // the client went away (or shutdown): stop reason cancelled

  // Filled by the scheduler.
  std::vector<GenerateResult> results;  // [B]
  std::vector<double> seconds;          // [B] decoding wall time of each input
  std::string error;                    // non-empty: decoding failed (a bug; answered 500)
  // When submit() took the job, and when its first input started decoding (the queue wait).
  std::chrono::steady_clock::time_point submitted{}, started{};
  std::chrono::steady_clock::time_point first_token{};  // set by the server's on_stream hook

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
  int64_t steps = 0;  // since start: model calls (continuous: each steps every live row)
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
  // `on_step(rows)` runs on a decoding thread after every model call is counted, with the rows
  // (hypotheses) that call decodes (/metrics' batch sizes).
  virtual void observe_steps(std::function<void(int64_t rows)> on_step) = 0;
};

// Decodes input b of `job` alone with generate() (the strategy its options select), streaming
// through the job's hook; `cancelled` is asked before every step. Sets results[b] and
// seconds[b] (the caller calls on_input_done).
void decode_alone(const InferenceModel& model, Job& job, size_t b,
                  const std::function<bool()>& cancelled);

// What both schedulers share: the bounded FIFO of jobs (at most `capacity` queued or running),
// the counts, and shutdown with a drain deadline. A subclass starts thread_ on its loop once its
// own members exist, and calls shutdown() in its destructor (the loop is its). `before_step`
// (tests) runs before every model call on the decoding thread.
class QueuedScheduler : public Scheduler {
 public:
  bool submit(std::shared_ptr<Job> job) final;
  void shutdown(std::chrono::steady_clock::time_point deadline) final;
  SchedulerStats stats() const final;
  void observe_steps(std::function<void(int64_t rows)> on_step) final;

 protected:
  QueuedScheduler(const InferenceModel& model, size_t capacity, std::function<void()> before_step);
  void count_step(int64_t rows);
  // Takes job (the front of queue_, under m_) as started.
  void start_job(const std::shared_ptr<Job>& job);
  // Before each step of a generate() over `job`: runs before_step, then true when the job is
  // cancelled (the step is not taken), else counts the step.
  bool cancel_before_step(const Job& job);
  // A running job ended: counted as cancelled when any of its inputs was; wakes shutdown().
  void job_ended(const Job& job);

  const InferenceModel& model_;
  const size_t capacity_;
  std::function<void()> before_step_;
  std::function<void(int64_t rows)> on_step_;  // under m_
  mutable std::mutex m_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;  // not started yet
  int64_t running_jobs_ = 0;
  bool stopping_ = false;
  std::atomic<bool> cancel_all_{false};
  SchedulerStats counts_;
  std::thread thread_;
};

// One decoding thread, one job at a time, FIFO.
class SerialScheduler final : public QueuedScheduler {
 public:
  SerialScheduler(const InferenceModel& model, size_t capacity,
                  std::function<void()> before_step = {});
  ~SerialScheduler() override;
  const char* name() const override { return "serial"; }

 private:
  void loop();
  void run(Job& job);
};

// One decoding loop over up to `max_batch` rows (a beam of K takes K rows), round-robin
// admission between jobs (new ones in arrival order), at
// most `capacity` jobs queued or running. `before_step` (tests) runs before every model call on
// the decoding thread. Inputs the shared session cannot take — no_cache or verify_cache (they
// compare with, or are, the uncached recompute), num_samples > 1, or more rows than max_batch —
// are decoded alone by generate() on a second thread, one at a time in FIFO order, while the
// shared loop keeps stepping: however costly, they never hold up the other requests' steps
// (they only wait for each other).
class ContinuousScheduler final : public QueuedScheduler {
 public:
  ContinuousScheduler(const InferenceModel& model, size_t capacity, int64_t max_batch,
                      std::function<void()> before_step = {});
  ~ContinuousScheduler() override;
  const char* name() const override { return "continuous"; }

 private:
  struct Started;  // a job taken from the queue: which inputs are admitted, which finished
  struct Input;    // one input in the session: its options, search context, search and rows
  struct Alone {   // one input decoded alone, off the shared loop
    std::shared_ptr<Job> job;
    size_t b = 0;
    std::string error;  // decoding failed
  };
  void loop();
  void alone_loop();     // the second thread: decodes alone_queue_
  void collect_alone();  // the decoding thread takes the results of alone_done_
  bool wait_for_work();  // false: stopping and nothing left
  void admit();
  void take_inputs();
  bool start_next_job();
  bool admit_input(Started& s);  // false: not enough free rows
  void step();
  void finish_inputs();
  void fail_all(const std::string& error);
  void input_done(Started& s);
  bool cancelled(const Job& job) const { return job.cancel.load() || cancel_all_.load(); }

  // Steps an input waiting for rows may be overtaken by new jobs (take_inputs()).
  static constexpr int64_t kMaxOvertakenSteps = 32;
  const int64_t max_batch_;
  // The decoding thread's own.
  std::unique_ptr<Stepper> stepper_;
  std::unique_ptr<DecodeLoop> loop_;
  std::vector<std::unique_ptr<Started>> started_;  // FIFO
  std::vector<std::unique_ptr<Input>> inputs_;     // in the session
  std::vector<std::unique_ptr<Input>> pending_;    // taken by admit(), joining at this step
  int64_t budget_ = 0;                             // rows admit() may still give
  // Under m_: inputs waiting for, and decoded by, the second thread.
  std::deque<Alone> alone_queue_, alone_done_;
  bool alone_stop_ = false;
  std::thread alone_thread_;
};

// "continuous" or "serial" (anything else: Error).
std::unique_ptr<Scheduler> make_scheduler(const std::string& kind, const InferenceModel& model,
                                          size_t capacity, int64_t max_batch,
                                          std::function<void()> before_step = {});

}  // namespace seqtape::serve
