// F15: the tiny decoder-only model, its fitted head, its checkpoint and its greedy rounds.
//
// Dimension key: B batch (3 prefixes), T positions, C d_model = 4, F d_ff = 8, V vocabulary = 7.

#include "reference/f15.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "autograd/ops.h"
#include "infer/trace.h"
#include "io/weights.h"
#include "nn/loss.h"
#include "reference/f15_run.h"
#include "tensor/kernels.h"
#include "tensor/rng.h"
#include "train/model_io.h"
#include "train/optim.h"

namespace seqtape::reference {

namespace fs = std::filesystem;

std::vector<std::string> f15_tokens() {
  return {"<pad>", "我", "爱", "学习", "<bos>", "！", "<eos>"};
}

Vocab f15_vocab() {
  return Vocab::from_tokens(f15_tokens(), "f15_vocab");
}

ModelConfig f15_config() {
  ModelConfig c;
  c.arch = Arch::DecoderOnly;
  c.vocab_size = 7;
  c.d_model = 4;
  c.n_heads = 1;
  c.n_encoder_layers = 0;
  c.n_decoder_layers = 1;
  c.d_ff = 8;
  c.activation = Activation::Tanh;
  c.norm = NormPlacement::None;
  c.pos_encoding = PosEncoding::None;
  c.dropout = 0.0;
  c.max_positions = 16;
  c.init_seed = kF15Seed;
  c.validate();
  return c;
}

std::vector<F15Prefix> f15_training_prefixes() {
  return {{{kF15Wo, kF15Ai}, kF15Xuexi},
          {{kF15Wo, kF15Ai, kF15Xuexi}, kF15Bang},
          {{kF15Wo, kF15Ai, kF15Xuexi, kF15Bang}, kF15Eos}};
}

namespace {

bool is_head(const std::string& name) {
  return name.rfind("out_proj.", 0) == 0;
}

double round_to(double x, double step) {
  return std::round(x / step) * step;
}

void set_values(Var& p, const std::vector<double>& v) {
  Tensor& t = p.mutable_value();
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, v[static_cast<size_t>(i)]);
}

// The three prefixes as one right-padded batch: tokens [B, T], lengths [B], and labels [B·T]
// that are -100 everywhere except at each row's last valid position.
struct PrefixBatch {
  int64_t B = 0, T = 0;
  std::vector<int32_t> tokens, len, labels;
};

PrefixBatch prefix_batch() {
  PrefixBatch b;
  auto pre = f15_training_prefixes();
  b.B = static_cast<int64_t>(pre.size());
  for (const auto& p : pre) b.T = std::max<int64_t>(b.T, static_cast<int64_t>(p.prefix.size()));
  b.tokens.assign(static_cast<size_t>(b.B * b.T), kF15Pad);  // [B, T]
  b.labels.assign(static_cast<size_t>(b.B * b.T), -100);     // [B·T]
  for (int64_t i = 0; i < b.B; ++i) {
    const auto& p = pre[static_cast<size_t>(i)];
    std::copy(p.prefix.begin(), p.prefix.end(), b.tokens.begin() + i * b.T);
    b.len.push_back(static_cast<int32_t>(p.prefix.size()));
    b.labels[static_cast<size_t>(i * b.T + static_cast<int64_t>(p.prefix.size()) - 1)] = p.next;
  }
  return b;
}

// Per prefix: probability of the target and target logit minus the best other logit.
void measure(DecoderOnly& model, std::vector<double>& prob, std::vector<double>& margin) {
  prob.clear();
  margin.clear();
  for (const auto& p : f15_training_prefixes()) {
    std::vector<double> z = last_logits(model, p.prefix);  // [V]
    std::vector<double> pr(z.size());
    kernels::softmax_rows(z.data(), pr.data(), 1, static_cast<int64_t>(z.size()));
    double best_other = -INFINITY;
    for (size_t j = 0; j < z.size(); ++j)
      if (static_cast<int32_t>(j) != p.next) best_other = std::max(best_other, z[j]);
    prob.push_back(pr[static_cast<size_t>(p.next)]);
    margin.push_back(z[static_cast<size_t>(p.next)] - best_other);
  }
}

std::vector<Candidate> ranked(const std::vector<double>& logits, const std::vector<double>& probs,
                              const Vocab& vocab) {
  std::vector<Candidate> c;
  for (size_t j = 0; j < logits.size(); ++j)
    c.push_back(
        {static_cast<int32_t>(j), vocab.token(static_cast<int32_t>(j)), logits[j], probs[j]});
  // Highest score first; ties by id so the order is deterministic (argmax takes the first).
  std::stable_sort(c.begin(), c.end(),
                   [](const Candidate& a, const Candidate& b) { return a.logit > b.logit; });
  return c;
}

}  // namespace

