#include "train/auto_defaults.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>

#include "model/memory_budget.h"
#include "tensor/tensor.h"
#include "train/optim.h"
#include "train/trainer.h"

namespace seqtape {

namespace {

struct Rung {
  int64_t d_model, heads, layers, d_ff;  // layers: encoder and decoder each
};
// Widths and depths of the published small Transformers for character and phoneme tasks,
// from the smallest (the `default` preset) up.
constexpr Rung kLadder[] = {
    {64, 4, 2, 256},   {128, 4, 3, 512},  {192, 4, 3, 768},
    {256, 4, 3, 1024}, {384, 6, 4, 1536}, {512, 8, 6, 2048},
};

// Parameter-tokens per second of one thread in a training step (forward, backward and Adam),
// float32: the rate of the d128-d256 rungs on 2 AVX-512 cores divided by 2^0.75, rounded down.
// bfloat16 products add about a third. A slower CPU gets a smaller model than it could afford
// from the same rule, never a run that cannot finish its schedule.
constexpr double kRatePerThread = 1.0e10;
constexpr double kBf16Speedup = 1.3;
constexpr double kThreadExponent = 0.75;  // two threads are worth about 1.7 of one
// Label tokens in a batch of N padded source and target positions: about half of them.
constexpr double kLabelShareOfBatch = 0.5;
constexpr int64_t kMaxWarmup = 400;

ModelConfig rung_config(const Rung& r) {
  ModelConfig c = preset("default", 0);
  c.d_model = r.d_model;
  c.n_heads = r.heads;
  c.n_encoder_layers = c.n_decoder_layers = r.layers;
  c.d_ff = r.d_ff;
  // GELU in place of the `default` preset's ReLU, as in BERT's and GPT's feed-forwards: at the
  // same step rate it gave de-en 1.7 points of chrF, CMUdict's recipe 0.5 points of WER and its
  // defaults the same WER (docs/recipes.md, rows 32-35 and the de-en section).
  c.activation = Activation::Gelu;
  c.dropout = 0.1;
  return c;
}

// Label tokens of each batch: the data in about 64 batches or more, between 512 and
// kMaxBatchTokens positions, a multiple of 256.
int64_t batch_tokens_for(int64_t label_tokens) {
  const int64_t b = label_tokens / 64 / 256 * 256;
  return std::clamp<int64_t>(b, 512, kMaxBatchTokens);
}

}  // namespace

AutoChoice choose_auto(const AutoInput& in) {
  const double rate = kRatePerThread * std::pow(std::max(1, in.threads), kThreadExponent) *
                      (in.bf16 ? kBf16Speedup : 1.0);
  const double tokens = static_cast<double>(std::max<int64_t>(1, in.label_tokens));
  AutoChoice c;
  c.model = rung_config(kLadder[0]);
  for (const Rung& r : kLadder) {
    ModelConfig m = rung_config(r);
    m.vocab_size = 64;  // the embeddings hardly count against the layers
    const auto params = static_cast<double>(parameter_count(m));
    const double seen = in.seconds * rate / params;  // label tokens the budget trains on
    if (&r != &kLadder[0] &&
        (seen < kMinTokensPerParam * params || params > kMaxParamsPerToken * tokens))
      break;
    c.model = rung_config(r);
    c.epochs = seen / tokens;
  }
  c.batch_tokens = batch_tokens_for(in.label_tokens);
  const int64_t batch = in.batch_tokens > 0 ? in.batch_tokens : c.batch_tokens;
  const double steps = c.epochs * tokens / (kLabelShareOfBatch * static_cast<double>(batch));
  c.warmup = std::clamp<int64_t>(static_cast<int64_t>(0.05 * steps), 1, kMaxWarmup);
  char where[64];
  if (in.ranks > 1)
    std::snprintf(where, sizeof where, "%d threads of %d ranks", in.threads, in.ranks);
  else
    std::snprintf(where, sizeof where, "%d thread(s)", in.threads);
  char buf[440];
  std::snprintf(buf, sizeof buf,
                "model and schedule chosen for the data and the budget (no --preset, --config or "
                "model flag given): d_model %lld, %lld heads, %lld+%lld layers, FFN %lld (%s), "
                "dropout %g; %lld examples, %lld label tokens, about %.0f passes in %.0f s on %s",
                static_cast<long long>(c.model.d_model), static_cast<long long>(c.model.n_heads),
                static_cast<long long>(c.model.n_encoder_layers),
                static_cast<long long>(c.model.n_decoder_layers),
                static_cast<long long>(c.model.d_ff), activation_row(c.model.activation).name,
                c.model.dropout, static_cast<long long>(in.examples),
                static_cast<long long>(in.label_tokens), c.epochs, in.seconds, where);
  c.summary = buf;
  return c;
}

std::string auto_settings(const TrainOptions& o) {
  const AutoFill& f = o.auto_fill;
  std::ostringstream s;
  auto item = [&s](const char* flag, const auto& value, bool chosen) {
    s << flag << ' ' << value << (chosen ? "" : " (given)");
  };
  if (o.batch_tokens > 0)
    item("--batch-tokens", o.batch_tokens, f.batch);
  else
    item("--batch", o.batch, f.batch);
  item(", --label-smoothing", o.label_smoothing, f.label_smoothing);
  item(", --warmup", o.schedule.warmup, f.warmup);
  item(", --schedule", schedule_name(o.schedule.kind), f.schedule);
  if (f.batch || f.label_smoothing || f.warmup || f.schedule) s << " (give any of them to pin it)";
  return s.str();
}

void apply_auto(TrainOptions& o, const AutoChoice& c) {
  if (o.auto_fill.model) o.model = c.model;
  if (o.auto_fill.batch) o.batch_tokens = c.batch_tokens;
  if (o.auto_fill.label_smoothing) o.label_smoothing = c.label_smoothing;
  if (o.auto_fill.warmup) o.schedule.warmup = c.warmup;
  if (o.auto_fill.schedule) o.schedule.kind = LrSchedule::Kind::Wsd;
}

void apply_auto_record(TrainOptions& o, const nlohmann::json& run, const std::string& ckpt_path) {
  auto at = [&](const char* section, const char* key) -> const nlohmann::json& {
    if (!run.contains(section) || !run.at(section).contains(key))
      fail(ckpt_path, std::string("the run record has no ") + section + "." + key +
                          ", so the choice the run was started with is unknown: give the "
                          "model and training flags it was started with");
    return run.at(section).at(key);
  };
  try {
    if (o.auto_fill.model && run.contains("model"))
      o.model = ModelConfig::from_json(run.at("model"), /*need_vocab_size=*/false);
    if (o.auto_fill.batch) o.batch_tokens = at("optimizer", "batch_tokens").get<int64_t>();
    if (o.auto_fill.label_smoothing)
      o.label_smoothing = at("optimizer", "label_smoothing").get<double>();
    if (o.auto_fill.warmup) o.schedule.warmup = at("optimizer", "warmup").get<int64_t>();
    if (o.auto_fill.schedule)
      o.schedule.kind = parse_schedule(at("optimizer", "schedule").at("kind").get<std::string>());
  } catch (const nlohmann::json::exception& e) {
    fail(ckpt_path, std::string("invalid run record: ") + e.what());
  }
}

}  // namespace seqtape
