#include "train/trainer.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "autograd/kernels.h"
#include "autograd/ops.h"
#include "nn/loss.h"
#include "nn/memory_budget.h"
#include "train/checkpoint.h"
#include "train/plot.h"

namespace seqtape {

namespace fs = std::filesystem;

std::unique_ptr<TransformerModel> make_model(const ModelConfig& cfg, DType dtype) {
  if (cfg.arch == Arch::Seq2Seq) return std::make_unique<Seq2Seq>(cfg, dtype);
  return std::make_unique<DecoderOnly>(cfg, dtype);
}

Var batch_logits(TransformerModel& model, const Batch& b, Rng& rng) {
  if (auto* s2s = dynamic_cast<Seq2Seq*>(&model))
    return s2s->forward(b.src, b.B, b.S, b.src_len, b.tgt_in, b.T, b.tgt_len, rng);
  auto& lm = dynamic_cast<DecoderOnly&>(model);
  return lm.forward(b.tokens, b.B, b.T, b.len, rng);
}

namespace {

int64_t argmax_row(const Tensor& logits, int64_t offset, int64_t v) {
  int64_t best = 0;
  double bv = -INFINITY;
  for (int64_t j = 0; j < v; ++j) {
    double x = logits.get(offset + j);
    if (x > bv) bv = x, best = j;
  }
  return best;
}

}  // namespace

std::vector<std::vector<int32_t>> greedy_uncached(TransformerModel& model, const Vocab& vocab,
                                                  const std::vector<std::vector<int32_t>>& prompts,
                                                  int64_t max_new) {
  NoGradGuard no_grad;
  const bool was_training = model.training();
  model.set_training(false);
  Rng rng(0);
  const int64_t V = model.config().vocab_size;
  const int32_t bos = vocab.bos_id(), eos = vocab.eos_id(), pad = vocab.pad_id();
  std::vector<std::vector<int32_t>> out(prompts.size());
  if (auto* s2s = dynamic_cast<Seq2Seq*>(&model)) {
    // Encode the batch once; recompute the whole decoder prefix every step.
    const int64_t B = static_cast<int64_t>(prompts.size());
    if (B == 0) return out;
    int64_t S = 0;
    for (const auto& p : prompts) S = std::max<int64_t>(S, static_cast<int64_t>(p.size()));
    std::vector<int32_t> src(static_cast<size_t>(B * S), pad), src_len(static_cast<size_t>(B));
    for (int64_t i = 0; i < B; ++i) {
      const auto& p = prompts[static_cast<size_t>(i)];
      std::copy(p.begin(), p.end(), src.begin() + i * S);
      src_len[static_cast<size_t>(i)] = static_cast<int32_t>(p.size());
    }
    Var memory = s2s->encode(src, B, S, src_len, rng);
    std::vector<std::vector<int32_t>> seq(static_cast<size_t>(B), std::vector<int32_t>{bos});
    std::vector<bool> done(static_cast<size_t>(B), false);
    const int64_t limit = std::min(max_new, model.config().max_positions - 1);
    for (int64_t t = 1; t <= limit; ++t) {
      std::vector<int32_t> tgt(static_cast<size_t>(B * t)),
          tgt_len(static_cast<size_t>(B), static_cast<int32_t>(t));
      for (int64_t i = 0; i < B; ++i)
        std::copy(seq[static_cast<size_t>(i)].begin(), seq[static_cast<size_t>(i)].end(),
                  tgt.begin() + i * t);
      Var logits = s2s->decode(memory, src_len, tgt, B, t, tgt_len, rng);  // [B, t, V]
      bool all_done = true;
      for (int64_t i = 0; i < B; ++i) {
        auto& s = seq[static_cast<size_t>(i)];
        if (done[static_cast<size_t>(i)]) {
          s.push_back(pad);  // keeps rows rectangular; never read
          continue;
        }
        int32_t next = static_cast<int32_t>(argmax_row(logits.value(), (i * t + t - 1) * V, V));
        s.push_back(next);
        if (next == eos)
          done[static_cast<size_t>(i)] = true;
        else
          out[static_cast<size_t>(i)].push_back(next);
        all_done = all_done && done[static_cast<size_t>(i)];
      }
      if (all_done) break;
    }
  } else {
    auto& lm = dynamic_cast<DecoderOnly&>(model);
    for (size_t i = 0; i < prompts.size(); ++i) {
      std::vector<int32_t> seq = prompts[i];
      for (int64_t n = 0;
           n < max_new && static_cast<int64_t>(seq.size()) < model.config().max_positions; ++n) {
        const int64_t T = static_cast<int64_t>(seq.size());
        Var logits = lm.forward(seq, 1, T, {static_cast<int32_t>(T)}, rng);
        int32_t next = static_cast<int32_t>(argmax_row(logits.value(), (T - 1) * V, V));
        if (next == eos) break;
        out[i].push_back(next);
        seq.push_back(next);
      }
    }
  }
  model.set_training(was_training);
  return out;
}

EvalResult evaluate(TransformerModel& model, const Vocab& vocab, const std::vector<TextPair>& data,
                    int64_t batch, int64_t eval_max) {
  EvalResult r;
  if (data.empty()) return r;
  NoGradGuard no_grad;
  const bool was_training = model.training();
  model.set_training(false);
  Tokenizer tok(vocab);
  const bool lm = model.config().arch == Arch::DecoderOnly;
  Rng rng(0);
  double loss_sum = 0;
  int64_t tokens = 0;
  std::vector<std::vector<int32_t>> prompts, targets;
  if (lm) {
    auto ex = encode_lm_examples(tok, data, "validation");
    for (const Batch& b : lm_batches_in_order(ex, batch, vocab.pad_id())) {
      Var logits = batch_logits(model, b, rng);
      loss_sum += sequence_loss(logits, b.labels).item() * static_cast<double>(b.n_label_tokens);
      tokens += b.n_label_tokens;
    }
    for (size_t i = 0; i < data.size() && static_cast<int64_t>(i) < eval_max; ++i) {
      auto src = tok.encode(data[i].source, "validation");
      src.push_back(vocab.sep_id());
      prompts.push_back(src);
      targets.push_back(tok.encode(data[i].target, "validation"));
    }
  } else {
    auto ex = encode_examples(tok, data, "validation");
    for (const Batch& b : batches_in_order(ex, batch, vocab.pad_id())) {
      Var logits = batch_logits(model, b, rng);
      loss_sum += sequence_loss(logits, b.labels).item() * static_cast<double>(b.n_label_tokens);
      tokens += b.n_label_tokens;
    }
    for (size_t i = 0; i < ex.size() && static_cast<int64_t>(i) < eval_max; ++i) {
      prompts.push_back(ex[i].enc);
      targets.emplace_back(ex[i].labels.begin(), ex[i].labels.end() - 1);  // without <eos>
    }
  }
  r.loss = tokens ? loss_sum / static_cast<double>(tokens) : 0.0;
  int64_t hits = 0;
  for (size_t s = 0; s < prompts.size(); s += static_cast<size_t>(batch)) {
    size_t e = std::min(prompts.size(), s + static_cast<size_t>(batch));
    std::vector<std::vector<int32_t>> chunk(prompts.begin() + static_cast<long>(s),
                                            prompts.begin() + static_cast<long>(e));
    int64_t longest = 0;
    for (size_t i = s; i < e; ++i)
      longest = std::max<int64_t>(longest, static_cast<int64_t>(targets[i].size()));
    auto got = greedy_uncached(model, vocab, chunk, 2 * longest + 8);
    for (size_t i = s; i < e; ++i) {
      hits += got[i - s] == targets[i];
      if (r.samples.size() < 3) r.samples.emplace_back(data[i].source, tok.decode(got[i - s]));
    }
  }
  r.examples = static_cast<int64_t>(prompts.size());
  r.exact_match = r.examples ? static_cast<double>(hits) / static_cast<double>(r.examples) : 0.0;
  model.set_training(was_training);
  return r;
}

namespace {

std::string fmt_seconds(double s) {
  char buf[32];
  if (s < 60)
    std::snprintf(buf, sizeof buf, "%.0fs", s);
  else if (s < 3600)
    std::snprintf(buf, sizeof buf, "%dm%02ds", static_cast<int>(s) / 60, static_cast<int>(s) % 60);
  else
    std::snprintf(buf, sizeof buf, "%dh%02dm", static_cast<int>(s) / 3600,
                  (static_cast<int>(s) % 3600) / 60);
  return buf;
}

nlohmann::json loader_state_json(const LoaderState& s) {
  return {{"epoch", s.epoch}, {"cursor", s.cursor}, {"order", s.order}, {"rng", s.rng_state}};
}

LoaderState loader_state_from(const std::string& text, const std::string& where) {
  try {
    auto j = nlohmann::json::parse(text);
    LoaderState s;
    s.epoch = j.at("epoch").get<uint64_t>();
    s.cursor = j.at("cursor").get<uint64_t>();
    s.order = j.at("order").get<std::vector<uint32_t>>();
    s.rng_state = j.at("rng").get<std::string>();
    return s;
  } catch (const nlohmann::json::exception& e) {
    fail(where, std::string("invalid data-loader state: ") + e.what());
  }
}

// A save killed mid-write leaves its temp file ("<path>.tmp.<pid>.<n>", see write_file_atomic)
// behind. Removes those whose writer is gone, so repeated crashes cannot fill the disk.
void remove_stale_temp_files(const std::string& path) {
  const fs::path p(path);
  const std::string prefix = p.filename().string() + ".tmp.";
  std::error_code ec;
  for (auto it = fs::directory_iterator(p.parent_path(), ec); !ec && it != fs::directory_iterator();
       it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!name.starts_with(prefix)) continue;
    const long pid = std::strtol(name.c_str() + prefix.size(), nullptr, 10);
    std::error_code rm;
    if (pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH)
      fs::remove(it->path(), rm);
  }
}

// Tokens in the longest example, as far as the budget check needs it: its UTF-8 bytes (at least
// its characters) plus the specials, at most max_positions.
int64_t longest_example(const std::vector<TextPair>& pairs, const ModelConfig& cfg) {
  size_t longest = 0;
  for (const TextPair& p : pairs) longest = std::max(longest, p.source.size() + p.target.size());
  return std::min<int64_t>(cfg.max_positions, static_cast<int64_t>(longest) + 3);
}

void copy_params_from(TransformerModel& model, const std::vector<NamedTensor>& saved,
                      const std::string& where) {
  auto params = model.named_parameters();
  if (params.size() != saved.size())
    fail(where, "holds " + std::to_string(saved.size()) + " parameters, the model has " +
                    std::to_string(params.size()));
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& dst = params[i].second.value();
    const NamedTensor& src = saved[i];
    if (src.name != params[i].first || src.value.shape() != dst.shape() ||
        src.value.dtype() != dst.dtype())
      fail(where, "parameter '" + src.name + "' " + shape_str(src.value.shape()) + " " +
                      dtype_name(src.value.dtype()) + " does not match the model's '" +
                      params[i].first + "' " + shape_str(dst.shape()) + " " +
                      dtype_name(dst.dtype()));
  }
  for (size_t i = 0; i < params.size(); ++i) {
    Tensor t = saved[i].value.to(params[i].second.dtype());
    std::memcpy(params[i].second.mutable_value().raw(), t.raw(), t.nbytes());
  }
}

}  // namespace