int64_t layer_of(const std::string& name) {
  const auto at = name.find("layers.");
  return at == std::string::npos ? 0 : std::stoll(name.substr(at + 7));
}

std::unique_ptr<DecoderOnly> f15_base_model() {
  auto model = std::make_unique<DecoderOnly>(f15_config());
  Rng rng(kF15Seed);
  for (auto& [name, p] : model->named_parameters()) {
    std::vector<double> v(static_cast<size_t>(p.numel()), 0.0);
    if (!is_head(name))
      for (double& x : v) x = round_to(2.0 * rng.uniform() - 1.0, 0.01);
    Var param = p;
    set_values(param, v);
  }
  return model;
}

std::vector<double> last_logits(DecoderOnly& model, const std::vector<int32_t>& prefix) {
  NoGradGuard no_grad;
  Rng rng(0);
  const auto T = static_cast<int64_t>(prefix.size());
  Var logits = model.forward(prefix, 1, T, {static_cast<int32_t>(T)}, rng);  // [1, T, V]
  const int64_t V = logits.dim(2);
  std::vector<double> out(static_cast<size_t>(V));
  for (int64_t j = 0; j < V; ++j) out[static_cast<size_t>(j)] = logits.value().get((T - 1) * V + j);
  return out;
}

F15Fit fit_f15_head(DecoderOnly& model) {
  F15Fit fit;
  fit.lr = 1.0;
  const int64_t max_steps = 5000;
  model.set_training(false);  // no dropout anyway; the forward is the evaluation forward
  model.set_requires_grad("", false);
  model.set_requires_grad("out_proj", true);
  NamedParams params = model.named_parameters();
  OptimizerConfig ocfg;
  ocfg.kind = "sgd";
  std::unique_ptr<Optimizer> sgd = make_optimizer(params, ocfg);
  PrefixBatch b = prefix_batch();
  Tape& tape = Tape::current();
  Rng rng(0);
  std::vector<double> prob, margin;
  for (int64_t step = 1;; ++step) {
    tape.clear();
    for (auto& [n, p] : params) p.zero_grad();
    Var logits = model.forward(b.tokens, b.B, b.T, b.len, rng);  // [B, T, V]
    Var loss = sequence_loss(logits, b.labels);                  // []
    if (step == 1) fit.first_loss = loss.item();
    tape.backward(loss);
    fit.frozen_without_grad = 0;
    for (auto& [n, p] : params) {
      if (is_head(n)) continue;
      if (p.has_grad()) fail("fit_f15_head", "frozen parameter '" + n + "' received a gradient");
      ++fit.frozen_without_grad;
    }
    sgd->step(fit.lr);
    fit.steps = step;
    tape.clear();
    measure(model, prob, margin);
    if (*std::min_element(prob.begin(), prob.end()) >= 0.9) break;
    if (step >= max_steps)
      fail("fit_f15_head", "the head did not reach probability 0.9 on every prefix in " +
                               std::to_string(max_steps) + " steps");
  }
  // Publish exact numbers: round the head to 3 decimals, then check the result again.
  for (auto& [n, p] : params) {
    if (!is_head(n)) continue;
    std::vector<double> v = p.value().to_vector();
    for (double& x : v) x = round_to(x, 0.001);
    Var param = p;
    set_values(param, v);
  }
  model.set_requires_grad("", true);
  measure(model, fit.target_prob, fit.margin);
  {
    NoGradGuard no_grad;
    Var logits = model.forward(b.tokens, b.B, b.T, b.len, rng);
    fit.final_loss = sequence_loss(logits, b.labels).item();
  }
  for (size_t i = 0; i < fit.margin.size(); ++i)
    if (!(fit.margin[i] > 1.0))
      fail("fit_f15_head", "prefix " + std::to_string(i) + " has margin " +
                               std::to_string(fit.margin[i]) + " after rounding, expected > 1");
  return fit;
}

F15Model make_f15_model() {
  F15Model m;
  m.model = f15_base_model();
  m.fit = fit_f15_head(*m.model);
  return m;
}

Checkpoint f15_checkpoint(const DecoderOnly& model, const F15Fit& fit) {
  Checkpoint c;
  c.config_json = model.config().to_json().dump();
  c.vocab = f15_tokens();
  c.params = named_tensors(model);
  c.optimizer_name = "sgd";  // plain SGD keeps no state
  c.step = fit.steps;
  c.rng_state = Rng(kF15Seed).state();
  nlohmann::json loader = {
      {"epoch", 0}, {"cursor", 0}, {"order", {0, 1, 2}}, {"rng", Rng(kF15Seed).state()}};
  c.loader_state_json = loader.dump();
  nlohmann::json metrics = {{"fit", "out_proj only, full-batch SGD on 3 prefixes"},
                            {"steps", fit.steps},
                            {"lr", fit.lr},
                            {"first_loss", fit.first_loss},
                            {"final_loss", fit.final_loss},
                            {"target_prob", fit.target_prob},
                            {"margin", fit.margin}};
  c.metrics_json = metrics.dump();
  return c;
}

