#pragma once
// The step profiler: wall time per op kind (forward and backward apart), plus the parts of a
// training step that are not ops (optimizer, clipping, data, tensor allocation), as a share of
// the step — the table torch.profiler prints, for this framework's own op names.
//
// Off by default and free when off: every timing point first reads one flag. When on, time is
// counted only between begin_step() and end_step(), so evaluation and logging between steps
// stay out of the table. Scopes nest and each records its EXCLUSIVE time (a nested scope's
// time is taken out of its parent's), so the rows add up to the tracked share of the step.
// One profiler per thread, like the tape.

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace seqtape::profile {

namespace detail {
extern thread_local bool g_enabled;  // set_enabled()
extern thread_local bool g_active;   // enabled and inside a step
}  // namespace detail

enum class Phase : uint8_t { Forward = 0, Backward = 1, Other = 2 };

// Turns the profiler on or off (clears nothing; see reset()).
void set_enabled(bool on);
inline bool enabled() {
  return detail::g_enabled;
}
// True between begin_step() and end_step() with the profiler on: the one check every timing
// point makes.
inline bool active() {
  return detail::g_active;
}
void begin_step();
void end_step();
void reset();  // forgets every recorded time and step

// Times its own lifetime under `name` (a string literal) and `phase`, minus the time of the
// scopes nested in it.
class Scope {
 public:
  explicit Scope(const char* name, Phase phase = Phase::Other) {
    if (active()) start(name, phase);
  }
  ~Scope() {
    if (name_) stop();
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  void start(const char* name, Phase phase);
  void stop();
  const char* name_ = nullptr;
  Phase phase_ = Phase::Other;
  std::chrono::steady_clock::time_point t0_;
  double child_ns_ = 0;
  Scope* parent_ = nullptr;
};

// One row of the table: a name, its forward / backward / other time and call counts.
struct Row {
  std::string name;
  double ns[3] = {0, 0, 0};  // by Phase
  int64_t calls[3] = {0, 0, 0};
  double total_ns() const { return ns[0] + ns[1] + ns[2]; }
};
struct Summary {
  std::vector<Row> rows;  // sorted by total time, largest first
  int64_t steps = 0;
  double step_ns = 0;     // wall time inside steps, summed over steps
  double tracked_ns = 0;  // the rows' sum; step_ns - tracked_ns is untracked ("other")
};
Summary summary();
// The table, per step in milliseconds, with each row's share of the step.
std::string report(const std::string& title = "profile");

}  // namespace seqtape::profile
