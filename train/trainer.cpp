// The training loop, read top-down: train() sets a run up (start_run), then repeats
// train_step → log → [evaluate] → [save] and ends with a save and an evaluation.
#include "train/trainer.h"

#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <system_error>
#include <thread>

#include "eval/metric_registry.h"
#include "io/checkpoint.h"
#include "io/envelope.h"
#include "io/weights.h"
#include "model/memory_budget.h"
#include "tensor/kernels.h"
#include "tensor/profile.h"
#include "text/subword.h"
#include "text/text_codec.h"
#include "train/flat_params.h"
#include "train/model_io.h"
#include "train/run_dir.h"
#include "train/run_options.h"
#include "train/signals.h"
#include "train/training_log.h"

namespace seqtape {

namespace fs = std::filesystem;

namespace {

// Everything the step loop changes and a checkpoint saves, with what it was built from.
struct Run {
  std::shared_ptr<Communicator> comm;    // the ranks (one without mpirun)
  bool lead = true;                      // rank 0: writes files, logs and evaluates
  std::unique_ptr<GradReducer> reducer;  // more than one rank
  std::string ckpt_path;
  bool resuming = false;
  Checkpoint resumed;  // when resuming
  Vocab vocab;
  std::shared_ptr<const TextCodec> codec;  // encodes the data; its vocabulary is `vocab`
  ModelConfig cfg;
  TextSplit split;
  bool valid_is_train = false;
  std::unique_ptr<DataLoader> loader;
  std::unique_ptr<TransformerModel> model;
  NamedParams params;
  std::unique_ptr<FlatParams> flat;  // the parameters' values and gradients, one buffer each
  OptimizerConfig ocfg;
  std::unique_ptr<Optimizer> optimizer;
  Rng rng;  // dropout
  int64_t step = 0, total_steps = 0;
  bool until_time_limit = false;  // no --steps or --epochs: total_steps is kMaxSteps
  int64_t last_saved = -1;
  std::string data_report;  // the data summary and what --too-long did, for the log
  nlohmann::json options;   // option_values(): every compared option (train/run_options.h)
  nlohmann::json record;    // run_record(options): the options a resume keeps, in checkpoints
  // The best evaluation so far by --best-metric, and evaluations since it improved.
  double best_value = 0;
  int64_t best_step = -1, bad_evals = 0;
  // Training time: before this process (the checkpoint's, when resuming) and since the step loop
  // started; --time-limit and the budget schedules count both.
  double seconds_before = 0;
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  double last_step_seconds = 0;
  // Only a run under --time-limit keeps its training time in its checkpoints: the others'
  // checkpoints stay the same bytes on every run of the same options.
  bool keeps_seconds = false;
  double fraction = 0;  // of the budget, at the latest step (budget_fraction)
};

double run_seconds(const Run& run) {
  return run.seconds_before +
         std::chrono::duration<double>(std::chrono::steady_clock::now() - run.started).count();
}

// How much of the run's budget is used when the coming step ends: of the steps when the run has
// a step total (deterministic, whatever --time-limit says), else of the --time-limit, predicting
// the step's end from the previous step's duration so that the last step lands on the floor
// (never less than at the step before, which a short step after a long one would predict).
double budget_fraction(Run& run, const TrainOptions& opt, int64_t step) {
  if (!opt.schedule.uses_budget()) return 0;
  if (run.until_time_limit) {
    double f = std::min(1.0, (run_seconds(run) + run.last_step_seconds) / opt.time_limit);
    if (run.comm->size() > 1) {  // every rank steps with rank 0's learning rate
      if (!run.lead) f = 0;
      run.comm->sum(&f, 1, "agreeing on the learning rate");
    }
    return run.fraction = std::max(run.fraction, f);
  }
  if (run.total_steps <= 1) return 1.0;
  return static_cast<double>(step - 1) / static_cast<double>(run.total_steps - 1);
}

nlohmann::json loader_state_json(const LoaderState& s) {
  nlohmann::json j = {
      {"epoch", s.epoch}, {"cursor", s.cursor}, {"order", s.order}, {"rng", s.rng_state}};
  if (!s.bounds.empty()) j["bounds"] = s.bounds;  // token-budget batches
  return j;
}

LoaderState loader_state_from(const std::string& text, const std::string& where) {
  try {
    auto j = nlohmann::json::parse(text);
    LoaderState s;
    s.epoch = j.at("epoch").get<uint64_t>();
    s.cursor = j.at("cursor").get<uint64_t>();
    s.order = j.at("order").get<std::vector<uint32_t>>();
    s.rng_state = j.at("rng").get<std::string>();
    if (j.contains("bounds")) s.bounds = j.at("bounds").get<std::vector<uint32_t>>();
    return s;
  } catch (const nlohmann::json::exception& e) {
    fail(where, std::string("invalid data-loader state: ") + e.what());
  }
}

// ---- setting a run up -----------------------------------------------------------------------

// Tokens in the longest example, as far as the budget check needs it: its UTF-8 bytes (at least
// its characters) plus the specials, at most max_positions.
int64_t longest_example(const std::vector<TextPair>& pairs, const ModelConfig& cfg) {
  size_t longest = 0;
  for (const TextPair& p : pairs) longest = std::max(longest, p.source.size() + p.target.size());
  return std::min<int64_t>(cfg.max_positions, static_cast<int64_t>(longest) + 3);
}

// Vocabulary and configuration: from the checkpoint when resuming, else from the options.
// The tokenizer the options name: a `seqtape vocab` directory (a joint SentencePiece model,
// text/subword.h), or characters or words per side over a vocabulary file or the data's.
std::shared_ptr<const TextCodec> codec_from_options(const TrainOptions& opt,
                                                    const std::vector<TextPair>& pairs) {
  const bool spm_dir = !opt.vocab.empty() && fs::is_directory(opt.vocab);
  for (const auto& [flag, side] : {std::pair{"--src-tokenizer", &opt.src_tokenizer},
                                   std::pair{"--tgt-tokenizer", &opt.tgt_tokenizer}}) {
    if (spm_dir && !side->empty() && *side != "spm")
      fail(opt.vocab, std::string("is a SentencePiece vocabulary (seqtape vocab), which reads both "
                                  "sides, but ") +
                          flag + " is " + *side);
    if (!spm_dir && *side == "spm")
      fail(std::string(flag),
           "spm needs --vocab DIR written by seqtape vocab (a SentencePiece model for both "
           "sides)" +
               (opt.vocab.empty() ? std::string() : "; " + opt.vocab + " is a file"));
  }
  if (spm_dir) {
    const SubwordVocabs sv = load_subword_dir(opt.vocab);
    if (!sv.joint())
      fail(opt.vocab,
           "holds separate source and target vocabularies (vocab --separate), but the model "
           "shares one embedding between source and target: write a joint vocabulary "
           "(seqtape vocab without --separate)");
    return sv.source;
  }
  const std::string kind = sided_kind(opt.src_tokenizer.empty() ? kCharsCodec : opt.src_tokenizer,
                                      opt.tgt_tokenizer.empty() ? kCharsCodec : opt.tgt_tokenizer);
  if (kind == kCharsCodec)
    return std::make_shared<const CharCodec>(opt.vocab.empty() ? build_vocab(pairs)
                                                               : Vocab::load(opt.vocab));
  if (!opt.vocab.empty()) return codec_from_parts(kind, Vocab::load(opt.vocab), "", opt.vocab);
  std::vector<std::string> sources, targets;
  for (const TextPair& p : pairs) sources.push_back(p.source), targets.push_back(p.target);
  const size_t slash = kind.find('/');
  const std::string src = kind.substr(0, slash);
  const std::string tgt = slash == std::string::npos ? src : kind.substr(slash + 1);
  return codec_from_parts(kind, build_sided_vocab(src, sources, tgt, targets), "", opt.data);
}

void choose_vocab_and_config(const TrainOptions& opt, const std::vector<TextPair>& pairs,
                             Run& run) {
  if (run.resuming) {
    run.vocab = Vocab::from_tokens(run.resumed.vocab, run.ckpt_path);
    run.codec = codec_from_parts(run.resumed.tokenizer_kind, run.vocab, run.resumed.tokenizer_model,
                                 run.ckpt_path);
    run.cfg = checkpoint_config(run.resumed, run.ckpt_path);
  } else {
    run.codec = codec_from_options(opt, pairs);
    run.vocab = run.codec->vocab();
    run.cfg = opt.model;
    if (opt.model_vocab_size_given && run.cfg.vocab_size != static_cast<int64_t>(run.vocab.size()))
      fail("train", "the configuration's vocab_size " + std::to_string(run.cfg.vocab_size) +
                        " differs from the vocabulary's " + std::to_string(run.vocab.size()) +
                        " tokens (leave vocab_size out to take it from the vocabulary)");
    run.cfg.vocab_size = static_cast<int64_t>(run.vocab.size());
  }
  run.cfg.validate();
  if (run.cfg.vocab_size != static_cast<int64_t>(run.vocab.size()))
    fail("train", "the configuration's vocab_size " + std::to_string(run.cfg.vocab_size) +
                      " differs from the vocabulary's " + std::to_string(run.vocab.size()) +
                      " tokens");
}

// What the run is started with, checked against the checkpoint's record on --resume: the
// vocabulary and model the options give now (not the checkpoint's), so a change is named.
void record_run(const TrainOptions& opt, const std::vector<TextPair>& pairs, Run& run) {
  // Resuming without --vocab takes the checkpoint's tokenizer (the data's fingerprint still
  // guards the data); a --vocab given on resume must be the run's own.
  const bool chosen =
      !opt.vocab.empty() || !opt.src_tokenizer.empty() || !opt.tgt_tokenizer.empty();
  const std::shared_ptr<const TextCodec> now =
      !run.resuming || !chosen ? run.codec : codec_from_options(opt, pairs);
  const Vocab& now_vocab = now->vocab();
  ModelConfig now_cfg = run.resuming ? opt.model : run.cfg;
  now_cfg.vocab_size = static_cast<int64_t>(now_vocab.size());
  std::string tokens;
  for (const std::string& t : now_vocab.tokens()) tokens += t + "\n";
  run.options = option_values(opt, now_cfg.to_json(/*unset_as_null=*/true),
                              text_fingerprint(tokens), std::string(now->kind()));
  run.record = run_record(run.options);
}

// --valid, or a seeded hold-out of --data; with too little data, validation on the training set.
void split_data(const TrainOptions& opt, std::vector<TextPair> pairs, Run& run) {
  if (!opt.valid_data.empty()) {
    run.split.train = std::move(pairs);
    run.split.valid = read_tsv(opt.valid_data);
    group_sources(run.split.valid, opt.valid_data, true);  // before training, not at the first eval
    return;
  }
  const auto n = static_cast<int64_t>(pairs.size());
  const int64_t n_valid = std::min<int64_t>(
      opt.valid_max, static_cast<int64_t>(std::floor(opt.valid_fraction * static_cast<double>(n))));
  if (n_valid < 1 || n - n_valid < 1) {
    run.split.train = pairs;
    run.split.valid = std::move(pairs);  // nothing to hold out (e.g. the reference sentence)
    run.valid_is_train = true;
  } else {
    run.split = split_validation_count(pairs, static_cast<size_t>(n_valid), opt.seed);
  }
}

// Every example of the training and validation data against max_positions (--too-long), and
// the data summary for the log.
void check_data(const TrainOptions& opt, Run& run, EncodedPairs& train_data) {
  const int64_t P = run.cfg.max_positions;
  auto note = [&](const LengthCheck& c, const std::string& name) {
    if (c.too_long == 0) return;
    run.data_report += name + ": " + std::to_string(c.too_long) +
                       " examples longer than max_positions " + std::to_string(P) +
                       " (first: " + c.first.front() + "): " + std::to_string(c.skipped) +
                       " skipped, " + std::to_string(c.truncated) + " truncated\n";
  };
  note(check_lengths(train_data, run.split.train, P, opt.too_long, opt.data), opt.data);
  if (train_data.size() == 0)
    fail(opt.data, "no training example is left after --too-long " +
                       std::string(too_long_name(opt.too_long)));
  const std::string valid_name = opt.valid_data.empty() ? opt.data : opt.valid_data;
  EncodedPairs valid = encode_pairs(run.cfg.arch, *run.codec, run.split.valid, valid_name);
  note(
      check_lengths(valid, run.split.valid, P,
                    opt.too_long == TooLong::kTruncate ? TooLong::kSkip : opt.too_long, valid_name),
      valid_name + " (validation)");
  const std::optional<int32_t> unk = run.vocab.unk_id();
  run.data_report += format_summary(summarize(train_data, unk), "training");
  run.data_report += format_summary(summarize(valid, unk), "validation");
}

void make_loader(const TrainOptions& opt, Run& run) {
  LoaderOptions lopt;
  lopt.batch_size = opt.batch;
  lopt.batch_tokens = opt.batch_tokens;
  lopt.seed = opt.seed;
  EncodedPairs data = encode_pairs(run.cfg.arch, *run.codec, run.split.train, opt.data);
  check_data(opt, run, data);
  run.loader = std::make_unique<DataLoader>(std::move(data), run.vocab.pad_id(), lopt);
  run.total_steps = opt.steps;
  run.keeps_seconds = opt.time_limit > 0;
  if (run.total_steps <= 0 && opt.epochs <= 0 && opt.time_limit > 0) {
    run.total_steps = TrainOptions::kMaxSteps;  // until the time limit
    run.until_time_limit = true;
  } else if (run.total_steps <= 0) {
    if (opt.epochs <= 0) fail("train", "give --steps, --epochs or --time-limit");
    run.total_steps = static_cast<int64_t>(
        std::ceil(opt.epochs * static_cast<double>(run.loader->batches_per_epoch()) /
                  static_cast<double>(std::max<int64_t>(1, opt.accum))));
  }
}

void make_model_and_optimizer(const TrainOptions& opt, Run& run) {
  run.model = make_model(run.cfg, opt.dtype);
  run.model->set_training(true);
  run.params = run.model->named_parameters();
  run.flat = std::make_unique<FlatParams>(run.params);
  run.ocfg = opt.optim;
  if (run.resuming) run.ocfg.kind = find_optimizer(run.resumed.optimizer_name).name;
  run.optimizer = make_optimizer(run.params, run.ocfg);
  run.rng = Rng(opt.seed ^ 0x5eedull);
}

// Refuses a resume whose options or data differ from the record in the checkpoint, naming
// each difference; restores the best-checkpoint bookkeeping.
void check_resumed_record(Run& run) {
  nlohmann::json stored;
  try {
    stored = nlohmann::json::parse(run.resumed.metrics_json);
  } catch (const nlohmann::json::exception& e) {
    fail(run.ckpt_path, std::string("invalid run record: ") + e.what());
  }
  check_resume(stored, run.options, run.ckpt_path);
  if (stored.contains("best")) {
    const auto& b = stored.at("best");
    run.best_value = b.value("value", 0.0);
    run.best_step = b.value("step", int64_t{-1});
    run.bad_evals = b.value("bad_evals", int64_t{0});
  }
  // Checkpoints written before the time was kept resume with a fresh --time-limit, as they did.
  run.seconds_before = stored.value("seconds", 0.0);
}

// `seqtape average` writes the mean of several checkpoints' weights with a record naming them
// and no optimizer state: it decodes, but it cannot continue a run (the optimizer would
// otherwise be refused with only a count of its tensors).
void refuse_averaged(const Run& run) {
  const nlohmann::json m = nlohmann::json::parse(run.resumed.metrics_json, nullptr, false);
  if (!m.is_object() || !m.contains("averaged_from")) return;
  fail(run.ckpt_path, "was written by seqtape average (the mean of " +
                          std::to_string(m.at("averaged_from").size()) +
                          " checkpoints) and holds no optimizer state, so it cannot be resumed: "
                          "resume from one of the run's own checkpoints, or give the average to "
                          "generate, eval or export (or train a new run in another --out)");
}

// The values o.auto_fill leaves open: on --resume the run's own, from its checkpoint's record
// (whatever the time limit is now); otherwise chosen from the training data's label tokens and
// the time limit (bf16: the products run in bfloat16) on world_threads, the threads of every
// rank together: each rank counts at least as much as a thread of one process
// (docs/performance.md).
void fill_auto(TrainOptions& o, bool bf16, int world_threads, std::ostream& log) {
  if (!o.auto_fill.any()) return;
  const std::string ckpt = (fs::path(o.out_dir) / "checkpoint.bin").string();
  if (o.resume && fs::exists(ckpt)) {
    const nlohmann::json m =
        nlohmann::json::parse(load_checkpoint(ckpt).metrics_json, nullptr, false);
    if (m.is_object() && m.contains("run")) apply_auto_record(o, m.at("run"), ckpt);
    return;
  }
  const std::vector<TextPair> pairs = read_tsv(o.data);
  const std::shared_ptr<const TextCodec> codec = codec_from_options(o, pairs);
  AutoInput in;
  in.examples = static_cast<int64_t>(pairs.size());
  for (const TextPair& p : pairs)  // each target and its end marker
    in.label_tokens += static_cast<int64_t>(codec->encode_target(p.target, o.data).size()) + 1;
  in.seconds = o.time_limit;
  in.threads = world_threads;
  in.ranks = o.comm->size();
  in.bf16 = bf16;
  if (!o.auto_fill.batch) in.batch_tokens = o.batch_tokens;
  const AutoChoice c = choose_auto(in);
  apply_auto(o, c);
  log << c.summary << "; " << auto_settings(o) << "\n";
}

// Weights, optimizer, dropout generator, data order and step from the checkpoint.
void resume(Run& run, std::ostream& log) {
  const Checkpoint& c = run.resumed;
  refuse_averaged(run);
  // A run resumes in the precision it was saved in (bit-identical continuation), never converted.
  const DType want = run.params.front().second.dtype();
  for (const NamedTensor& t : c.params)
    if (t.value.dtype() != want)
      fail(run.ckpt_path, "parameter '" + t.name + "' " + shape_str(t.value.shape()) + " is " +
                              dtype_name(t.value.dtype()) + ", the model being resumed is " +
                              dtype_name(want) +
                              ": a run resumes in the precision it was saved in");
  load_params_into(*run.model, c.params, run.ckpt_path);
  check_finite(c.optimizer_state, run.ckpt_path, "optimizer state");
  run.optimizer->load_state(c.optimizer_state, c.step);
  try {
    run.rng.set_state(c.rng_state);
  } catch (const std::exception&) {
    fail(run.ckpt_path, "invalid random-generator state (rng_state); the checkpoint cannot resume");
  }
  // The checkpoint is intact; now the options and data must be the run's own.
  check_resumed_record(run);
  try {
    run.loader->set_state(loader_state_from(c.loader_state_json, run.ckpt_path));
  } catch (const Error& e) {
    fail(run.ckpt_path,
         std::string("cannot resume on this data (resume needs the same --data, --valid, --seed, "
                     "--too-long, --batch and --batch-tokens as the run that wrote it): ") +
             e.what());
  }
  run.step = run.last_saved = c.step;
  if (run.step >= run.total_steps)
    log << "checkpoint is at step " << run.step << ", not before --steps " << run.total_steps
        << ": nothing to train\n";
}

// The checkpoint to resume from. With several ranks rank 0 reads it and sends its bytes to the
// others, so that only rank 0 needs the run directory.
void load_resumed(const TrainOptions& opt, Run& run) {
  if (run.comm->size() == 1) {
    run.resuming = opt.resume && fs::exists(run.ckpt_path);
    if (opt.resume && !run.resuming) fail("train", "--resume: no checkpoint at " + run.ckpt_path);
    if (run.resuming) run.resumed = load_checkpoint(run.ckpt_path);
    return;
  }
  std::string bytes;
  if (run.lead && opt.resume) {
    if (!fs::exists(run.ckpt_path)) fail("train", "--resume: no checkpoint at " + run.ckpt_path);
    bytes = read_user_file(run.ckpt_path, "checkpoint", uint64_t{1} << 40);
  }
  run.comm->broadcast(bytes, 0, "sending the checkpoint to every rank");
  run.resuming = !bytes.empty();
  if (run.resuming) run.resumed = load_checkpoint_from_memory(bytes, run.ckpt_path);
}

// XXH3-64 of every parameter's bytes.
uint64_t params_checksum(const NamedParams& params) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  for (const auto& np : params)
    XXH3_64bits_update(st, np.second.value().raw(), np.second.value().nbytes());
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return h;
}

// The ranks whose value differs from rank 0's, as "rank 1 (…), rank 3 (…)"; "" when all agree.
std::string ranks_differing(const std::vector<uint64_t>& all) {
  std::string out;
  char buf[64];
  for (size_t r = 1; r < all.size(); ++r) {
    if (all[r] == all[0]) continue;
    std::snprintf(buf, sizeof buf, "%srank %zu (%016llx)", out.empty() ? "" : ", ", r,
                  static_cast<unsigned long long>(all[r]));
    out += buf;
  }
  if (out.empty()) return out;
  std::snprintf(buf, sizeof buf, " against rank 0's %016llx",
                static_cast<unsigned long long>(all[0]));
  return out + buf;
}

// Before the first step: every rank must have been started with the options rank 0 was (the
// agreed rows of train/run_options.h, data files by content) and hold the same parameters. Rank
// 0 sends its options; each rank that differs sends rank 0 and the others what differs, so that
// every rank stops with the same message naming each option and both values.
void check_ranks_agree(Run& run) {
  Communicator& comm = *run.comm;
  const std::string what = "comparing the ranks' options";
  std::string lead = rank_record(run.options).dump();
  comm.broadcast(lead, 0, what);
  const std::string mine = rank_differences(nlohmann::json::parse(lead), run.options);
  const std::vector<uint64_t> differs = comm.allgather(mine.empty() ? 0 : 1, what);
  std::string all;
  for (int r = 1; r < comm.size(); ++r) {
    if (differs[static_cast<size_t>(r)] == 0) continue;
    std::string theirs = r == comm.rank() ? mine : "";
    comm.broadcast(theirs, r, what);
    all += (all.empty() ? "" : "; ") + ("rank " + std::to_string(r) + " has " + theirs);
  }
  if (!all.empty())
    fail("train", "the ranks were started with different options or data: " + all +
                      " (files are compared by the XXH3-64 of their contents). Start every rank "
                      "with the same options and files; only " +
                      per_process_flags() + " may differ");
  const std::string pdiff = ranks_differing(
      comm.allgather(params_checksum(run.params), "comparing the ranks' parameters"));
  if (!pdiff.empty()) fail("train", "the initial parameters of " + pdiff + " differ");
}

Run start_run(const TrainOptions& opt, std::ostream& log) {
  Run run;
  run.comm = opt.comm;  // train() sets it: the ranks, or single_process()
  run.lead = run.comm->rank() == 0;
  run.ckpt_path = (fs::path(opt.out_dir) / "checkpoint.bin").string();
  if (run.lead) remove_stale_temp_files(run.ckpt_path);
  load_resumed(opt, run);
  std::vector<TextPair> pairs = read_tsv(opt.data);
  choose_vocab_and_config(opt, pairs, run);
  record_run(opt, pairs, run);
  split_data(opt, std::move(pairs), run);
  const OptimizerKind& kind =
      find_optimizer(run.resuming ? run.resumed.optimizer_name : opt.optim.kind);
  check_memory_budget(training_memory(run.cfg, opt.batch, longest_example(run.split.train, run.cfg),
                                      kind.state_tensors * dtype_size(opt.dtype), kind.state_noun),
                      "train");
  make_loader(opt, run);
  make_model_and_optimizer(opt, run);
  if (run.resuming) resume(run, log);
  if (run.comm->size() > 1) {
    // Dropout masks: rank 0 keeps the run's generator (saved in checkpoints); the others draw
    // from their own, seeded anew at every step (rank_rng), which a resume therefore repeats.
    check_ranks_agree(run);
    run.reducer =
        std::make_unique<GradReducer>(run.params, *run.comm, opt.bucket_bytes, opt.overlap);
    run.reducer->set_verify(opt.verify_buckets);
  }
  return run;
}

// The run's first files. With --overwrite the replaced run's files go first, and only now that
// the new run is set up: a run refused for its options or data leaves the old one as it was.
void write_run_files(const TrainOptions& opt, const Run& run, std::ostream& log) {
  if (opt.overwrite) {
    const std::vector<std::string> removed = remove_replaced_run(opt.out_dir);
    for (size_t i = 0; i < removed.size(); ++i)
      log << (i ? ", " : "--overwrite: removed the replaced run's ") << removed[i];
    if (!removed.empty()) log << "\n";
  }
  const fs::path dir(opt.out_dir);
  const std::string config = run.cfg.to_json().dump(2) + "\n";
  write_file_atomic((dir / "config.json").string(), {config});
  run.vocab.save((dir / "vocab.txt").string());  // checked: an Error names it
  if (run.codec->kind() == kSentencePieceCodec)
    write_file_atomic((dir / kJointModelFile).string(),
                      {std::string_view(run.codec->model_bytes())});
}

void log_summary(const TrainOptions& opt, const Run& run, std::ostream& log) {
  const ModelConfig& cfg = run.cfg;
  log << "model: " << (cfg.arch == Arch::DecoderOnly ? "decoder-only" : "encoder-decoder")
      << ", d_model " << cfg.d_model << ", heads " << cfg.n_heads << ", layers "
      << cfg.n_encoder_layers << "+" << cfg.n_decoder_layers << ", " << run.model->num_parameters()
      << " parameters; vocabulary " << run.vocab.size() << " tokens ("
      << (run.codec->kind() == kSentencePieceCodec ? "SentencePiece"
          : run.codec->kind() == kCharsCodec       ? "characters"
                                                   : std::string(run.codec->kind()))
      << ")\n";
  log << "data: " << run.split.train.size() << " training examples, " << run.split.valid.size()
      << " validation"
      << (!run.valid_is_train ? ""
          : opt.valid_max == 0
              ? " (--valid-max 0 holds nothing out: validating on the training set)"
              : " (too few examples to hold any out: validating on the training set)")
      << "; "
      << (run.until_time_limit ? "steps until the time limit"
                               : std::to_string(run.total_steps) + " steps")
      << " of "
      << (opt.batch_tokens > 0 ? "about " + std::to_string(opt.batch_tokens) + " tokens"
                               : "batch " + std::to_string(opt.batch))
      << (opt.accum > 1 ? " x " + std::to_string(opt.accum) + " accumulated" : "") << ", optimizer "
      << run.ocfg.kind << ", lr " << opt.schedule.lr
      << (run.resuming ? ", resumed at step " + std::to_string(run.step) : "") << "\n";
  if (run.comm->size() > 1)
    log << "data-parallel: " << run.comm->size() << " ranks (" << run.comm->describe()
        << "), each global batch split into " << run.comm->size() << " shards; gradients summed in "
        << run.reducer->stats().buckets << " buckets of up to " << opt.bucket_bytes / 1024 << " KiB"
        << (opt.overlap ? ", started during backward" : ", after backward")
        << (opt.check_sync > 0
                ? "; parameters compared every " + std::to_string(opt.check_sync) + " steps"
                : "")
        << "\n";
  log << run.data_report;
}

// ---- the step loop ----------------------------------------------------------------------------

// How the messages name the checkpoint that a failure leaves in place.
std::string last_good(const Run& run) {
  return run.last_saved >= 0 ? run.ckpt_path + " (step " + std::to_string(run.last_saved) + ")"
                             : std::string("(none yet)");
}

[[noreturn]] void stop_at(int64_t step, const std::string& problem, const std::string& outcome,
                          const Run& run, bool suggest_anomaly) {
  fail("step " + std::to_string(step),
       problem + "; " + outcome + ", training stopped; the last good checkpoint " + last_good(run) +
           " is intact" +
           (suggest_anomaly ? " (rerun with --anomaly to name the first op that went non-finite)"
                            : ""));
}

Checkpoint checkpoint_of(const Run& run) {
  Checkpoint c;
  c.config_json = run.cfg.to_json().dump();
  c.vocab = run.vocab.tokens();
  c.params = named_tensors(*run.model);
  c.optimizer_name = run.ocfg.kind;
  c.optimizer_state = run.optimizer->state();
  c.step = run.step;
  c.rng_state = run.rng.state();
  c.loader_state_json = loader_state_json(run.loader->state()).dump();
  c.tokenizer_kind = std::string(run.codec->kind());
  c.tokenizer_model = run.codec->model_bytes();
  nlohmann::json m = {{"run", run.record}};
  if (run.keeps_seconds) m["seconds"] = run_seconds(run);
  if (run.best_step >= 0)
    m["best"] = {{"value", run.best_value}, {"step", run.best_step}, {"bad_evals", run.bad_evals}};
  c.metrics_json = m.dump();
  return c;
}

// Saves the run at its current step, or stops training with a message naming the last good
// checkpoint. A weight can go NaN/Inf without the loss noticing (ReLU maps NaN to 0): such a
// model must not replace the last good checkpoint.
void save_to(const Run& run, const std::string& path) {
  for (const auto& [n, p] : run.params) {
    try {
      check_finite(p.value(), n, path);
    } catch (const Error& e) {
      stop_at(run.step, e.what(), "not saved", run, true);
    }
  }
  try {
    save_checkpoint(path, checkpoint_of(run));
  } catch (const Error& e) {
    fail("step " + std::to_string(run.step),
         std::string("saving the checkpoint failed: ") + e.what() +
             "; training stopped; the last good checkpoint " + last_good(run) + " is intact");
  }
}

// The checkpoint-STEP.bin files in `dir`, oldest first.
std::vector<std::pair<int64_t, fs::path>> step_checkpoints(const fs::path& dir) {
  std::vector<std::pair<int64_t, fs::path>> found;
  std::error_code ec;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator();
       it.increment(ec))
    if (const int64_t step = periodic_checkpoint_step(it->path().filename().string()); step >= 0)
      found.emplace_back(step, it->path());
  std::sort(found.begin(), found.end());
  return found;
}

