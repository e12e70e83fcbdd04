// Ranks that are threads of this process (train --ranks N): the collectives of Communicator
// over shared memory. Every collective is blocking and made by all ranks in the same order (the
// training loop's contract), so one meeting point serves them all: a rank publishes its
// operand, waits for the others, does its part, and waits again before its operand may change.
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <vector>

#include "train/dist.h"

namespace seqtape {

namespace {

// What the ranks of one job share.
struct Meeting {
  explicit Meeting(int n) : size(n), operand(static_cast<size_t>(n)), value(n), text(n) {}

  const int size;
  std::mutex mu;
  std::condition_variable cv;
  int arrived = 0;
  std::atomic<uint64_t> generation{0};  // meetings completed
  std::string failure;                  // set once: why the job stops ("" while it runs)
  std::atomic<bool> failed{false};
  // Each rank's operand of the current collective.
  std::vector<void*> operand;
  std::vector<uint64_t> value;
  std::vector<std::string*> text;

  // Stops every rank: the waiting ones wake and throw `why` (the first failure wins).
  void fail(const std::string& why) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (failure.empty()) failure = why;
      failed = true;
    }
    cv.notify_all();
  }
};

class ThreadRank final : public Communicator {
 public:
  ThreadRank(std::shared_ptr<Meeting> m, int rank) : m_(std::move(m)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return m_->size; }
  std::string describe() const override {
    return "threads of one process, summing in shared memory";
  }
  bool shares_process() const override { return true; }

  // The sum of rank order, element by element: every rank sums its slice of the elements over
  // all ranks' buffers (rank 0's value, plus rank 1's, ...) and writes the sum to every buffer.
  // Two ranks give what MPI gives (a + b = b + a); the bits never depend on timing.
  void start_sum(void* data, int64_t n, DType dtype) override {
    m_->operand[static_cast<size_t>(rank_)] = data;
    meet("a sum of gradients", true);
    const int64_t begin = n * rank_ / m_->size, end = n * (rank_ + 1) / m_->size;
    if (dtype == DType::F64)
      sum_slice<double>(begin, end);
    else
      sum_slice<float>(begin, end);
    meet("a sum of gradients", true);
  }
  void progress() override {}
  void wait_all(const std::string&) override {}

  std::vector<uint64_t> allgather(uint64_t value, const std::string& what) override {
    m_->value[static_cast<size_t>(rank_)] = value;
    meet(what, true);
    std::vector<uint64_t> all = m_->value;
    meet(what, true);
    return all;
  }
  void broadcast(std::string& bytes, int root, const std::string& what, bool bounded) override {
    if (rank_ == root) m_->text[static_cast<size_t>(root)] = &bytes;
    meet(what, bounded);
    if (rank_ != root) bytes = *m_->text[static_cast<size_t>(root)];
    meet(what, bounded);
  }
  void barrier() override { meet("the final barrier", false); }

  // Stops the other ranks (they throw from their next collective) and this one.
  [[noreturn]] void abort(int code) override {
    const std::string why = who() + " stopped the run (exit code " + std::to_string(code) + ")";
    m_->fail(why);
    throw Error(why);
  }

  void fail(const std::string& why) { m_->fail(why); }

 private:
  template <typename T>
  void sum_slice(int64_t begin, int64_t end) {
    const int n = m_->size;
    if (n == 2) {  // the common case, in vectors: the same a + b (the ranks' buffers never overlap)
      T* __restrict a = static_cast<T*>(m_->operand[0]);
      T* __restrict b = static_cast<T*>(m_->operand[1]);
      for (int64_t i = begin; i < end; ++i) a[i] = b[i] = a[i] + b[i];
      return;
    }
    // More ranks: block by block, each rank added into rank 0's block in rank order (the same
    // ((a + b) + c) + ... per element, so the same bits as adding element by element), then the
    // sum copied back; every inner loop is a pair of buffers that do not overlap, in vectors.
    constexpr int64_t kBlock = 2048;
    T* __restrict a = static_cast<T*>(m_->operand[0]);
    for (int64_t b0 = begin; b0 < end; b0 += kBlock) {
      const int64_t b1 = std::min(end, b0 + kBlock);
      for (int r = 1; r < n; ++r) {
        const T* __restrict p = static_cast<const T*>(m_->operand[r]);
        for (int64_t i = b0; i < b1; ++i) a[i] += p[i];
      }
      for (int r = 1; r < n; ++r) {
        T* __restrict p = static_cast<T*>(m_->operand[r]);
        for (int64_t i = b0; i < b1; ++i) p[i] = a[i];
      }
    }
  }

  // Waits until every rank has arrived: spinning at first (the ranks of a step arrive within
  // microseconds of each other), then asleep, so that a rank waiting for a slower one (rank 0
  // evaluating) leaves the core to it. Bounded by the timeout unless `bounded` is false; a
  // failure of any rank ends the wait with an Error.
  void meet(const std::string& what, bool bounded) {
    Meeting& m = *m_;
    std::unique_lock<std::mutex> lock(m.mu);
    if (m.failed) throw Error(m.failure);
    const uint64_t gen = m.generation.load();
    if (++m.arrived == m.size) {
      m.arrived = 0;
      m.generation.store(gen + 1, std::memory_order_release);
      lock.unlock();
      m.cv.notify_all();
      return;
    }
    lock.unlock();
    for (int spins = 0; spins < 20000; ++spins) {
      if (m.generation.load(std::memory_order_acquire) != gen) return;
      if (m.failed.load(std::memory_order_relaxed)) break;
#if defined(__x86_64__)
      _mm_pause();
#endif
    }
    lock.lock();
    auto done = [&] { return m.generation.load() != gen || m.failed; };
    if (bounded && timeout_ > 0) {
      if (!m.cv.wait_for(lock, std::chrono::duration<double>(timeout_), done)) {
        lock.unlock();
        const std::string why = who() + ": " + what + " at step " + std::to_string(step_) +
                                " did not complete within --collective-timeout " +
                                std::to_string(static_cast<long long>(timeout_)) +
                                " s: another rank is hung; stopping every rank";
        m.fail(why);
        throw Error(why);
      }
    } else {
      m.cv.wait(lock, done);
    }
    if (m.generation.load() == gen) throw Error(m.failure);
  }

  std::shared_ptr<Meeting> m_;
  int rank_;
};

}  // namespace

std::vector<std::shared_ptr<Communicator>> thread_ranks(int n) {
  if (n < 1) throw Error("thread_ranks: need at least one rank");
  auto meeting = std::make_shared<Meeting>(n);
  std::vector<std::shared_ptr<Communicator>> ranks;
  for (int r = 0; r < n; ++r) ranks.push_back(std::make_shared<ThreadRank>(meeting, r));
  return ranks;
}

void fail_thread_ranks(Communicator& any_rank, const std::string& why) {
  if (auto* t = dynamic_cast<ThreadRank*>(&any_rank)) t->fail(why);
}

}  // namespace seqtape
