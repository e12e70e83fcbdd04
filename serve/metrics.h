#pragma once
// What GET /metrics shows, in Prometheus' text exposition format (version 0.0.4): counters,
// gauges and histograms that the server's threads update under one mutex. docs/serving.md
// lists the names.
//
// Dimension key: none.

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "serve/scheduler.h"

namespace seqtape::serve {

// Cumulative buckets: counts[i] observations <= bounds[i]; the last bucket (+Inf) is `count`.
struct Histogram {
  std::vector<double> bounds;
  std::vector<int64_t> counts;
  double sum = 0;
  int64_t count = 0;
  explicit Histogram(std::vector<double> b) : bounds(std::move(b)), counts(bounds.size(), 0) {}
  void observe(double v);
};

class Metrics {
 public:
  explicit Metrics(int64_t max_batch);
  // An answered request; `endpoint` is one of the server's paths, or "other".
  void request(const std::string& endpoint, int status);
  // A finished decoding request: seconds queued, to its first token (< 0: none streamed), and
  // in all (from its first byte to its last answered byte); tokens generated.
  void job(double queue_seconds, double first_token_seconds, double total_seconds, int64_t tokens);
  void step(int64_t rows);  // one model call over `rows` rows
  // The exposition, with the scheduler's own counts and gauges.
  std::string text(const SchedulerStats& s, const char* scheduler) const;

 private:
  mutable std::mutex m_;
  std::map<std::pair<std::string, int>, int64_t> requests_;
  Histogram queue_wait_, first_token_, latency_, batch_rows_;
  int64_t tokens_ = 0;
};

// The Content-Type of text().
inline constexpr const char* kMetricsContentType = "text/plain; version=0.0.4; charset=utf-8";

}  // namespace seqtape::serve