// checkpoint-STEP.bin beside checkpoint.bin, keeping the newest `keep` of them.
void keep_last_checkpoints(const Run& run, int64_t keep) {
  const fs::path dir = fs::path(run.ckpt_path).parent_path();
  save_to(run, (dir / ("checkpoint-" + std::to_string(run.step) + ".bin")).string());
  const std::vector<std::pair<int64_t, fs::path>> found = step_checkpoints(dir);
  for (size_t i = 0; i + static_cast<size_t>(keep) < found.size(); ++i) {
    std::error_code rm;
    fs::remove(found[i].second, rm);
  }
}

void save_or_fail(Run& run, const TrainOptions& opt) {
  save_to(run, run.ckpt_path);
  run.last_saved = run.step;
  const int64_t keep = std::max(opt.keep_last, opt.average_last);
  if (keep > 0) keep_last_checkpoints(run, keep);
}

// average.bin: the mean of the newest --average-last step checkpoints; returns its path.
std::string write_average(const Run& run, const TrainOptions& opt, std::ostream& log) {
  const fs::path dir = fs::path(run.ckpt_path).parent_path();
  const std::vector<std::pair<int64_t, fs::path>> found = step_checkpoints(dir);
  if (found.empty()) return "";  // resumed at its end by a run without --average-last
  std::vector<std::string> paths;
  for (size_t i = found.size() - std::min(found.size(), static_cast<size_t>(opt.average_last));
       i < found.size(); ++i)
    paths.push_back(found[i].second.string());
  const std::string out = (dir / "average.bin").string();
  save_checkpoint(out, average_checkpoints(paths));
  log << "wrote " << out << ": the mean of " << paths.size() << " checkpoints (steps "
      << found[found.size() - paths.size()].first << ".." << found.back().first << ")\n";
  return out;
}

