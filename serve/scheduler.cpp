// SerialScheduler and ContinuousScheduler: one decoding thread each over a bounded FIFO of
// jobs; decode_alone(), the one-input generate() both use.
//
// Dimension key: B inputs of one job.
#include "serve/scheduler.h"

#include <algorithm>
#include <exception>

#include "infer/search.h"
#include "tensor/tensor.h"  // fail

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

QueuedScheduler::QueuedScheduler(const InferenceModel& model, size_t capacity,
                                 std::function<void()> before_step)
    : model_(model), capacity_(capacity), before_step_(std::move(before_step)) {}

bool QueuedScheduler::submit(std::shared_ptr<Job> job) {
  {
    std::lock_guard<std::mutex> l(m_);
    const size_t load = queue_.size() + size_t(running_jobs_);
    if (stopping_ || load >= capacity_) {
      ++counts_.rejected;
      return false;
    }
    job->submitted = std::chrono::steady_clock::now();
    queue_.push_back(std::move(job));
  }
  cv_.notify_all();
  return true;
}

void QueuedScheduler::shutdown(std::chrono::steady_clock::time_point deadline) {
  {
    std::unique_lock<std::mutex> l(m_);
    stopping_ = true;
    cv_.notify_all();
    // Let the queue drain until the deadline, then cancel whatever is left.
    cv_.wait_until(l, deadline, [&] { return queue_.empty() && running_jobs_ == 0; });
    cancel_all_ = true;
    cv_.notify_all();
  }
  if (thread_.joinable()) thread_.join();
}

SchedulerStats QueuedScheduler::stats() const {
  std::lock_guard<std::mutex> l(m_);
  SchedulerStats s = counts_;
  s.queued = int64_t(queue_.size());
  s.running = running_jobs_;
  return s;
}

void QueuedScheduler::observe_steps(std::function<void(int64_t rows)> on_step) {
  std::lock_guard<std::mutex> l(m_);
  on_step_ = std::move(on_step);
}

void QueuedScheduler::count_step(int64_t rows) {
  std::lock_guard<std::mutex> l(m_);
  ++counts_.steps;
  if (on_step_) on_step_(rows);
}

void QueuedScheduler::start_job(const std::shared_ptr<Job>& job) {
  job->started = std::chrono::steady_clock::now();
  queue_.pop_front();
  ++running_jobs_;
}

bool QueuedScheduler::cancel_before_step(const Job& job) {
  if (before_step_) before_step_();
  const bool stop = job.cancel.load() || cancel_all_.load();
  // One input decoded alone: its beam's or its draws' rows.
  if (!stop) count_step(std::max(job.options.beam, job.options.num_samples));
  return stop;
}

void QueuedScheduler::job_ended(const Job& job) {
  bool cancelled = false;
  for (const GenerateResult& r : job.results)
    cancelled = cancelled || r.stop_reason == StopReason::Cancelled;
  {
    std::lock_guard<std::mutex> l(m_);
    --running_jobs_;
    ++(cancelled ? counts_.cancelled : counts_.completed);
  }
  cv_.notify_all();
}

SerialScheduler::SerialScheduler(const InferenceModel& model, size_t capacity,
                                 std::function<void()> before_step)
    : QueuedScheduler(model, capacity, std::move(before_step)) {
  thread_ = std::thread([this] { loop(); });
}

SerialScheduler::~SerialScheduler() {
  shutdown(std::chrono::steady_clock::now());
}

void SerialScheduler::loop() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> l(m_);
      cv_.wait(l, [&] { return !queue_.empty() || stopping_; });
      if (queue_.empty()) return;  // stopping and drained
      job = queue_.front();
      start_job(job);
    }
    run(*job);
    job_ended(*job);
    job->finish();
  }
}

