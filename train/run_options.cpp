#include "train/run_options.h"

#include <string_view>

#include "eval/metric_registry.h"
#include "tensor/tensor.h"
#include "train/run_dir.h"
#include "train/trainer.h"

namespace seqtape {

namespace {

using json = nlohmann::json;
constexpr bool kKept = true, kFree = false;         // on --resume
constexpr bool kAgree = true, kPerProcess = false;  // across data-parallel ranks

// Only the evaluation's decoded metrics depend on how many examples are decoded.
json decoded_examples(const RunFacts& f) {
  const std::string& m = f.opt.best_metric;
  const metrics::Metric* metric = metrics::find_metric(m);
  return !metric || metric->teacher_forced ? json() : json(f.opt.eval_max);
}

// clang-format off
const std::vector<TrainOption> kTrainOptions = {
  // What the examples are, how they are split, ordered and batched.
  {"--data", "data.data", kKept, kAgree, [](const RunFacts& f) -> json { return f.data; }},
  {"--valid", "data.valid", kKept, kAgree, [](const RunFacts& f) -> json { return f.valid; }},
  {"--vocab", "vocabulary", kKept, kAgree,
   [](const RunFacts& f) -> json { return f.vocabulary; }},
  // How text becomes tokens on each side (a resume without these flags reads the checkpoint's).
  {"--tokenizer/--src-tokenizer/--tgt-tokenizer", "tokenizer", kKept, kAgree,
   [](const RunFacts& f) -> json { return f.tokenizer.empty() ? json() : json(f.tokenizer); }},
  {"--preset/--config", "model", kKept, kAgree, [](const RunFacts& f) { return f.model; }},
  {"--seed", "data.seed", kKept, kAgree, [](const RunFacts& f) -> json { return f.opt.seed; }},
  {"--valid-fraction", "data.valid_fraction", kKept, kAgree,
   [](const RunFacts& f) -> json { return f.opt.valid_fraction; }},
  {"--valid-max", "data.valid_max", kKept, kAgree,
   [](const RunFacts& f) -> json { return f.opt.valid_max; }},
  {"--too-long", "data.too_long", kKept, kAgree,
   [](const RunFacts& f) -> json { return too_long_name(f.opt.too_long); }},
  {"--batch", "optimizer.batch", kKept, kAgree,
   [](const RunFacts& f) -> json { return f.opt.batch; }},
  {"--batch-tokens", "optimizer.batch_tokens", kKept, kAgree,
   [](const RunFacts& f) -> json { return f.opt.batch_tokens; }},
  {"--accum", "optimizer.accum", kKept, kAgree,
   [](const RunFacts& f) -> json { return f.opt.accum; }},
  // What a step does with the gradient.
  {"--optimizer", "optimizer.kind", kKept, kAgree,
   [](const RunFacts& f) -> json { return f.opt.optim.kind; }},
  {"--lr", "optimizer.lr", kKept, kAgree,
   [](const RunFacts& f) -> json { return f.opt.schedule.lr; }},
  {"--warmup", "optimizer.warmup", kKept, kAgree,
   [](const RunFacts& f) -> json { return f.opt.schedule.warmup; }},
  {"--weight-decay", "optimizer.weight_decay", kKept, kAgree,
   [](const RunFacts& f) -> json { return f.opt.optim.weight_decay; }},
  {"--clip", "optimizer.clip", kKept, kAgree,
   [](const RunFacts& f) -> json { return f.opt.clip; }},
  {"--label-smoothing", "optimizer.label_smoothing", kKept, kAgree,
   [](const RunFacts& f) -> json { return f.opt.label_smoothing; }},
  {"--schedule", "optimizer.schedule.kind", kKept, kAgree,
   [](const RunFacts& f) -> json { return schedule_name(f.opt.schedule.kind); }},
  {"--decay-fraction", "optimizer.schedule.decay_fraction", kKept, kAgree,
   [](const RunFacts& f) -> json { return f.opt.schedule.decay_fraction; }},
  {"--min-lr", "optimizer.schedule.min_lr", kKept, kAgree,
   [](const RunFacts& f) -> json { return f.opt.schedule.min_lr; }},
  // No flags: set through the library (the tests).
  {"momentum", "optimizer.momentum", kKept, kAgree,
   [](const RunFacts& f) -> json { return f.opt.optim.momentum; }},
  {"beta1", "optimizer.beta1", kKept, kAgree,
   [](const RunFacts& f) -> json { return f.opt.optim.beta1; }},
  {"beta2", "optimizer.beta2", kKept, kAgree,
   [](const RunFacts& f) -> json { return f.opt.optim.beta2; }},
  {"eps", "optimizer.eps", kKept, kAgree,
   [](const RunFacts& f) -> json { return f.opt.optim.eps; }},
  // A resume checks the saved parameters' dtype itself, naming the parameter.
  {"dtype", "", kFree, kAgree, [](const RunFacts& f) -> json { return dtype_name(f.opt.dtype); }},
  // best.bin holds the best score so far: of this metric, over these decoded examples.
  {"--best-metric", "evaluation.best_metric", kKept, kAgree,
   [](const RunFacts& f) -> json { return f.opt.best_metric; }},
  {"--eval-max", "evaluation.eval_max", kKept, kAgree, decoded_examples},
  // How long, how often to log, evaluate and save, how to compute: free on resume; the ranks
  // step, evaluate (waiting for rank 0), compare and sum buckets together, so they agree.
  {"--steps", "", kFree, kAgree, [](const RunFacts& f) -> json { return f.opt.steps; }},
  {"--epochs", "", kFree, kAgree, [](const RunFacts& f) -> json { return f.opt.epochs; }},
  {"--time-limit", "", kFree, kAgree,
   [](const RunFacts& f) -> json { return f.opt.time_limit; }},
  {"--log-every", "", kFree, kAgree, [](const RunFacts& f) -> json { return f.opt.log_every; }},
  {"--eval-every", "", kFree, kAgree,
   [](const RunFacts& f) -> json { return f.opt.eval_every; }},
  {"--save-every", "", kFree, kAgree,
   [](const RunFacts& f) -> json { return f.opt.save_every; }},
  {"--keep-last", "", kFree, kAgree, [](const RunFacts& f) -> json { return f.opt.keep_last; }},
  {"--average-last", "", kFree, kAgree,
   [](const RunFacts& f) -> json { return f.opt.average_last; }},
  {"--patience", "", kFree, kAgree, [](const RunFacts& f) -> json { return f.opt.patience; }},
  {"--matmul", "", kFree, kAgree,
   [](const RunFacts& f) -> json { return kernels::matmul_backend_name(f.opt.matmul); }},
  {"--precision", "", kFree, kAgree,
   [](const RunFacts& f) -> json { return kernels::precision_name(f.opt.precision); }},
  {"--bucket-mb", "", kFree, kAgree,
   [](const RunFacts& f) -> json { return static_cast<double>(f.opt.bucket_bytes) / 1048576; }},
  {"--no-overlap", "", kFree, kAgree, [](const RunFacts& f) -> json { return !f.opt.overlap; }},
  {"--check-sync", "", kFree, kAgree,
   [](const RunFacts& f) -> json { return f.opt.check_sync; }},
  {"--resume", "", kFree, kAgree, [](const RunFacts& f) -> json { return f.opt.resume; }},
  {"--overwrite", "", kFree, kAgree, [](const RunFacts& f) -> json { return f.opt.overwrite; }},
  // Each process's own: rank 0 alone writes the run; the others' terminals and cores.
  {"--out", "", kFree, kPerProcess, nullptr},
  {"--threads", "", kFree, kPerProcess, nullptr},
  {"--ranks", "", kFree, kPerProcess, nullptr},
  {"--no-progress", "", kFree, kPerProcess, nullptr},
  {"--anomaly", "", kFree, kPerProcess, nullptr},
  {"--profile", "", kFree, kPerProcess, nullptr},
  {"--collective-timeout", "", kFree, kPerProcess, nullptr},
};
// clang-format on

}  // namespace

const std::vector<TrainOption>& train_options() {
  return kTrainOptions;
}

json option_values(const TrainOptions& opt, const json& model, const std::string& vocab_fingerprint,
                   const std::string& tokenizer) {
  const RunFacts facts{opt,
                       model,
                       vocab_fingerprint,
                       tokenizer,
                       file_fingerprint(opt.data),
                       opt.valid_data.empty() ? "" : file_fingerprint(opt.valid_data)};
  json values = json::object();
  for (const TrainOption& row : train_options())
    if (row.value) values[row.flags] = row.value(facts);
  return values;
}

namespace {

// The value at "section.name" (or "name"), or nullptr.
const json* at_key(const json& record, std::string_view key) {
  const json* j = &record;
  while (!key.empty()) {
    const size_t dot = key.find('.');
    const std::string part(key.substr(0, dot));
    if (!j->is_object() || !j->contains(part)) return nullptr;
    j = &j->at(part);
    key = dot == std::string_view::npos ? std::string_view() : key.substr(dot + 1);
  }
  return j;
}

struct Difference {
  std::string option;
  json was, now;
};

// How a model field is named: by the flag that sets it, and by its key in --config.
std::string model_field(const std::string& key) {
  const ConfigField* f = find_config_field(key);
  if (f && *f->flag != '\0') return std::string(f->flag) + " (model " + key + ")";
  return "model " + key + " (in --config)";
}

// The model's differences field by field (a field the earlier value lacks was added to the
// configuration after it was written: not compared); any other option's as a whole.
void add_differences(const TrainOption& row, const json& was, const json& now,
                     std::vector<Difference>& out) {
  if (std::string_view(row.key) == "model" && was.is_object() && now.is_object()) {
    for (const auto& [k, v] : now.items())
      if (was.contains(k) && was.at(k) != v) out.push_back({model_field(k), was.at(k), v});
    return;
  }
  if (was != now) out.push_back({row.flags, was, now});
}

std::string joined(const std::vector<std::string>& parts, const char* sep) {
  std::string s;
  for (const std::string& p : parts) s += (s.empty() ? "" : sep) + p;
  return s;
}

// The options that may change on resume, for the message that refuses one that may not.
std::string free_flags() {
  std::vector<std::string> f;
  for (const TrainOption& row : train_options()) {
    const std::string_view flags = row.flags;
    if (!row.kept_on_resume && flags.starts_with("--") && flags != "--out" && flags != "--resume" &&
        flags != "--overwrite")
      f.emplace_back(flags);
  }
  return joined(f, ", ");
}

}  // namespace

json run_record(const json& values) {
  json record = json::object();
  for (const TrainOption& row : train_options()) {
    if (!row.kept_on_resume) continue;
    json* j = &record;
    for (std::string_view key = row.key;;) {
      const size_t dot = key.find('.');
      j = &(*j)[std::string(key.substr(0, dot))];
      if (dot == std::string_view::npos) break;
      key = key.substr(dot + 1);
    }
    *j = values.at(row.flags);
  }
  return record;
}

void check_resume(const json& stored, const json& values, const std::string& ckpt_path) {
  if (!stored.is_object() || !stored.contains("run")) return;  // written before records existed
  std::vector<Difference> d;
  for (const TrainOption& row : train_options()) {
    if (!row.kept_on_resume) continue;
    // An option this record lacks was recorded only by later versions: not compared.
    if (const json* was = at_key(stored.at("run"), row.key))
      add_differences(row, *was, values.at(row.flags), d);
  }
  if (d.empty()) return;
  std::vector<std::string> named;
  for (const Difference& x : d)
    named.push_back(x.option + " was " + x.was.dump() + ", now " + x.now.dump());
  fail(ckpt_path,
       "--resume with different options or data than the run was started with (" +
           std::to_string(d.size()) + " difference" + (d.size() > 1 ? "s" : "") +
           "): " + joined(named, "; ") +
           " (files are compared by the XXH3-64 of their contents). A resumed run keeps the "
           "data, the batches and the optimizer it was started with; only " +
           free_flags() +
           " may change. Give the run's original values, or start a new run with another --out");
}

json rank_record(const json& values) {
  json record = json::object();
  for (const TrainOption& row : train_options())
    if (row.ranks_agree && row.value) record[row.flags] = values.at(row.flags);
  return record;
}

std::string rank_differences(const json& lead_record, const json& values) {
  std::vector<Difference> d;
  for (const TrainOption& row : train_options()) {
    if (!row.ranks_agree || !row.value) continue;
    const json lead = lead_record.contains(row.flags) ? lead_record.at(row.flags) : json();
    add_differences(row, lead, values.at(row.flags), d);
  }
  std::vector<std::string> named;
  for (const Difference& x : d)
    named.push_back(x.option + " " + x.now.dump() + " (rank 0: " + x.was.dump() + ")");
  return joined(named, ", ");
}

std::string per_process_flags() {
  std::vector<std::string> f;
  for (const TrainOption& row : train_options())
    if (!row.ranks_agree) f.emplace_back(row.flags);
  return joined(f, ", ");
}

}  // namespace seqtape