// The value of --best-metric in an evaluation, oriented so that larger is better.
double score_of(const std::string& metric, const EvalResult& ev) {
  const metrics::Metric* m = metrics::find_metric(metric);
  const double v = m->value(ev.scores());
  return m->lower_is_better ? -v : v;
}

// Updates best.bin after an evaluation; returns true when patience has run out.
bool after_evaluation(Run& run, const TrainOptions& opt, const EvalResult& ev, std::ostream& log) {
  if (opt.best_metric.empty()) return false;
  const double v = score_of(opt.best_metric, ev);
  if (run.best_step < 0 || v > run.best_value) {
    run.best_value = v;
    run.best_step = run.step;
    run.bad_evals = 0;
    save_to(run, (fs::path(run.ckpt_path).parent_path() / "best.bin").string());
    return false;
  }
  ++run.bad_evals;
  if (opt.patience > 0 && run.bad_evals >= opt.patience) {
    log << "early stop at step " << run.step << ": " << opt.best_metric << " has not improved in "
        << run.bad_evals << " evaluations since step " << run.best_step << "\n";
    return true;
  }
  return false;
}

// The dropout generator of rank r > 0 for step s: from the seed, the rank and the step alone,
// so that an interrupted and resumed run draws what an uninterrupted one draws (rank 0's is the
// run's own, kept in checkpoints).
Rng rank_rng(const TrainOptions& opt, int rank, int64_t step) {
  return Rng((opt.seed ^ 0x5eedull) + 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(rank) +
             0xBF58476D1CE4E5B9ull * static_cast<uint64_t>(step));
}

