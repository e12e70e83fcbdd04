// Metrics: Prometheus' text exposition format (HELP and TYPE lines, then the samples; a
// histogram's cumulative _bucket{le=...} lines end with le="+Inf", then _sum and _count).
//
// Dimension key: none.
#include "serve/metrics.h"

#include <cmath>
#include <cstdio>

namespace seqtape::serve {

namespace {

// Seconds from a millisecond to a minute: a request's queue wait, first token or latency.
std::vector<double> second_buckets() {
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
}

// Powers of two up to max_batch, and max_batch itself: the rows of one step.
std::vector<double> row_buckets(int64_t max_batch) {
  std::vector<double> b;
  for (int64_t r = 1; r < max_batch; r *= 2) b.push_back(double(r));
  b.push_back(double(std::max<int64_t>(max_batch, 1)));
  return b;
}

// A sample value: integers without a fraction, the rest with 15 significant digits (what a
// double holds exactly in decimal, so 0.0025 stays 0.0025).
std::string number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  if (v == std::floor(v) && std::fabs(v) < 1e15)
    std::snprintf(buf, sizeof buf, "%.0f", v);
  else
    std::snprintf(buf, sizeof buf, "%.15g", v);
  return buf;
}

void header(std::string& out, const std::string& name, const char* type, const char* help) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void sample(std::string& out, const std::string& name, double v) {
  out += name + " " + number(v) + "\n";
}

void histogram(std::string& out, const std::string& name, const char* help, const Histogram& h) {
  header(out, name, "histogram", help);
  for (size_t i = 0; i < h.bounds.size(); ++i)
    out +=
        name + "_bucket{le=\"" + number(h.bounds[i]) + "\"} " + number(double(h.counts[i])) + "\n";
  out += name + "_bucket{le=\"+Inf\"} " + number(double(h.count)) + "\n";
  sample(out, name + "_sum", h.sum);
  sample(out, name + "_count", double(h.count));
}

}  // namespace

void Histogram::observe(double v) {
  for (size_t i = 0; i < bounds.size(); ++i)
    if (v <= bounds[i]) ++counts[i];
  sum += v;
  ++count;
}

Metrics::Metrics(int64_t max_batch)
    : queue_wait_(second_buckets()),
      first_token_(second_buckets()),
      latency_(second_buckets()),
      batch_rows_(row_buckets(max_batch)) {}

void Metrics::request(const std::string& endpoint, int status) {
  std::lock_guard<std::mutex> l(m_);
  ++requests_[{endpoint, status}];
}

void Metrics::job(double queue_seconds, double first_token_seconds, double total_seconds,
                  int64_t tokens) {
  std::lock_guard<std::mutex> l(m_);
  queue_wait_.observe(queue_seconds);
  if (first_token_seconds >= 0) first_token_.observe(first_token_seconds);
  latency_.observe(total_seconds);
  tokens_ += tokens;
}

void Metrics::step(int64_t rows) {
  std::lock_guard<std::mutex> l(m_);
  batch_rows_.observe(double(rows));
}

std::string Metrics::text(const SchedulerStats& s, const char* scheduler) const {
  std::lock_guard<std::mutex> l(m_);
  std::string out;
  header(out, "seqtape_requests_total", "counter",
         "HTTP requests answered, by endpoint and status.");
  for (const auto& [key, n] : requests_)
    out += "seqtape_requests_total{endpoint=\"" + key.first + "\",status=\"" +
           std::to_string(key.second) + "\"} " + number(double(n)) + "\n";
  histogram(out, "seqtape_queue_wait_seconds", "Time a decoding request waited for its first step.",
            queue_wait_);
  histogram(out, "seqtape_time_to_first_token_seconds",
            "Time from a decoding request's arrival to its first generated token.", first_token_);
  histogram(out, "seqtape_request_duration_seconds",
            "Time from a decoding request's arrival to the end of its answer.", latency_);
  histogram(out, "seqtape_batch_rows", "Rows (hypotheses) decoded by one model call.", batch_rows_);
  header(out, "seqtape_generated_tokens_total", "counter",
         "Tokens generated for answered requests.");
  sample(out, "seqtape_generated_tokens_total", double(tokens_));
  header(out, "seqtape_queue_depth", "gauge", "Decoding requests queued, not started.");
  sample(out, "seqtape_queue_depth", double(s.queued));
  header(out, "seqtape_running_requests", "gauge", "Decoding requests being decoded.");
  sample(out, "seqtape_running_requests", double(s.running));
  const std::pair<const char*, int64_t> counters[] = {
      {"completed", s.completed}, {"cancelled", s.cancelled}, {"rejected", s.rejected}};
  header(out, "seqtape_jobs_total", "counter",
         "Decoding requests by outcome: completed, cancelled (client gone, deadline or "
         "shutdown), rejected (queue full or stopping).");
  for (const auto& [outcome, n] : counters)
    out +=
        std::string("seqtape_jobs_total{outcome=\"") + outcome + "\"} " + number(double(n)) + "\n";
  header(out, "seqtape_steps_total", "counter", "Model calls of the decoding loop.");
  out += std::string("seqtape_steps_total{scheduler=\"") + scheduler + "\"} " +
         number(double(s.steps)) + "\n";
  return out;
}

}  // namespace seqtape::serve