void decode_alone(const InferenceModel& model, Job& job, size_t b,
                  const std::function<bool()>& cancelled) {
  GenerateOptions o = job.options;
  o.cancel = cancelled;
  if (job.on_stream)
    o.on_stream = [&job, b](const StreamEvent& e) {
      StreamEvent f = e;
      f.input = int64_t(b);
      job.on_stream(f);
    };
  const auto t0 = std::chrono::steady_clock::now();
  job.results[b] = generate(model, {job.inputs[b]}, o).at(0);
  job.seconds[b] = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void SerialScheduler::run(Job& job) {
  const size_t B = job.inputs.size();
  job.results.resize(B);
  job.seconds.assign(B, 0.0);
  try {
    // One generate() per input, as `seqtape generate` decodes them: each answer is exactly the
    // offline one.
    for (size_t b = 0; b < B; ++b) {
      decode_alone(model_, job, b, [this, &job] { return cancel_before_step(job); });
      if (job.on_input_done) job.on_input_done(b);
    }
  } catch (const std::exception& e) {
    job.error = e.what();
  }
}

// ---- ContinuousScheduler ------------------------------------------------------------------

struct ContinuousScheduler::Started {
  std::shared_ptr<Job> job;
  size_t next = 0;             // the next input to admit
  size_t finished = 0;         // inputs with a result
  size_t announced = 0;        // inputs passed to on_input_done: always a prefix, in order
  size_t alone = 0;            // inputs on the second thread
  int64_t waited = 0;          // steps input `next` has waited for rows
  bool failed = false;         // fail_all() answered the rest; the alone ones only count
  std::vector<uint8_t> ready;  // [B] has a result

  // Input b has its result: on_input_done for it and any that waited for it, in input order
  // (inputs decoded together may finish out of order).
  void result_ready(size_t b) {
    ready.resize(job->inputs.size());
    ready[b] = 1;
    ++finished;
    for (; announced < ready.size() && ready[announced]; ++announced)
      if (job->on_input_done) job->on_input_done(announced);
  }
};

struct ContinuousScheduler::Input {
  Started* owner = nullptr;
  size_t b = 0;                              // index in the job
  std::vector<std::vector<int32_t>> inputs;  // {the job's input b}: the context's one input
  GenerateOptions opt;
  std::unique_ptr<SearchContext> context;
  std::unique_ptr<RowSearch> search;
  int64_t n_rows = 1;
  std::vector<int32_t> rows;
  std::chrono::steady_clock::time_point t0;
};

ContinuousScheduler::ContinuousScheduler(const InferenceModel& model, size_t capacity,
                                         int64_t max_batch, std::function<void()> before_step)
    : QueuedScheduler(model, capacity, std::move(before_step)), max_batch_(max_batch) {
  if (max_batch < 1) fail("ContinuousScheduler", "max_batch must be at least 1");
  stepper_ = std::make_unique<Stepper>(model, GenerateOptions{}, 0);
  stepper_->open(max_batch, model.config().max_positions);
  loop_ = std::make_unique<DecodeLoop>(*stepper_, model.config().vocab_size);
  alone_thread_ = std::thread([this] { alone_loop(); });
  thread_ = std::thread([this] { loop(); });
}

ContinuousScheduler::~ContinuousScheduler() {
  shutdown(std::chrono::steady_clock::now());  // the decoding loop waits for the alone inputs
  {
    std::lock_guard<std::mutex> l(m_);
    alone_stop_ = true;
  }
  cv_.notify_all();
  alone_thread_.join();
}

void ContinuousScheduler::alone_loop() {
  for (;;) {
    Alone a;
    {
      std::unique_lock<std::mutex> l(m_);
      cv_.wait(l, [&] { return !alone_queue_.empty() || alone_stop_; });
      if (alone_queue_.empty()) return;
      a = std::move(alone_queue_.front());
      alone_queue_.pop_front();
    }
    Job& job = *a.job;
    try {
      decode_alone(model_, job, a.b, [this, &job] { return cancel_before_step(job); });
    } catch (const std::exception& e) {
      a.error = e.what();
    }
    {
      std::lock_guard<std::mutex> l(m_);
      alone_done_.push_back(std::move(a));
    }
    cv_.notify_all();
  }
}

// Results of the second thread: their jobs are answered here, on the decoding thread that owns
// started_.
void ContinuousScheduler::collect_alone() {
  std::deque<Alone> done;
  {
    std::lock_guard<std::mutex> l(m_);
    done.swap(alone_done_);
  }
  for (Alone& a : done)
    for (auto& p : started_) {
      if (!p || p->job != a.job) continue;
      Started& s = *p;
      --s.alone;
      if (!a.error.empty()) s.job->error = a.error;
      if (s.failed)
        ++s.finished;
      else
        s.result_ready(a.b);
      if (s.finished == s.job->inputs.size()) input_done(s);
      break;
    }
  std::erase(started_, nullptr);
}

void ContinuousScheduler::loop() {
  while (wait_for_work()) {
    try {
      collect_alone();
      admit();
      step();
      finish_inputs();
    } catch (const std::exception& e) {  // a bug: answer 500, start over with an empty session
      fail_all(e.what());
    }
  }
}

bool ContinuousScheduler::wait_for_work() {
  std::unique_lock<std::mutex> l(m_);
  // Started jobs whose every input is on the second thread wait for its results (no spinning).
  cv_.wait(l, [&] {
    return !queue_.empty() || !inputs_.empty() || !alone_done_.empty() ||
           (stopping_ && started_.empty());
  });
  return !queue_.empty() || !started_.empty();
}

// Inputs of started jobs and new jobs, round-robin (take_inputs()), while rows are free; those
// taken join the session together (their sources encoded in one pass).
void ContinuousScheduler::admit() {
  budget_ = stepper_->free_rows();
  take_inputs();
  if (pending_.empty()) return;
  std::vector<std::vector<int32_t>> sources;
  std::vector<int64_t> n_rows;
  for (const auto& in : pending_) {
    sources.push_back(model_.seq2seq() ? in->inputs[0] : std::vector<int32_t>{});
    n_rows.push_back(in->n_rows);
  }
  const std::vector<std::vector<int32_t>> rows = stepper_->admit(sources, n_rows);
  for (size_t i = 0; i < pending_.size(); ++i) {
    Input& in = *pending_[i];
    in.rows = rows[i];
    in.search = make_strategy(in.opt)->start(*in.context, 0, in.rows);
    in.t0 = std::chrono::steady_clock::now();
    loop_->add(in.search.get());
    inputs_.push_back(std::move(pending_[i]));
  }
  pending_.clear();
}

void ContinuousScheduler::take_inputs() {
  // Rounds of: the next queued job joins with its first input, then one more input of every
  // started job. A job of many inputs (or wide beams) shares the free rows with the jobs behind
  // it instead of taking them all first. New jobs go first in a round, so that short requests
  // are not held behind a long one; an input that has waited kMaxOvertakenSteps steps for its
  // rows stops the new jobs until it is in, so that they cannot keep it waiting either.
  bool starving = false;
  for (const auto& p : started_) starving = starving || (p && p->waited >= kMaxOvertakenSteps);
  for (bool progress = true; progress;) {
    progress = !starving && start_next_job();
    for (auto& p : started_) {
      if (!p) continue;
      Started& s = *p;
      if (s.next < s.job->inputs.size() && admit_input(s)) {
        progress = true;
        s.waited = 0;
      }
      if (s.finished == s.job->inputs.size()) input_done(s);  // the last were cancelled
    }
  }
  for (const auto& p : started_)
    if (p && p->next < p->job->inputs.size()) ++p->waited;
}

// The queue's first job, when its first input has rows (or needs none): started with it.
bool ContinuousScheduler::start_next_job() {
  auto s = std::make_unique<Started>();
  {
    std::lock_guard<std::mutex> l(m_);
    if (queue_.empty()) return false;
    s->job = queue_.front();
  }
  const size_t B = s->job->inputs.size();
  s->job->results.resize(B);
  s->job->seconds.assign(B, 0.0);
  if (B > 0 && !admit_input(*s)) return false;  // no room yet: the job stays queued
  {
    std::lock_guard<std::mutex> l(m_);
    start_job(s->job);
  }
  Started& now = *s;
  started_.push_back(std::move(s));
  if (now.finished == B) input_done(now);  // e.g. cancelled while queued
  return true;
}

// Takes input s.next for the session (pending_), hands it to the second thread when the session
// cannot take it, or answers it at once when it is cancelled; false (nothing done) when its rows
// are not free.
bool ContinuousScheduler::admit_input(Started& s) {
  Job& job = *s.job;
  const size_t b = s.next;
  const GenerateOptions& o = job.options;
  const int64_t rows = make_strategy(o)->rows_per_input(o);
  if (!cancelled(job) &&
      (!o.use_cache || o.verify_cache || o.num_samples > 1 || rows > max_batch_)) {
    ++s.next;
    ++s.alone;
    {
      std::lock_guard<std::mutex> l(m_);
      alone_queue_.push_back({s.job, b, ""});
    }
    cv_.notify_all();
    return true;
  }
  if (cancelled(job)) {  // a cancelled generate() stops before its first step
    ++s.next;
    try {
      decode_alone(model_, job, b, [this, &job] { return cancel_before_step(job); });
    } catch (const std::exception& e) {
      job.error = e.what();
    }
    s.result_ready(b);
    return true;
  }
  if (budget_ < rows) return false;
  budget_ -= rows;
  auto in = std::make_unique<Input>();
  in->owner = &s;
  in->b = b;
  in->n_rows = rows;
  in->inputs = {job.inputs[b]};
  in->opt = o;
  if (job.on_stream)
    in->opt.on_stream = [j = &job, b](const StreamEvent& e) {
      StreamEvent f = e;
      f.input = int64_t(b);
      j->on_stream(f);
    };
  ++s.next;
  try {  // checks the options and the input: a bad one fails its job only
    in->context = std::make_unique<SearchContext>(model_, in->inputs, in->opt);
  } catch (const std::exception& e) {
    job.error = e.what();
    budget_ += rows;
    s.result_ready(b);
    return true;
  }
  pending_.push_back(std::move(in));
  return true;
}

// Cancels the rows of cancelled jobs, then one model call over every live row.
void ContinuousScheduler::step() {
  const auto cancel_rows = [this] {
    for (auto& in : inputs_)
      if (cancelled(*in->owner->job)) in->search->cancel();
    loop_->remove_done();
  };
  cancel_rows();
  if (loop_->empty()) return;
  if (before_step_) {
    before_step_();
    cancel_rows();  // asked again after the hook, as the serial scheduler does
    if (loop_->empty()) return;
  }
  count_step(max_batch_ - stepper_->free_rows());
  loop_->step();
}

// Finished inputs take their results and give their rows back; finished jobs are answered.
void ContinuousScheduler::finish_inputs() {
  for (auto& in : inputs_) {
    if (!in->search->done()) continue;
    Job& job = *in->owner->job;
    job.results[in->b] = in->search->result(*stepper_);
    job.seconds[in->b] =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - in->t0).count();
    stepper_->release(in->rows);
    in->owner->result_ready(in->b);
    Started* owner = in->owner;
    in.reset();
    if (owner->finished == owner->job->inputs.size()) input_done(*owner);
  }
  std::erase(inputs_, nullptr);
  std::erase(started_, nullptr);
}