Var forward_loss(Run& run, const TrainOptions& opt, const Batch& b) {
  try {
    return run.model->loss(b, run.rng, opt.label_smoothing);
  } catch (const Error& e) {
    if (!opt.anomaly) throw;
    stop_at(run.step, e.what(), "step rejected", run, false);
  }
}

// Backward (adding to the gradients of the step's earlier micro-batches); a non-finite loss
// stops training.
void backward_or_fail(const Run& run, const Var& loss, double loss_value, const TrainingLog& tlog) {
  if (std::isfinite(loss_value)) {
    Tape::current().backward(loss);
    return;
  }
  tlog.break_line();
  stop_at(run.step, "non-finite loss " + std::to_string(loss_value), "step rejected", run, true);
}

// The global gradient norm; a non-finite gradient stops training.
double grad_norm_or_fail(const Run& run, const TrainingLog& tlog) {
  try {
    return grad_global_norm(run.params);  // throws naming a non-finite gradient
  } catch (const Error& e) {
    tlog.break_line();
    stop_at(run.step, e.what(), "step rejected", run, true);
  }
}

StepStats train_step(Run& run, const TrainOptions& opt, const TrainingLog& tlog) {
  const double began = run_seconds(run);
  StepStats s;
  s.step = ++run.step;
  profile::begin_step();  // a flag check unless `seqtape train --profile`
  // --accum K: K batches whose losses (each a mean over its label tokens) are weighted by
  // their share of all K batches' label tokens, so the summed gradient and loss are those of
  // one batch holding them all.
  const auto K = static_cast<size_t>(std::max<int64_t>(1, opt.accum));
  std::vector<Batch> batches;
  int64_t label_tokens = 0;
  const int ranks = run.comm->size();
  {
    profile::Scope prof("data");
    for (size_t k = 0; k < K; ++k) batches.push_back(run.loader->next_batch());
    for (const Batch& b : batches) label_tokens += b.n_label_tokens;
    // With several ranks each trains on its rows of every batch, its loss weighted like one
    // more micro-batch: summed over the ranks, the gradient is the whole batch's.
    for (size_t k = 0; ranks > 1 && k < K; ++k) {
      const std::pair<int64_t, int64_t> rows = shard_rows(batches[k].B, run.comm->rank(), ranks);
      batches[k] = slice_rows(batches[k], rows.first, rows.second);
    }
  }
  if (!run.lead) run.rng = rank_rng(opt, run.comm->rank(), s.step);
  for (auto& [n, p] : run.params) p.zero_grad();
  s.lr = opt.schedule.at(s.step, budget_fraction(run, opt, s.step));
  s.loss = 0;
  for (size_t k = 0; k < K; ++k) {
    const Batch& b = batches[k];
    if (b.B == 0) continue;  // a global batch with fewer rows than ranks
    Tape::current().clear();
    Var loss = forward_loss(run, opt, b);
    if (K > 1 || ranks > 1)
      loss = loss * (label_tokens > 0
                         ? static_cast<double>(b.n_label_tokens) / static_cast<double>(label_tokens)
                         : 0.0);
    if (opt.before_backward) opt.before_backward(s.step, *run.model);
    const double value = loss.item();
    s.loss += value;
    if (run.reducer && k + 1 == K) run.reducer->before_last_backward();
    backward_or_fail(run, loss, value, tlog);
  }
  if (run.reducer) {
    run.reducer->finish();
    run.comm->sum(&s.loss, 1, "the step's loss");
  }
  s.grad_norm = grad_norm_or_fail(run, tlog);
  run.optimizer->step(s.lr, opt.clip > 0 ? clip_scale(s.grad_norm, opt.clip) : 1.0);
  profile::end_step();
  s.label_tokens = label_tokens;
  run.last_step_seconds = run_seconds(run) - began;
  return s;
}

