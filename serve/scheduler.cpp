// SerialScheduler: one decoding thread over a bounded FIFO of jobs.
//
// Dimension key: B inputs of one job.
#include "serve/scheduler.h"

#include <exception>

#include "infer/search.h"

namespace seqtape::serve {

void Job::finish() {
  {
    std::lock_guard<std::mutex> l(m_);
    done_ = true;
  }
  cv_.notify_all();
}

bool Job::wait_done(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> l(m_);
  return cv_.wait_for(l, timeout, [&] { return done_; });
}

bool Job::done() const {
  std::lock_guard<std::mutex> l(m_);
  return done_;
}

SerialScheduler::SerialScheduler(const InferenceModel& model, size_t capacity,
                                 std::function<void()> before_step)
    : model_(model), capacity_(capacity), before_step_(std::move(before_step)) {
  thread_ = std::thread([this] { loop(); });
}

SerialScheduler::~SerialScheduler() {
  shutdown(std::chrono::steady_clock::now());
}

bool SerialScheduler::submit(std::shared_ptr<Job> job) {
  {
    std::lock_guard<std::mutex> l(m_);
    const size_t load = queue_.size() + (running_job_ ? 1 : 0);
    if (stopping_ || load >= capacity_) {
      ++counts_.rejected;
      return false;
    }
    queue_.push_back(std::move(job));
  }
  cv_.notify_all();
  return true;
}

void SerialScheduler::shutdown(std::chrono::steady_clock::time_point deadline) {
  {
    std::unique_lock<std::mutex> l(m_);
    stopping_ = true;
    cv_.notify_all();
    // Let the queue drain until the deadline, then cancel whatever is left.
    cv_.wait_until(l, deadline, [&] { return queue_.empty() && !running_job_; });
    cancel_all_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

SchedulerStats SerialScheduler::stats() const {
  std::lock_guard<std::mutex> l(m_);
  SchedulerStats s = counts_;
  s.queued = int64_t(queue_.size());
  s.running = running_job_ ? 1 : 0;
  return s;
}

void SerialScheduler::loop() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> l(m_);
      cv_.wait(l, [&] { return !queue_.empty() || stopping_; });
      if (queue_.empty()) return;  // stopping and drained
      job = std::move(queue_.front());
      queue_.pop_front();
      running_job_ = true;
    }
    run(*job);
    {
      std::lock_guard<std::mutex> l(m_);
      running_job_ = false;
      bool cancelled = false;
      for (const GenerateResult& r : job->results)
        cancelled = cancelled || r.stop_reason == StopReason::Cancelled;
      ++(cancelled ? counts_.cancelled : counts_.completed);
    }
    cv_.notify_all();
    job->finish();
  }
}

void SerialScheduler::run(Job& job) {
  const size_t B = job.inputs.size();
  job.results.resize(B);
  job.seconds.assign(B, 0.0);
  try {
    // One generate() per input, as `seqtape generate` decodes them: each answer is exactly the
    // offline one.
    for (size_t b = 0; b < B; ++b) {
      GenerateOptions o = job.options;
      o.cancel = [this, &job] {
        if (before_step_) before_step_();
        return job.cancel.load() || cancel_all_.load();
      };
      if (job.on_stream)
        o.on_stream = [&job, b](const StreamEvent& e) {
          StreamEvent f = e;
          f.input = int64_t(b);
          job.on_stream(f);
        };
      const auto t0 = std::chrono::steady_clock::now();
      job.results[b] = generate(model_, {job.inputs[b]}, o).at(0);
      job.seconds[b] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (job.on_input_done) job.on_input_done(b);
    }
  } catch (const std::exception& e) {
    job.error = e.what();
  }
}

}  // namespace seqtape::serve