// Answers a job whose inputs all have results (its entry in started_ becomes null).
void ContinuousScheduler::input_done(Started& s) {
  std::shared_ptr<Job> job = s.job;
  for (auto& p : started_)
    if (p.get() == &s) p.reset();
  job_ended(*job);
  job->finish();
}

// Decoding failed (a bug): every started job is answered with the error, and the session is
// opened afresh.
void ContinuousScheduler::fail_all(const std::string& error) {
  inputs_.clear();
  pending_.clear();
  loop_ = std::make_unique<DecodeLoop>(*stepper_, model_.config().vocab_size);
  stepper_->open(max_batch_, model_.config().max_positions);
  for (auto& s : started_) {
    if (!s) continue;
    s->job->error = error;
    s->failed = true;
    s->next = s->job->inputs.size();
    s->finished = s->job->inputs.size() - s->alone;  // the alone ones count when they return
    if (s->alone == 0) input_done(*s);
  }
  std::erase(started_, nullptr);
}

std::unique_ptr<Scheduler> make_scheduler(const std::string& kind, const InferenceModel& model,
                                          size_t capacity, int64_t max_batch,
                                          std::function<void()> before_step) {
  if (kind == "continuous")
    return std::make_unique<ContinuousScheduler>(model, capacity, max_batch,
                                                 std::move(before_step));
  if (kind == "serial") return std::make_unique<SerialScheduler>(model, capacity, before_step);
  fail("serve", "unknown scheduler '" + kind + "' (continuous or serial)");
}

}  // namespace seqtape::serve