// Before the first step of a resumed run: true when its --time-limit is already used up. Starts
// the run's clock.
bool time_spent(Run& run, const TrainOptions& opt, std::ostream& out) {
  run.started = std::chrono::steady_clock::now();
  if (opt.time_limit <= 0 || run.seconds_before < opt.time_limit) return false;
  out << "the run has trained " << run.seconds_before << " s, not less than --time-limit "
      << opt.time_limit << " s: nothing to train (give a longer --time-limit to continue)\n";
  return true;
}

// Rank 0's decision, on every rank (the others wait for it without a timeout: rank 0 may be
// evaluating for a long time).
bool agree_with_lead(Communicator& comm, bool decision) {
  if (comm.size() == 1) return decision;
  std::string b(1, decision ? '1' : '0');
  comm.broadcast(b, 0, "waiting for rank 0's evaluation", /*bounded=*/false);
  return b == "1";
}

// --check-sync: stops every rank, naming the step, when the parameters differ across ranks.
void check_in_sync(const Run& run) {
  if (run.comm->size() == 1) return;
  const std::string diff = ranks_differing(
      run.comm->allgather(params_checksum(run.params), "comparing the ranks' parameters"));
  if (!diff.empty())
    stop_at(run.step, "the parameters of " + diff + " differ after the update (--check-sync)",
            "the ranks have diverged", run, false);
}

