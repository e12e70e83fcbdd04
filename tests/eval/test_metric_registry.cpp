// The metric registry: each row reads its own figure, with the direction the metric has, and
// names are unique, so --best-metric, eval --json and periodic evaluation agree.
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>
#include <tuple>

#include "eval/metric_registry.h"

namespace seqtape::metrics {
namespace {

TEST(MetricRegistry, EachRowReadsItsOwnFigureInItsDirection) {
  Scores s;
  s.loss = 1, s.token_accuracy = 2;
  EvalSummary& d = s.decoded;
  d.chrf = 3, d.bleu = 4, d.exact = 5, d.ter = 6, d.wer = 7, d.per = 8, d.cer = 9, d.ser = 10;
  // name -> (value, lower is better, teacher-forced)
  const std::map<std::string, std::tuple<double, bool, bool>> want = {
      {"loss", {1, true, true}},    {"token_accuracy", {2, false, true}},
      {"chrf", {3, false, false}},  {"bleu", {4, false, false}},
      {"exact", {5, false, false}}, {"ter", {6, true, false}},
      {"wer", {7, true, false}},    {"per", {8, true, false}},
      {"cer", {9, true, false}},    {"ser", {10, true, false}}};
  ASSERT_EQ(metric_registry().size(), want.size());
  std::set<std::string> keys;
  for (const Metric& m : metric_registry()) {
    SCOPED_TRACE(m.name);
    ASSERT_TRUE(want.count(m.name));
    const auto& [value, lower, teacher_forced] = want.at(m.name);
    EXPECT_EQ(m.value(s), value);
    EXPECT_EQ(m.lower_is_better, lower);
    EXPECT_EQ(m.teacher_forced, teacher_forced);
    EXPECT_TRUE(keys.insert(m.key).second) << "duplicate key " << m.key;
    EXPECT_EQ(find_metric(m.name), &m);
  }
  EXPECT_EQ(find_metric("accuracy"), nullptr);
  EXPECT_EQ(find_metric("exact")->key, std::string("exact_match"));
  EXPECT_EQ(metric_names().rfind("loss, chrf, bleu, exact", 0), 0u) << metric_names();
}

}  // namespace
}  // namespace seqtape::metrics
