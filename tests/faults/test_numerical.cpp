// Numerical faults injected into a real training run (TrainOptions::before_backward): a NaN or
// Inf in the input embeddings, in a weight, or in a gradient is caught; the error names the
// step (and, in anomaly mode, the first op whose result went non-finite); training stops and
// the last good checkpoint loads with finite weights. And gradient clipping keeps its promise.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <sstream>

#include "autograd/ops.h"
#include "fault_util.h"
#include "io/checkpoint.h"
#include "tensor/rng.h"
#include "train/copy_task.h"
#include "train/optim.h"
#include "train/trainer.h"

namespace seqtape::faults {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

class NumericalFaults : public ::testing::Test {
 protected:
  void SetUp() override { write_small_copy_task(dir_, 64, 9); }

  TrainOptions options(int64_t steps, int64_t save_every, bool anomaly) const {
    TrainOptions o = seed_training(dir_, "out", steps);
    o.save_every = save_every;
    o.log_every = 1;
    o.eval_max = 2;
    o.anomaly = anomaly;
    return o;
  }

  std::string ckpt() const { return dir_.file("out/checkpoint.bin"); }

  // Runs training that must stop with an Error; returns its message.
  std::string train_expecting_error(const TrainOptions& o) const {
    std::ostringstream log;
    try {
      train(o, log);
    } catch (const Error& e) {
      std::printf("[          ] %s\n", e.what());
      return e.what();
    }
    ADD_FAILURE() << "training did not stop on the injected fault";
    return {};
  }

  // The checkpoint on disk is at `step` and holds only finite numbers.
  void expect_good_checkpoint(int64_t step) const {
    const Checkpoint c = load_checkpoint(ckpt());
    EXPECT_EQ(c.step, step);
    for (const auto* list : {&c.params, &c.optimizer_state})
      for (const NamedTensor& t : *list)
        for (int64_t i = 0; i < t.value.numel(); ++i)
          ASSERT_TRUE(std::isfinite(t.value.get(i))) << t.name << "[" << i << "]";
  }

  TempDir dir_{"numerical"};
};

void expect_contains(const std::string& msg, const std::vector<std::string>& words) {
  for (const auto& w : words)
    EXPECT_NE(msg.find(w), std::string::npos) << "'" << w << "' in: " << msg;
}

void fill(Var& p, double v) {
  Tensor& t = p.mutable_value();
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, v);
}

// Poisoned in the middle of step 3 (after its forward): its backward does not read a bias, so
// step 3 completes with the bias NaN, is not saved (save_every 2), and step 4's forward is the
// first to produce NaN. The last good checkpoint is step 2.
TEST_F(NumericalFaults, NaNWeightInAnomalyModeNamesTheStepAndTheFirstOp) {
  TrainOptions o = options(8, 2, /*anomaly=*/true);
  o.before_backward = [](int64_t step, TransformerModel& m) {
    if (step == 3) m.parameter("encoder.layers.0.ffn.b1").mutable_value().set(0, kNaN);
  };
  const std::string msg = train_expecting_error(o);
  // The bias is added by the op that computes x·W1 + b1 (affine): it is the culprit.
  expect_contains(msg, {"step 4", "anomaly", "non-finite", "step rejected", "(step 2)", "intact"});
  EXPECT_NE(msg.find("affine"), std::string::npos) << msg;
  expect_good_checkpoint(2);
}

// Without anomaly mode the same NaN goes unnoticed by the loss: the ReLU after x·W1 + b1 maps
// NaN to 0. The save at step 4 finds it, refuses to overwrite the good checkpoint of step 2
// and stops training.
TEST_F(NumericalFaults, NaNWeightTheLossDoesNotSeeIsNeverSaved) {
  TrainOptions o = options(8, 2, /*anomaly=*/false);
  o.before_backward = [](int64_t step, TransformerModel& m) {
    if (step == 3) m.parameter("encoder.layers.0.ffn.b1").mutable_value().set(0, kNaN);
  };
  const std::string msg = train_expecting_error(o);
  expect_contains(msg, {"step 4", "encoder.layers.0.ffn.b1", "non-finite", "not saved", "(step 2)",
                        "intact", "--anomaly"});
  expect_good_checkpoint(2);
}