EvalResult evaluate_run(Run& run, const TrainOptions& opt) {
  return evaluate(*run.model, *run.codec, run.split.valid, opt.batch, opt.eval_max);
}

void log_validation(const TrainReport& rep, const std::string& written, std::ostream& log) {
  char buf[384];
  std::snprintf(buf, sizeof buf,
                "validation: loss %.4f, token accuracy %.2f%%, greedy exact match %.2f%% (%lld "
                "sources%s), chrF %.2f, BLEU %.2f, TER %.2f, WER %.4f, PER %.4f, CER %.4f, SER "
                "%.4f\n",
                rep.valid.loss, 100 * rep.valid.token_accuracy, 100 * rep.valid.exact_match,
                static_cast<long long>(rep.valid.examples),
                rep.valid_is_train ? ", the training set" : ", held out", rep.valid.chrf,
                rep.valid.bleu, rep.valid.ter, rep.valid.wer, rep.valid.per, rep.valid.cer,
                rep.valid.ser);
  log << buf;
  for (const auto& [src, got] : rep.valid.samples)
    log << "  greedy decode: " << src << " -> " << got << "\n";
  log << "wrote " << rep.checkpoint << ", " << written << "\n";
}

// The backend and precision the run uses: the ones asked for, or the nearest this build and CPU
// can run; `note` is the log line saying which (empty for the OpenBLAS float32 default).
struct MatmulChoice {
  kernels::MatmulBackend backend;
  kernels::Precision precision;
  std::string note;
};

// A run whose model the data and the budget choose, with no --precision or --matmul given,
// multiplies in bf16 where the CPU has bfloat16 units: about float32's loss per step (weights,
// optimizer, norms and loss stay float32) and more steps in the budget, so a better model. On a
// CPU without them it trains in float32 and the note says why. Chosen again on --resume (the
// precision is not among the options a resume keeps).
void choose_auto_precision(TrainOptions& opt, std::string& note) {
  using kernels::Precision;
  if (!opt.auto_fill.model || !opt.auto_fill.precision) return;
  const std::string why = kernels::matmul_problem(opt.matmul, Precision::BF16);
  opt.precision = why.empty() ? Precision::BF16 : Precision::F32;
  note = why.empty() ? "precision chosen: bf16 products, as this CPU has bfloat16 units (give "
                       "--precision f32 for float32 products)"
                     : "precision chosen: float32, as bf16 cannot run here (" + why + ")";
}

MatmulChoice choose_matmul(const TrainOptions& opt) {
  using kernels::Precision;
  MatmulChoice c{opt.matmul, opt.precision, ""};
  if (const std::string why = kernels::matmul_problem(c.backend, c.precision); !why.empty()) {
    c.precision = Precision::F32;
    if (!kernels::matmul_problem(c.backend, c.precision).empty())
      c.backend = kernels::MatmulBackend::OpenBLAS;
    c.note = "warning: " + why + "; training with " + kernels::matmul_backend_name(c.backend) +
             " in float32 instead";
  }
  if (c.backend == kernels::MatmulBackend::OpenBLAS && c.precision == Precision::F32) return c;
  const kernels::OneDnnInfo& info = kernels::onednn_info();
  if (!c.note.empty()) c.note += "\n";
  c.note += std::string("matmul: ") +
            (c.precision == Precision::BF16
                 ? "bf16 operands, float32 accumulation, on oneDNN (products of up to 16384 "
                   "multiply-adds, attention's smallest per head, on seqtape's own kernel)"
                 : kernels::matmul_backend_name(c.backend)) +
            " (oneDNN " + info.version + ", ISA " + info.isa + ")";
  return c;
}

}  // namespace

std::string ranks_problem(const TrainOptions& opt) {
  if (opt.ranks < 0) return "--ranks must be >= 0 (0: chosen)";
  if (opt.ranks > 1 && opt.comm && opt.comm->size() > 1)
    return "--ranks " + std::to_string(opt.ranks) + " cannot be combined with mpirun's " +
           std::to_string(opt.comm->size()) +
           " ranks: give --ranks without mpirun, or mpirun without --ranks";
  return "";
}

