#include "tensor/profile.h"

#include <algorithm>
#include <cstdio>
#include <string_view>
#include <unordered_map>

namespace seqtape::profile {

namespace detail {
thread_local bool g_enabled = false;
thread_local bool g_active = false;
}  // namespace detail

namespace {
using Clock = std::chrono::steady_clock;

struct State {
  std::unordered_map<std::string_view, size_t> index;
  std::vector<Row> rows;
  int64_t steps = 0;
  double step_ns = 0;
  Clock::time_point step_t0;
  Scope* current = nullptr;  // innermost open scope
};
State& state() {
  thread_local State s;
  return s;
}
double ns_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::nano>(b - a).count();
}
}  // namespace

void set_enabled(bool on) {
  detail::g_enabled = on;
  if (!on) detail::g_active = false;
}

void begin_step() {
  if (!detail::g_enabled) return;
  detail::g_active = true;
  state().step_t0 = Clock::now();
}

void end_step() {
  if (!detail::g_active) return;
  State& s = state();
  s.step_ns += ns_between(s.step_t0, Clock::now());
  ++s.steps;
  detail::g_active = false;
}

void reset() {
  State& s = state();
  s.index.clear();
  s.rows.clear();
  s.steps = 0;
  s.step_ns = 0;
}

void Scope::start(const char* name, Phase phase) {
  State& s = state();
  name_ = name;
  phase_ = phase;
  parent_ = s.current;
  s.current = this;
  t0_ = Clock::now();
}

void Scope::stop() {
  const double total = ns_between(t0_, Clock::now());
  State& s = state();
  s.current = parent_;
  if (parent_) parent_->child_ns_ += total;
  auto [it, added] = s.index.try_emplace(std::string_view(name_), s.rows.size());
  if (added) s.rows.push_back(Row{name_, {0, 0, 0}, {0, 0, 0}});
  Row& r = s.rows[it->second];
  const auto p = static_cast<size_t>(phase_);
  r.ns[p] += std::max(0.0, total - child_ns_);
  ++r.calls[p];
}

Summary summary() {
  const State& s = state();
  Summary out;
  out.rows = s.rows;
  std::sort(out.rows.begin(), out.rows.end(),
            [](const Row& a, const Row& b) { return a.total_ns() > b.total_ns(); });
  out.steps = s.steps;
  out.step_ns = s.step_ns;
  for (const Row& r : out.rows) out.tracked_ns += r.total_ns();
  return out;
}

std::string report(const std::string& title) {
  const Summary sm = summary();
  std::string out;
  char line[256];
  if (sm.steps == 0) return title + ": no step was profiled\n";
  const double steps = static_cast<double>(sm.steps);
  const double per_step_ms = sm.step_ns / steps / 1e6;
  std::snprintf(line, sizeof line, "%s: %lld steps, %.3f ms per step\n", title.c_str(),
                static_cast<long long>(sm.steps), per_step_ms);
  out += line;
  // fwd n / bwd n: calls per step (a row that is not an op counts its calls under bwd n).
  std::snprintf(line, sizeof line, "%-18s %11s %11s %11s %8s %8s %8s\n", "name", "fwd ms/step",
                "bwd ms/step", "ms/step", "share", "fwd n", "bwd n");
  out += line;
  auto row = [&](const std::string& name, double fwd, double bwd, double tot, double fc,
                 double bc) {
    std::snprintf(line, sizeof line, "%-18s %11.4f %11.4f %11.4f %7.1f%% %8.1f %8.1f\n",
                  name.c_str(), fwd / steps / 1e6, bwd / steps / 1e6, tot / steps / 1e6,
                  sm.step_ns > 0 ? 100 * tot / sm.step_ns : 0.0, fc / steps, bc / steps);
    out += line;
  };
  double fwd_sum = 0, bwd_sum = 0;
  for (const Row& r : sm.rows) {
    row(r.name, r.ns[0], r.ns[1], r.total_ns(), static_cast<double>(r.calls[0]),
        static_cast<double>(r.calls[1] + r.calls[2]));
    fwd_sum += r.ns[0];
    bwd_sum += r.ns[1];
  }
  const double other = std::max(0.0, sm.step_ns - sm.tracked_ns);
  row("(untracked)", 0, 0, other, 0, 0);
  std::snprintf(line, sizeof line,
                "forward ops %.1f%%, backward ops %.1f%%, everything else %.1f%% of the step\n",
                100 * fwd_sum / sm.step_ns, 100 * bwd_sum / sm.step_ns,
                100 * (sm.step_ns - fwd_sum - bwd_sum) / sm.step_ns);
  out += line;
  return out;
}

}  // namespace seqtape::profile