// The data path: every input embedding becomes +Inf, so the embedding lookup itself is the
// first op whose result is non-finite.
TEST_F(NumericalFaults, InfInTheInputEmbeddingsIsCaughtAtTheLookup) {
  TrainOptions o = options(8, 2, /*anomaly=*/true);
  o.before_backward = [](int64_t step, TransformerModel& m) {
    if (step == 5) {
      for (auto& [name, p] : m.named_parameters())
        if (name.find("embed") != std::string::npos && name.ends_with("weight")) fill(p, kInf);
    }
  };
  const std::string msg = train_expecting_error(o);
  expect_contains(msg, {"step 6", "anomaly", "embedding", "(step 4)"});
  expect_good_checkpoint(4);
}

// A NaN added into a gradient: the step itself is rejected before the optimizer moves, with
// the parameter named; the checkpoint of the step before is the last good one.
TEST_F(NumericalFaults, NaNGradientRejectsThatStepNamingTheParameter) {
  for (bool anomaly : {false, true}) {
    SCOPED_TRACE(anomaly ? "anomaly" : "plain");
    TrainOptions o = options(8, 1, anomaly);
    o.overwrite = true;  // the second pass replaces the first pass's run in the same --out
    o.before_backward = [](int64_t step, TransformerModel& m) {
      if (step == 5) {
        // zero_grad left no gradient; give it one holding a NaN, which backward adds to.
        Var p = m.parameter("decoder.layers.0.ffn.w2");
        ASSERT_FALSE(p.has_grad());
        grad_buffer(*p.impl()).set(1, kNaN);
      }
    };
    const std::string msg = train_expecting_error(o);
    expect_contains(msg, {"step 5", "non-finite gradient", "decoder.layers.0.ffn.w2", "(step 4)"});
    expect_good_checkpoint(4);
  }
}

// A NaN in a weight matrix poisons the step's own gradients (dX = dY·Wᵀ reads W).
TEST_F(NumericalFaults, NaNWeightMatrixRejectsTheSameStep) {
  TrainOptions o = options(8, 1, /*anomaly=*/false);
  o.before_backward = [](int64_t step, TransformerModel& m) {
    if (step == 6) m.parameter("decoder.layers.0.ffn.w1").mutable_value().set(0, kNaN);
  };
  const std::string msg = train_expecting_error(o);
  expect_contains(msg, {"step 6", "non-finite gradient", "(step 5)", "intact"});
  expect_good_checkpoint(5);
}

// Resuming from the last good checkpoint after such a stop trains on normally.
TEST_F(NumericalFaults, TrainingResumesFromTheLastGoodCheckpoint) {
  TrainOptions o = options(8, 1, false);
  o.before_backward = [](int64_t step, TransformerModel& m) {
    if (step == 4) m.parameter("decoder.layers.0.ffn.w1").mutable_value().set(0, kNaN);
  };
  train_expecting_error(o);
  TrainOptions again = options(8, 1, false);
  again.resume = true;
  std::ostringstream log;
  const TrainReport r = train(again, log);
  EXPECT_EQ(r.first_step, 4);
  EXPECT_EQ(r.last_step, 8);
  expect_good_checkpoint(8);
}