std::string best_metric_problem(const TrainOptions& opt) {
  const std::string& m = opt.best_metric;
  if (m.empty()) return opt.patience > 0 ? "--patience needs --best-metric" : "";
  const metrics::Metric* metric = metrics::find_metric(m);
  if (!metric)
    return "--best-metric must be one of " + metrics::metric_names() + " (got '" + m + "')";
  if (opt.eval_every <= 0)
    return "--best-metric " + m + " needs periodic evaluation: give --eval-every N";
  if (!metric->teacher_forced && opt.eval_max <= 0)
    return "--best-metric " + m + " scores decoded outputs, which --eval-max 0 turns off";
  return "";
}

namespace {

// The options train() refuses before it touches anything.
void check_train_options(const TrainOptions& opt) {
  if (opt.out_dir.empty()) fail("train", "no output directory (--out)");
  if (opt.batch < 1) fail("train", "batch size must be >= 1");
  if (opt.batch_tokens < 0) fail("train", "--batch-tokens must be >= 0 (0: batches of --batch)");
  if (opt.keep_last < 0 || opt.average_last < 0)
    fail("train", "--keep-last and --average-last must be >= 0");
  if (opt.accum < 1 || opt.accum > TrainOptions::kMaxAccum)
    fail("train", "--accum must be in [1, " + std::to_string(TrainOptions::kMaxAccum) + "], got " +
                      std::to_string(opt.accum));
  if (const std::string p = best_metric_problem(opt); !p.empty()) fail("train", p);
}

// opt.on_step's answer after step s: true (logged) ends the run.
bool callback_stops(const TrainOptions& opt, const StepStats& s, TrainingLog& tlog,
                    std::ostream& out) {
  if (!opt.on_step) return false;
  const double secs = tlog.seconds();
  if (!opt.on_step(s, secs > 0 ? static_cast<double>(tlog.tokens()) / secs : 0.0)) return false;
  tlog.break_line();
  out << "stopped by the step callback after step " << s.step << "\n";
  return true;
}

// After a step: whether this run stops now (a signal on any rank, early stopping, or rank 0's
// clock past --time-limit), the same answer on every rank.
bool stop_after_step(const Run& run, const TrainOptions& opt, Communicator& comm, TrainingLog& tlog,
                     TrainReport& rep, std::ostream& out) {
  const bool lead = comm.rank() == 0;
  rep.stop_signal = StopSignals::received();
  bool time_up = opt.time_limit > 0 && run_seconds(run) >= opt.time_limit;
  if (comm.size() > 1) {  // every rank stops after the same step: rank 0's clock, any signal
    double v[2] = {static_cast<double>(rep.stop_signal), lead && time_up ? 1.0 : 0.0};
    comm.sum(v, 2, "agreeing whether to stop");
    if (rep.stop_signal == 0 && v[0] > 0) rep.stop_signal = SIGTERM;  // another rank's signal
    time_up = v[1] > 0;
  }
  if (rep.stop_signal != 0 || rep.early_stopped) return true;
  if (time_up) {
    tlog.break_line();
    out << "time limit of " << opt.time_limit << " s reached at step " << run.step << "\n";
    rep.timed_out = true;
  }
  return time_up;
}

// The steps until the budget, a signal, early stopping or the time limit ends them, with
// periodic evaluation (rank 0), saves and synchronisation checks.
void run_steps(Run& run, const TrainOptions& opt, Communicator& comm, TrainingLog& tlog,
               TrainReport& rep, std::ostream& out, std::ostream& log) {
  const bool lead = comm.rank() == 0;
  while (run.step < run.total_steps && !rep.timed_out) {
    comm.set_step(run.step + 1);
    const StepStats s = train_step(run, opt, tlog);
    rep.losses.push_back(s.loss);
    rep.lrs.push_back(s.lr);
    tlog.step(s);
    if (opt.eval_every > 0 && s.step % opt.eval_every == 0 && s.step != run.total_steps) {
      if (lead) {
        const EvalResult ev = evaluate_run(run, opt);
        tlog.evaluation(s.step, ev, true);
        if (after_evaluation(run, opt, ev, log)) rep.early_stopped = true;
      }
      rep.early_stopped = agree_with_lead(comm, rep.early_stopped);
    }
    if (lead && opt.save_every > 0 && s.step % opt.save_every == 0) save_or_fail(run, opt);
    if (opt.check_sync > 0 && s.step % opt.check_sync == 0) check_in_sync(run);
    if (stop_after_step(run, opt, comm, tlog, rep, out)) break;
    if (lead && callback_stops(opt, s, tlog, out)) break;
  }
}

// Rank 0 after the last step: the final evaluation, best.bin's bookkeeping and the report.
void finish_lead(Run& run, const TrainOptions& opt, TrainingLog& tlog, TrainReport& rep,
                 std::ostream& log) {
  if (rep.stop_signal != 0) {
    log << "stopped by signal " << rep.stop_signal << " after step " << run.step << "; saved "
        << run.ckpt_path << " (continue with --resume), " << tlog.finish() << "\n";
    return;
  }
  rep.valid = evaluate_run(run, opt);
  tlog.evaluation(run.step, rep.valid, false);
  if (!rep.early_stopped) after_evaluation(run, opt, rep.valid, log);
  rep.best_step = run.best_step;
  rep.best_value = run.best_value;
  log_validation(rep, tlog.finish(), log);
  if (run.best_step >= 0)
    log << "best.bin: step " << run.best_step << ", " << opt.best_metric << " "
        << (metrics::find_metric(opt.best_metric)->lower_is_better ? -run.best_value
                                                                   : run.best_value)
        << "\n";
}

// One rank's run (the whole run without data parallelism).
TrainReport train_rank(const TrainOptions& options, std::ostream& log) {
  TrainOptions opt = options;  // with what opt.auto_fill leaves open filled in (fill_auto)
  check_train_options(opt);
  const std::shared_ptr<Communicator> comm = opt.comm ? opt.comm : single_process();
  const bool lead = comm->rank() == 0;
  int threads = opt.threads;
  if (threads == 0 && comm->size() > 1)  // the ranks on this machine share its cores
    threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / local_ranks());
  if (threads > 0 && !comm->shares_process()) kernels::blas_set_num_threads(threads);
  std::string precision_note;
  choose_auto_precision(opt, precision_note);
  const MatmulChoice matmul = choose_matmul(opt);
  const kernels::MatmulScope matmul_scope(matmul.backend, matmul.precision);
  // Rank 0 alone holds the run directory; the other ranks write nothing and log nothing.
  std::optional<RunDir> run_dir;  // held until train() returns
  if (lead) run_dir.emplace(opt.out_dir, opt.resume, opt.overwrite);
  std::ostream null_log(nullptr);
  std::ostream& out = lead ? log : null_log;
  opt.comm = comm;
  // Every rank calls this collective, whether or not the defaults choose its model (a rank
  // started with other options is refused later, by check_ranks_agree): the same sum on every
  // rank, whatever --threads each was given, so every rank chooses the same model.
  int world_threads = 0;
  for (const uint64_t t : comm->allgather(static_cast<uint64_t>(kernels::blas_num_threads()),
                                          "counting the ranks' threads"))
    world_threads += static_cast<int>(t);
  fill_auto(opt, matmul.precision == kernels::Precision::BF16, world_threads, out);
  if (!precision_note.empty()) out << precision_note << "\n";
  Run run = start_run(opt, out);
  if (lead) write_run_files(opt, run, out);
  log_summary(opt, run, out);
  if (!matmul.note.empty()) out << matmul.note << "\n";