F15Model write_f15(const std::string& dir) {
  fs::create_directories(dir);
  F15Model m = make_f15_model();
  f15_vocab().save((fs::path(dir) / "vocab.txt").string());
  save_checkpoint((fs::path(dir) / "checkpoint.bin").string(), f15_checkpoint(*m.model, m.fit));
  std::ofstream run(fs::path(dir) / "run.json", std::ios::binary);
  run << f15_run_json(*m.model).dump(1) << "\n";
  if (!run) fail((fs::path(dir) / "run.json").string(), "write failed");
  return m;
}

std::unique_ptr<DecoderOnly> load_f15_model(const std::string& checkpoint_path) {
  const Checkpoint c = load_checkpoint(checkpoint_path);
  auto model = std::make_unique<DecoderOnly>(checkpoint_config(c, checkpoint_path));
  load_params_into(*model, c.params, checkpoint_path);
  return model;
}

namespace {

// The captured attention of a recomputed round [1, H, T, T], kept for the positions it fed.
void add_attention_rows(const std::vector<AttentionWeights>& weights, int64_t T, Round& round) {
  for (const AttentionWeights& aw : weights) {
    const int64_t H = aw.weights.dim(1);  // [1, H, T, T]
    for (int64_t h = 0; h < H; ++h) {
      AttentionRows a;
      a.name = aw.name;
      a.layer = layer_of(aw.name);
      a.head = h;
      a.kind = aw.name.find("cross") != std::string::npos ? "cross" : "self";
      for (int64_t j = 0; j < T; ++j) a.cols.push_back(j);
      for (int64_t i = round.cache_before; i < T; ++i) {
        a.rows.push_back(i);
        std::vector<double> w;
        for (int64_t j = 0; j < T; ++j) w.push_back(aw.weights.get((h * T + i) * T + j));
        a.weights.push_back(w);
      }
      round.attention.push_back(a);
    }
  }
}

}  // namespace

std::vector<Round> greedy_rounds_recompute(DecoderOnly& model, const Vocab& vocab,
                                           const std::vector<int32_t>& prompt, int64_t max_new,
                                           int64_t top_k) {
  if (prompt.empty()) fail("greedy_rounds_recompute", "empty prompt");
  NoGradGuard no_grad;
  model.set_training(false);
  model.set_capture_attention(true);
  std::vector<Round> rounds;
  std::vector<int32_t> sequence = prompt;  // everything selected so far, prompt included
  int64_t processed = 0;                   // tokens whose K/V a cache would hold
  Rng rng(0);
  for (int64_t r = 0; r < max_new; ++r) {
    Round round;
    round.index = r;
    round.phase = r == 0 ? "prefill" : "decode";
    round.cache_before = processed;
    round.fed.assign(sequence.begin() + processed, sequence.end());  // the pending tokens
    processed = static_cast<int64_t>(sequence.size());
    round.cache_after = processed;
    const int64_t T = processed;
    Var logits = model.forward(sequence, 1, T, {static_cast<int32_t>(T)}, rng);  // [1, T, V]
    const int64_t V = logits.dim(2);
    round.logits.resize(static_cast<size_t>(V));
    for (int64_t j = 0; j < V; ++j)
      round.logits[static_cast<size_t>(j)] = logits.value().get((T - 1) * V + j);
    round.probs.resize(round.logits.size());
    kernels::softmax_rows(round.logits.data(), round.probs.data(), 1, V);
    std::vector<Candidate> c = ranked(round.logits, round.probs, vocab);
    round.selected = c.front();
    c.resize(static_cast<size_t>(std::min<int64_t>(top_k, V)));
    round.top = c;
    add_attention_rows(model.attention_weights(), T, round);
    sequence.push_back(round.selected.id);  // selected, not yet processed
    round.sequence = sequence;
    if (round.selected.id == vocab.eos_id())
      round.stop = "eos";
    else if (r + 1 == max_new)
      round.stop = "length";
    rounds.push_back(round);
    if (round.stop) break;
  }
  model.set_capture_attention(false);
  return rounds;
}