// Anomaly mode must not flag the -inf an attention mask writes on purpose (it did: every
// anomaly run stopped at step 1 in masked_fill), yet must flag a NaN that the mask lets through.
TEST(AnomalyMode, MaskedFillWithMinusInfIsNotAnAnomalyButWhatItKeepsIs) {
  struct AnomalyOn {
    AnomalyOn() { Tape::current().set_anomaly(true); }
    ~AnomalyOn() { Tape::current().set_anomaly(false); }
  } on;
  Var x(Tensor::from(std::vector<float>{1, 2, 3, 4}, {2, 2}), true);
  Var y = softmax(masked_fill(x, Mask::causal(2), -kInf));
  EXPECT_FLOAT_EQ(y.value().get(0), 1.0f);
  EXPECT_FLOAT_EQ(y.value().get(1), 0.0f);

  Var bad(Tensor::from(std::vector<float>{1, 2, static_cast<float>(kNaN), 4}, {2, 2}), true);
  try {
    masked_fill(bad, Mask::causal(2), -kInf);
    FAIL() << "a NaN outside the mask passed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("masked_fill: anomaly"), std::string::npos) << e.what();
  }
  Tape::current().clear();
}

// ---- clipping ----------------------------------------------------------------------------

// Parameters of the given sizes and dtypes whose gradients are `scale` x N(0, 1).
NamedParams random_grads(Rng& rng, const std::vector<std::pair<int64_t, DType>>& spec,
                         double scale) {
  NamedParams ps;
  for (size_t i = 0; i < spec.size(); ++i) {
    const auto [n, dtype] = spec[i];
    Var p(Tensor::zeros({n}, dtype), true);
    Tensor g = Tensor::zeros({n}, dtype);
    for (int64_t j = 0; j < n; ++j) g.set(j, scale * rng.normal());
    accumulate_grad(*p.impl(), g, "test");
    ps.push_back({"p" + std::to_string(i), p});
  }
  return ps;
}

TEST(ClippingFaults, GlobalNormIsAtMostMaxNormForAnyScaleAndDtype) {
  Rng rng(42);
  auto size = [](Rng& r) { return 1 + static_cast<int64_t>(r.below(300)); };
  int clipped = 0;
  for (int trial = 0; trial < 400; ++trial) {
    std::vector<std::pair<int64_t, DType>> spec;
    const int k = 1 + trial % 5;
    for (int i = 0; i < k; ++i)
      spec.push_back({size(rng), (trial + i) % 2 ? DType::F32 : DType::F64});
    const double scale = std::pow(10.0, -20.0 + (trial % 41));   // 1e-20 .. 1e20
    const double max_norm = std::pow(10.0, -3.0 + (trial % 7));  // 1e-3 .. 1e3
    NamedParams ps = random_grads(rng, spec, scale);
    const double before = grad_global_norm(ps);
    const double returned = clip_grad_norm(ps, max_norm);
    const double after = grad_global_norm(ps);
    EXPECT_EQ(returned, before);
    EXPECT_LE(after, max_norm * (1 + 1e-6)) << "trial " << trial << " norm " << before;
    if (before > max_norm) {
      ++clipped;
      EXPECT_GE(after, max_norm * (1 - 1e-5)) << "trial " << trial;  // scaled, not zeroed
    } else {
      EXPECT_EQ(after, before) << "trial " << trial;  // left alone
    }
  }
  EXPECT_GT(clipped, 100);
  EXPECT_LT(clipped, 400);
}

TEST(ClippingFaults, NonFiniteNormIsAnErrorAndNothingIsScaled) {
  Rng rng(7);
  for (double bad : {kNaN, kInf, -kInf}) {
    NamedParams ps = random_grads(rng, {{5, DType::F32}, {4, DType::F64}}, 100.0);
    Tensor g = ps[1].second.grad();  // shares the gradient's buffer
    g.set(2, bad);
    const double kept = ps[0].second.grad().get(0);
    try {
      clip_grad_norm(ps, 1.0);
      FAIL() << "a non-finite gradient was clipped silently";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("'p1'"), std::string::npos) << e.what();
    }
    EXPECT_EQ(ps[0].second.grad().get(0), kept);  // no silent partial scaling either
  }
  NamedParams ok = random_grads(rng, {{3, DType::F32}}, 1.0);
  EXPECT_THROW(clip_grad_norm(ok, 0.0), Error);
  EXPECT_THROW(clip_grad_norm(ok, -1.0), Error);
  EXPECT_THROW(clip_grad_norm(ok, kNaN), Error);
}

}  // namespace
}  // namespace seqtape::faults