  const bool bar = lead && (opt.progress == 1 || (opt.progress == -1 && isatty(STDERR_FILENO)));
  const double time_left = opt.time_limit - run.seconds_before;
  TrainingLog tlog(lead ? opt.out_dir : "", run.resuming, bar, opt.log_every, run.step + 1,
                   run.total_steps, out, run.until_time_limit ? std::max(time_left, 1e-9) : 0);
  Tape::current().set_anomaly(opt.anomaly);
  TrainReport rep;
  rep.first_step = run.step + 1;
  rep.valid_is_train = run.valid_is_train;
  rep.checkpoint = run.ckpt_path;
  rep.world_size = comm->size();
  std::optional<StopSignals> signals;  // SIGINT/SIGTERM: save at the end of the step and stop
  if (!comm->shares_process()) signals.emplace();  // (thread ranks: train_thread_ranks holds it)
  rep.timed_out = time_spent(run, opt, out);
  run_steps(run, opt, *comm, tlog, rep, out, log);
  if (run.reducer) rep.allreduce = run.reducer->stats();
  tlog.break_line();
  rep.last_step = run.step;
  rep.seconds = tlog.seconds();
  rep.tokens_per_second = rep.seconds > 0 ? static_cast<double>(tlog.tokens()) / rep.seconds : 0.0;
  rep.padding_fraction = run.loader->padding().fraction();
  if (rep.last_step >= rep.first_step) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "padding: %.1f%% of the batches' token positions\n",
                  100.0 * rep.padding_fraction);
    out << buf;
  }
  if (lead && run.last_saved != run.step) save_or_fail(run, opt);
  if (lead && opt.average_last > 0 && run.step > 0) rep.average = write_average(run, opt, out);
  Tape::current().clear();
  if (lead) finish_lead(run, opt, tlog, rep, log);  // rank 0 evaluates and reports
  Tape::current().set_anomaly(false);
  return rep;
}

// The most ranks train() chooses by itself (ranks 0). Measured on 2 cores only; beyond 4 the
// ranks' shares of a batch get small and every step waits for the slowest of them.
constexpr int kMaxChosenRanks = 4;

// Restores the BLAS thread count on leaving.
class BlasThreads {
 public:
  explicit BlasThreads(int n) : prev_(kernels::blas_num_threads()) {
    kernels::blas_set_num_threads(n);
  }
  ~BlasThreads() { kernels::blas_set_num_threads(prev_); }
  BlasThreads(const BlasThreads&) = delete;
  BlasThreads& operator=(const BlasThreads&) = delete;

 private:
  int prev_;
};

// --ranks N: N ranks as threads of this process (thread_ranks), rank 0 on this thread, each
// with its share of the threads for its kernels. What belongs to the process is set here, once,
// around them: the BLAS thread count, the matmul route (each rank's own scope then sets the same
// one and restores it, whichever finishes first) and the signal handlers.
TrainReport train_thread_ranks(const TrainOptions& options, std::ostream& log) {
  const int n = options.ranks;
  if (const std::string p = ranks_problem(options); !p.empty()) fail("train", p);
  const int threads = options.threads > 0 ? options.threads : kernels::blas_num_threads();
  const BlasThreads blas(std::max(1, threads / n));
  TrainOptions chosen = options;
  std::string note;
  choose_auto_precision(chosen, note);
  const MatmulChoice matmul = choose_matmul(chosen);
  const kernels::MatmulScope matmul_scope(matmul.backend, matmul.precision);
  const StopSignals signals;
  const std::vector<std::shared_ptr<Communicator>> comms = thread_ranks(n);
  for (const auto& c : comms) c->set_timeout(options.comm ? options.comm->timeout() : 300);

  std::vector<TrainReport> reps(static_cast<size_t>(n));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  std::atomic<int> first_failed{-1};
  const bool profiling = profile::enabled();
  auto rank = [&](int r) {
    TrainOptions o = options;
    o.comm = comms[static_cast<size_t>(r)];
    o.ranks = 1;
    o.threads = 0;                    // set above for every rank
    if (r != 0) o.on_step = nullptr;  // rank 0's callback
    try {
      if (r != 0) profile::set_enabled(profiling);
      reps[static_cast<size_t>(r)] = train_rank(o, log);
    } catch (...) {
      errors[static_cast<size_t>(r)] = std::current_exception();
      int none = -1;
      first_failed.compare_exchange_strong(none, r);
      std::string what = "an unknown exception";
      try {
        throw;
      } catch (const std::exception& e) {
        what = e.what();
      } catch (...) {
      }
      fail_thread_ranks(*o.comm, o.comm->who() + " failed: " + what);
    }
  };
  std::vector<std::thread> others;
  try {
    for (int r = 1; r < n; ++r) others.emplace_back(rank, r);
  } catch (const std::system_error& e) {  // the started ranks would wait for rank 0 forever
    fail_thread_ranks(*comms[0], std::string("could not start the ranks' threads: ") + e.what());
    for (std::thread& t : others) t.join();
    throw Error("--ranks " + std::to_string(n) + ": could not start a thread per rank (" +
                e.what() + ")");
  }
  rank(0);
  for (std::thread& t : others) t.join();
  const int f = first_failed.load();
  if (f < 0) return reps[0];
  if (f == 0) std::rethrow_exception(errors[0]);
  const std::string who = comms[static_cast<size_t>(f)]->who() + ": ";
  try {
    std::rethrow_exception(errors[static_cast<size_t>(f)]);
  } catch (const Error& e) {
    throw Error(who + e.what());
  }
}

}  // namespace

TrainReport train(const TrainOptions& options, std::ostream& log) {
  if (const std::string p = ranks_problem(options); !p.empty()) fail("train", p);
  if (options.ranks != 0) {
    if (options.ranks > 1) return train_thread_ranks(options, log);
    return train_rank(options, log);
  }
  // ranks 0: one rank, except where the defaults choose the model (small ones, a time budget)
  // and this process has several threads: there each thread trains as a rank of its own, up
  // to kMaxChosenRanks (docs/performance.md: two ranks of one thread against one process of
  // two threads, 1.2-1.3 times the tokens per second for such models).
  TrainOptions o = options;
  const int threads = o.threads > 0 ? o.threads : kernels::blas_num_threads();
  const bool alone = !o.comm || o.comm->size() == 1;
  o.ranks = o.auto_fill.model && alone ? std::clamp(threads, 1, kMaxChosenRanks) : 1;
  if (o.ranks > 1) {
    log << "ranks chosen: " << o.ranks << " ranks of " << std::max(1, threads / o.ranks)
        << " thread" << (threads / o.ranks > 1 ? "s" : "") << " in this process, each on 1/"
        << o.ranks << " of every batch (faster than one rank of " << threads
        << " threads for the models the defaults choose; give --ranks 1 for one)\n";
    return train_thread_ranks(o, log);
  }
  return train_rank(o, log);
}

}  // namespace seqtape