CachedRun greedy_rounds_cached(const DecoderOnly& model, const Vocab& vocab,
                               const std::vector<int32_t>& prompt, int64_t max_new, int64_t top_k) {
  InferenceModel im(model.config(), vocab, named_tensors(model), "F15 model");  // shares storage
  GenerateOptions opt;
  opt.max_new = max_new;
  TraceOptions topt;
  topt.top_candidates = top_k;
  topt.source = "seqtape walkthrough (infer/ KV cache)";
  Tokenizer tok(vocab);
  topt.input_text = tok.decode(prompt);
  CachedRun run;
  run.trace = generate_traced(im, prompt, opt, GreedySearch(), topt).trace;
  for (const nlohmann::json& st : run.trace.at("steps")) {
    Round r;
    r.index = st.at("index").get<int64_t>();
    r.phase = st.at("phase").get<std::string>();
    r.fed = st.at("fed").get<std::vector<int32_t>>();
    r.cache_before = st.at("cache_before").get<int64_t>();
    r.cache_after = st.at("cache_after").get<int64_t>();
    r.logits = st.at("logits").get<std::vector<double>>();
    r.probs.resize(r.logits.size());
    kernels::softmax_rows(r.logits.data(), r.probs.data(), 1,
                          static_cast<int64_t>(r.logits.size()));
    for (const nlohmann::json& c : st.at("candidates"))
      r.top.push_back({c.at("id").get<int32_t>(), c.at("token").get<std::string>(),
                       c.at("logit").get<double>(), c.at("prob").get<double>()});
    const int32_t id = st.at("selected").at("id").get<int32_t>();
    r.selected = {id, vocab.token(id), r.logits[static_cast<size_t>(id)],
                  st.at("selected").at("prob").get<double>()};
    if (st.at("stop").at("stopped").get<bool>())
      r.stop = st.at("stop").at("reason").get<std::string>();
    r.sequence = st.at("sequence").get<std::vector<int32_t>>();
    for (const nlohmann::json& a : st.at("attention")) {
      AttentionRows ar;
      ar.name = a.at("name").get<std::string>();
      ar.layer = a.at("layer").get<int64_t>();
      ar.head = a.at("head").get<int64_t>();
      ar.kind = a.at("kind").get<std::string>();
      ar.rows = a.at("rows").get<std::vector<int64_t>>();
      ar.cols = a.at("cols").get<std::vector<int64_t>>();
      ar.weights = a.at("weights").get<std::vector<std::vector<double>>>();
      r.attention.push_back(ar);
    }
    if (!st.at("max_abs_delta").is_null()) r.max_abs_delta = st.at("max_abs_delta").get<double>();
    run.rounds.push_back(r);
  }
  return run;
}

OutputHeadExample output_head_example() {
  OutputHeadExample ex;
  ex.h = {1, 2};
  ex.w = {{0, 1, 0, 1, -1, 0}, {0, 0, 1, 1, 0, -1}};
  NoGradGuard no_grad;
  Var h(Tensor::from(ex.h, {1, 2}));  // [1, C=2]
  std::vector<double> flat;
  for (const auto& row : ex.w) flat.insert(flat.end(), row.begin(), row.end());
  Var w(Tensor::from(flat, {2, 6}));  // [C=2, V=6]
  Var s = matmul(h, w);               // [1, V=6]
  ex.scores = s.value().to_vector();
  ex.argmax = std::max_element(ex.scores.begin(), ex.scores.end()) - ex.scores.begin();
  return ex;
}

std::vector<StateRow> state_example(DecoderOnly& model) {
  // The real cache: a DecodeSession over the model's weights. output = every token selected so
  // far (prompt included); cache = the session's processed positions; pending = the rest.
  InferenceModel im(model.config(), f15_vocab(), named_tensors(model), "F15 model");
  DecodeSession session(im);
  session.begin({}, {0}, 8);
  const int64_t V = im.config().vocab_size;
  auto argmax = [V](const float* z) {
    return static_cast<int32_t>(std::max_element(z, z + V) - z);
  };
  std::vector<StateRow> rows;
  std::vector<int32_t> output = {kF15Wo, kF15Ai, kF15Xuexi};
  auto row = [&](const std::string& event) {
    const int64_t cache = session.length(0);
    rows.push_back({event, output, cache, {output.begin() + cache, output.end()}});
  };
  const std::vector<int32_t> row0 = {0};
  row("prompt given");
  output.push_back(argmax(session.prefill(row0, {output})));  // processes the 3 prompt tokens
  row("prefill, then select");
  const std::vector<int32_t> fed = {output.back()};
  output.push_back(argmax(session.step(row0, fed)));  // processes the selected token
  row("decode, then select");
  return rows;
}

int32_t greedy_pick(const std::vector<int32_t>& ids, const std::vector<double>& probs) {
  if (ids.empty() || ids.size() != probs.size())
    fail("greedy_pick", std::to_string(ids.size()) + " ids and " + std::to_string(probs.size()) +
                            " probabilities");
  return ids[static_cast<size_t>(std::max_element(probs.begin(), probs.end()) - probs.begin())];
}

}  // namespace seqtape::reference