TrainReport train(const TrainOptions& opt, std::ostream& log) {
  if (opt.out_dir.empty()) fail("train", "no output directory (--out)");
  if (opt.batch < 1) fail("train", "batch size must be >= 1");
  if (opt.threads > 0) kernels::blas_set_num_threads(opt.threads);
  fs::create_directories(opt.out_dir);
  const std::string ckpt_path = (fs::path(opt.out_dir) / "checkpoint.bin").string();
  const std::string metrics_path = (fs::path(opt.out_dir) / "metrics.csv").string();
  remove_stale_temp_files(ckpt_path);

  // ---- resume or start: vocabulary and configuration -------------------------------------
  Checkpoint resumed;
  const bool resuming = opt.resume && fs::exists(ckpt_path);
  if (opt.resume && !resuming) fail("train", "--resume: no checkpoint at " + ckpt_path);
  if (resuming) resumed = load_checkpoint(ckpt_path);

  std::vector<TextPair> pairs = read_tsv(opt.data);
  Vocab vocab = resuming ? Vocab::from_tokens(resumed.vocab, ckpt_path)
                         : (opt.vocab.empty() ? build_vocab(pairs) : Vocab::load(opt.vocab));
  ModelConfig cfg = opt.model;
  if (resuming) {
    try {
      cfg = ModelConfig::from_json(nlohmann::json::parse(resumed.config_json));
    } catch (const nlohmann::json::exception& e) {
      fail(ckpt_path, std::string("invalid configuration: ") + e.what());
    }
  } else {
    if (opt.model_vocab_size_given && cfg.vocab_size != static_cast<int64_t>(vocab.size()))
      fail("train", "the configuration's vocab_size " + std::to_string(cfg.vocab_size) +
                        " differs from the vocabulary's " + std::to_string(vocab.size()) +
                        " tokens (leave vocab_size out to take it from the vocabulary)");
    cfg.vocab_size = static_cast<int64_t>(vocab.size());
  }
  cfg.validate();
  if (cfg.vocab_size != static_cast<int64_t>(vocab.size()))
    fail("train", "the configuration's vocab_size " + std::to_string(cfg.vocab_size) +
                      " differs from the vocabulary's " + std::to_string(vocab.size()) + " tokens");

  // ---- data -------------------------------------------------------------------------------
  TextSplit split;
  bool valid_is_train = false;
  if (!opt.valid_data.empty()) {
    split.train = pairs;
    split.valid = read_tsv(opt.valid_data);
  } else {
    const auto n = static_cast<int64_t>(pairs.size());
    int64_t n_valid = std::min<int64_t>(
        opt.valid_max,
        static_cast<int64_t>(std::floor(opt.valid_fraction * static_cast<double>(n))));
    if (n_valid < 1 || n - n_valid < 1) {
      split.train = pairs;
      split.valid = pairs;  // nothing to hold out (e.g. the single reference sentence)
      valid_is_train = true;
    } else {
      split = split_validation_count(pairs, static_cast<size_t>(n_valid), opt.seed);
    }
  }
  check_memory_budget(training_memory(cfg, opt.batch, longest_example(pairs, cfg)), "train");
  Tokenizer tok(vocab);
  const bool lm = cfg.arch == Arch::DecoderOnly;
  LoaderOptions lopt;
  lopt.batch_size = opt.batch;
  lopt.seed = opt.seed;
  std::unique_ptr<DataLoader> loader =
      lm ? std::make_unique<DataLoader>(encode_lm_examples(tok, split.train, opt.data),
                                        vocab.pad_id(), lopt)
         : std::make_unique<DataLoader>(encode_examples(tok, split.train, opt.data), vocab.pad_id(),
                                        lopt);

  int64_t total_steps = opt.steps;
  if (total_steps <= 0) {
    if (opt.epochs <= 0) fail("train", "give --steps or --epochs");
    total_steps = static_cast<int64_t>(
        std::ceil(opt.epochs * static_cast<double>(loader->batches_per_epoch())));
  }

  // ---- model, optimizer, state -------------------------------------------------------------
  std::unique_ptr<TransformerModel> model = make_model(cfg);
  model->set_training(true);
  NamedParams params = model->named_parameters();
  OptimizerConfig ocfg = opt.optim;
  if (resuming) ocfg.kind = parse_optimizer(resumed.optimizer_name);
  Optimizer optimizer(params, ocfg);
  Rng rng(opt.seed ^ 0x5eedull);  // dropout
  int64_t step = 0;
  if (resuming) {
    copy_params_from(*model, resumed.params, ckpt_path);
    check_finite(resumed.params, ckpt_path, "parameter");
    check_finite(resumed.optimizer_state, ckpt_path, "optimizer state");
    optimizer.load_state(resumed.optimizer_state, resumed.step);
    try {
      rng.set_state(resumed.rng_state);
    } catch (const std::exception&) {
      fail(ckpt_path, "invalid random-generator state (rng_state); the checkpoint cannot resume");
    }
    try {
      loader->set_state(loader_state_from(resumed.loader_state_json, ckpt_path));
    } catch (const Error& e) {
      fail(ckpt_path, std::string("cannot resume on this data (resume needs the same --data, "
                                  "--valid and --seed as the run that wrote it): ") +
                          e.what());
    }
    step = resumed.step;
    if (step >= total_steps)
      log << "checkpoint is at step " << step << ", not before --steps " << total_steps
          << ": nothing to train\n";
  }
  {
    std::ofstream(fs::path(opt.out_dir) / "config.json") << cfg.to_json().dump(2) << "\n";
    vocab.save((fs::path(opt.out_dir) / "vocab.txt").string());
  }
  std::ofstream metrics;
  if (resuming && fs::exists(metrics_path)) {
    metrics.open(metrics_path, std::ios::app);
  } else {
    metrics.open(metrics_path);
    metrics << "step,kind,loss,lr,grad_norm,tokens_per_s,elapsed_s,exact_match\n";
  }
  metrics.precision(17);  // losses round-trip exactly: resumed runs are compared bit for bit

  size_t n_params = 0;
  for (auto& [n, p] : params) n_params += static_cast<size_t>(p.numel());
  log << "model: " << (lm ? "decoder-only" : "encoder-decoder") << ", d_model " << cfg.d_model
      << ", heads " << cfg.n_heads << ", layers " << cfg.n_encoder_layers << "+"
      << cfg.n_decoder_layers << ", " << n_params << " parameters; vocabulary " << vocab.size()
      << " tokens\n";
  log << "data: " << split.train.size() << " training examples, " << split.valid.size()
      << " validation"
      << (!valid_is_train ? ""
          : opt.valid_max == 0
              ? " (--valid-max 0 holds nothing out: validating on the training set)"
              : " (too few examples to hold any out: validating on the training set)")
      << "; " << total_steps << " steps of batch " << opt.batch << ", optimizer "
      << optimizer_name(ocfg.kind) << ", lr " << opt.schedule.lr
      << (resuming ? ", resumed at step " + std::to_string(step) : "") << "\n";

  int64_t last_saved = resuming ? step : -1;
  // How the messages name the checkpoint that a failure leaves in place.
  auto last_good = [&] {
    return last_saved >= 0 ? ckpt_path + " (step " + std::to_string(last_saved) + ")"
                           : std::string("(none yet)");
  };
  auto save = [&](int64_t at_step) {
    // A weight can go NaN/Inf without the loss noticing (ReLU maps NaN to 0): such a model
    // must not replace the last good checkpoint.
    for (const auto& [n, p] : params) {
      try {
        check_finite(p.value(), n, ckpt_path);
      } catch (const Error& e) {
        fail("step " + std::to_string(at_step),
             std::string(e.what()) + "; not saved, training stopped; the last good checkpoint " +
                 last_good() +
                 " is intact (rerun with --anomaly to name the first op that went non-finite)");
      }
    }
    Checkpoint c;
    c.config_json = cfg.to_json().dump();
    c.vocab = vocab.tokens();
    for (auto& [n, p] : params) c.params.push_back({n, p.value()});
    c.optimizer_name = optimizer_name(ocfg.kind);
    c.optimizer_state = optimizer.state();
    c.step = at_step;
    c.rng_state = rng.state();
    c.loader_state_json = loader_state_json(loader->state()).dump();
    c.metrics_json = "{}";
    try {
      save_checkpoint(ckpt_path, c);
    } catch (const Error& e) {
      fail("step " + std::to_string(at_step),
           std::string("saving the checkpoint failed: ") + e.what() +
               "; training stopped; the last good checkpoint " + last_good() + " is intact");
    }
  };

  const bool bar = opt.progress == 1 || (opt.progress == -1 && isatty(STDERR_FILENO));
  Tape& tape = Tape::current();
  tape.set_anomaly(opt.anomaly);
  TrainReport rep;
  rep.first_step = step + 1;
  rep.valid_is_train = valid_is_train;
  rep.checkpoint = ckpt_path;
  const auto t0 = std::chrono::steady_clock::now();
  int64_t tokens_done = 0;
  double window_loss = 0;
  int64_t window_n = 0;
  while (step < total_steps) {
    ++step;
    Batch b = loader->next_batch();
    tape.clear();
    for (auto& [n, p] : params) p.zero_grad();
    const double lr = opt.schedule.at(step);
    Var logits;
    Var loss;
    try {
      logits = batch_logits(*model, b, rng);
      loss = sequence_loss(logits, b.labels, opt.label_smoothing);
    } catch (const Error& e) {
      if (!opt.anomaly) throw;
      fail("step " + std::to_string(step),
           std::string(e.what()) + "; step rejected, training stopped; the last good checkpoint " +
               last_good() + " is intact");
    }
    if (opt.before_backward) opt.before_backward(step, *model);
    const double lv = loss.item();
    double gnorm = 0;
    std::string problem;
    if (!std::isfinite(lv)) {
      problem = "non-finite loss " + std::to_string(lv);
    } else {
      tape.backward(loss);
      try {
        gnorm = grad_global_norm(params);  // throws naming a non-finite gradient
      } catch (const Error& e) {
        problem = e.what();
      }
    }
    if (!problem.empty()) {
      if (bar) std::fprintf(stderr, "\n");
      fail("step " + std::to_string(step),
           problem + "; step rejected, training stopped; the last good checkpoint " + last_good() +
               " is intact (rerun with --anomaly to name the first op that went non-finite)");
    }
    optimizer.step(lr, opt.clip > 0 ? clip_scale(gnorm, opt.clip) : 1.0);
    rep.losses.push_back(lv);
    tokens_done += b.n_label_tokens;
    window_loss += lv;
    ++window_n;
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double tps = elapsed > 0 ? static_cast<double>(tokens_done) / elapsed : 0.0;
    const bool log_now = step % opt.log_every == 0 || step == total_steps || step == rep.first_step;
    if (log_now) {
      metrics << step << ",train," << window_loss / static_cast<double>(window_n) << "," << lr
              << "," << gnorm << "," << tps << "," << elapsed << ",\n";
      metrics.flush();
    }
    if (bar) {
      const double done = static_cast<double>(step - rep.first_step + 1) /
                          static_cast<double>(total_steps - rep.first_step + 1);
      const int width = 24, fill = static_cast<int>(done * width);
      std::fprintf(stderr, "\r[%s%s] step %lld/%lld  loss %.4f  %.0f tok/s  ETA %s   ",
                   std::string(static_cast<size_t>(fill), '#').c_str(),
                   std::string(static_cast<size_t>(width - fill), '.').c_str(),
                   static_cast<long long>(step), static_cast<long long>(total_steps), lv, tps,
                   fmt_seconds(done > 0 ? elapsed / done - elapsed : 0).c_str());
    } else if (log_now) {
      char buf[200];
      std::snprintf(buf, sizeof buf,
                    "step %lld/%lld  loss %.4f  lr %.2e  |g| %.3f  %.0f tok/s  elapsed %s\n",
                    static_cast<long long>(step), static_cast<long long>(total_steps),
                    window_loss / static_cast<double>(window_n), lr, gnorm, tps,
                    fmt_seconds(elapsed).c_str());
      log << buf << std::flush;
    }
    if (log_now) window_loss = 0, window_n = 0;
    if (opt.eval_every > 0 && step % opt.eval_every == 0 && step != total_steps) {
      EvalResult ev = evaluate(*model, vocab, split.valid, opt.batch, opt.eval_max);
      metrics << step << ",valid," << ev.loss << ",,,,," << ev.exact_match << "\n";
      if (bar) std::fprintf(stderr, "\n");
      log << "eval at step " << step << ": validation loss " << ev.loss << ", exact match "
          << 100 * ev.exact_match << "% of " << ev.examples << "\n";
    }
    if (opt.save_every > 0 && step % opt.save_every == 0) {
      save(step);
      last_saved = step;
    }
  }
  if (bar) std::fprintf(stderr, "\n");
  rep.last_step = step;
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  rep.tokens_per_second = rep.seconds > 0 ? static_cast<double>(tokens_done) / rep.seconds : 0;
  if (last_saved != step) save(step);
  tape.clear();
  rep.valid = evaluate(*model, vocab, split.valid, opt.batch, opt.eval_max);
  metrics << step << ",valid," << rep.valid.loss << ",,,,," << rep.valid.exact_match << "\n";
  metrics.close();
  std::ofstream(fs::path(opt.out_dir) / "loss.svg")
      << loss_curve_svg(read_loss_series(metrics_path), "seqtape training loss");
  char buf[256];
  std::snprintf(
      buf, sizeof buf, "validation: loss %.4f, greedy exact match %.2f%% (%lld examples%s)\n",
      rep.valid.loss, 100 * rep.valid.exact_match, static_cast<long long>(rep.valid.examples),
      valid_is_train ? ", the training set" : ", held out");
  log << buf;
  for (const auto& [src, got] : rep.valid.samples)
    log << "  greedy decode: " << src << " -> " << got << "\n";
  log << "wrote " << ckpt_path << ", " << metrics_path << ", "
      << (fs::path(opt.out_dir) / "loss.svg").string() << "\n";
  tape.set_anomaly(false);
  return rep;
}

}  // namespace seqtape
