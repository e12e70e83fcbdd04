// The F15 run, number by number: a plain KV-cached forward in double precision.
//
// Dimension key: N positions fed in a round, K cache length after it, C d_model = 4,
//                F d_ff = 8, V vocabulary = 7.

#include "reference/f15_run.h"

#include <charconv>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "reference/f15.h"

namespace seqtape::reference {

namespace {

using Vec = std::vector<double>;
using Mat = std::vector<Vec>;

// The parameter as a matrix [rows, cols] (a vector is one row).
Mat as_mat(const DecoderOnly& model, const std::string& name) {
  const Tensor& t = model.parameter(name).value();
  const int64_t cols = t.dim(-1), rows = t.numel() / cols;
  Mat m(static_cast<size_t>(rows), Vec(static_cast<size_t>(cols)));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      m[static_cast<size_t>(i)][static_cast<size_t>(j)] = t.get(i * cols + j);
  return m;
}

// y = x·W + b for one row x [in], W [in, out], b [out].
Vec affine(const Vec& x, const Mat& w, const Vec& b) {
  Vec y = b;
  for (size_t i = 0; i < x.size(); ++i)
    for (size_t j = 0; j < y.size(); ++j) y[j] += x[i] * w[i][j];
  return y;
}

Vec add(const Vec& a, const Vec& b) {
  Vec y = a;
  for (size_t i = 0; i < y.size(); ++i) y[i] += b[i];
  return y;
}

Vec softmax(const Vec& z) {
  double m = -std::numeric_limits<double>::infinity();
  for (double v : z) m = std::max(m, v);
  Vec p(z.size());
  double s = 0;
  for (size_t i = 0; i < z.size(); ++i) s += p[i] = std::exp(z[i] - m);
  for (double& v : p) v /= s;
  return p;
}

double r6(double x) {
  double r = std::round(x * 1e6) / 1e6;
  return r == 0 ? 0.0 : r;  // no -0
}

nlohmann::json rounded(const Vec& v) {
  nlohmann::json j = nlohmann::json::array();
  for (double x : v) j.push_back(r6(x));
  return j;
}

nlohmann::json rounded(const Mat& m) {
  nlohmann::json j = nlohmann::json::array();
  for (const Vec& v : m) j.push_back(rounded(v));
  return j;
}

// A float parameter as its shortest round-trip decimal (0.37f → 0.37).
double exact(double v) {
  char buf[32];
  auto res = std::to_chars(buf, buf + sizeof buf, static_cast<float>(v));
  return std::stod(std::string(buf, res.ptr));
}

nlohmann::json parameter_json(const Tensor& t) {
  nlohmann::json j;
  j["shape"] = t.shape();
  if (t.ndim() == 1) {
    j["value"] = nlohmann::json::array();
    for (int64_t i = 0; i < t.numel(); ++i) j["value"].push_back(exact(t.get(i)));
  } else {
    const int64_t cols = t.dim(-1);
    j["value"] = nlohmann::json::array();
    for (int64_t r = 0; r < t.numel() / cols; ++r) {
      nlohmann::json row = nlohmann::json::array();
      for (int64_t c = 0; c < cols; ++c) row.push_back(exact(t.get(r * cols + c)));
      j["value"].push_back(row);
    }
  }
  return j;
}

// The F15 weights as double matrices, by role.
struct F15Weights {
  Mat embed;           // [V, C]
  Mat wq, wk, wv, wo;  // [C, C]
  Vec bq, bk, bv, bo;  // [C]
  Mat w1, w2;          // [C, F], [F, C]
  Vec b1, b2;          // [F], [C]
  Mat wout;            // [C, V]
  Vec bout;            // [V]
  double scale = 1;    // 1/√Dh, H = 1
};

F15Weights f15_weights(const DecoderOnly& model) {
  const std::string L = "decoder.layers.0.";
  auto row = [&](const std::string& name) { return as_mat(model, name)[0]; };
  F15Weights w;
  w.embed = as_mat(model, "embed.weight");
  w.wq = as_mat(model, L + "self_attn.wq");
  w.wk = as_mat(model, L + "self_attn.wk");
  w.wv = as_mat(model, L + "self_attn.wv");
  w.wo = as_mat(model, L + "self_attn.wo");
  w.bq = row(L + "self_attn.bq");
  w.bk = row(L + "self_attn.bk");
  w.bv = row(L + "self_attn.bv");
  w.bo = row(L + "self_attn.bo");
  w.w1 = as_mat(model, L + "ffn.w1");
  w.w2 = as_mat(model, L + "ffn.w2");
  w.b1 = row(L + "ffn.b1");
  w.b2 = row(L + "ffn.b2");
  w.wout = as_mat(model, "out_proj.weight");
  w.bout = row("out_proj.bias");
  w.scale = 1.0 / std::sqrt(static_cast<double>(model.config().d_model));
  return w;
}

// The cache the plain forward keeps across rounds: K and V rows [K, C].
struct F15Cache {
  Mat k, v;
};

// Every intermediate of one round, one row per fed position.
struct RoundValues {
  std::vector<int64_t> positions;
  Mat x, q, kn, vn;             // [N, C]
  Mat scores, weights;          // [N, pos + 1] (ragged: causal)
  Mat ctx, attn, h1, pre, act;  // [N, C] except pre, act [N, F]
  Mat fo, h;                    // [N, C]
};

// Projects the fed tokens and appends their K/V to the cache.
void project_fed(const F15Weights& w, const std::vector<int32_t>& fed, int64_t processed,
                 F15Cache& cache, RoundValues& r) {
  for (size_t n = 0; n < fed.size(); ++n) {
    r.positions.push_back(processed + static_cast<int64_t>(n));
    r.x.push_back(w.embed[static_cast<size_t>(fed[n])]);  // [C]
    r.q.push_back(affine(r.x.back(), w.wq, w.bq));        // [C]
    r.kn.push_back(affine(r.x.back(), w.wk, w.bk));       // [C]
    r.vn.push_back(affine(r.x.back(), w.wv, w.bv));       // [C]
    cache.k.push_back(r.kn.back());
    cache.v.push_back(r.vn.back());
  }
}

// Attention over the cache, residual, FFN, residual: for fed position n.
void attend_and_ffn(const F15Weights& w, const F15Cache& cache, size_t n, RoundValues& r) {
  const size_t pos = static_cast<size_t>(r.positions[n]);
  Vec s;
  for (size_t j = 0; j <= pos; ++j) {  // causal: keys 0..pos
    double d = 0;
    for (size_t c = 0; c < r.q[n].size(); ++c) d += r.q[n][c] * cache.k[j][c];
    s.push_back(d * w.scale);
  }
  Vec p = softmax(s);  // [pos + 1]
  Vec cx(r.q[n].size(), 0.0);
  for (size_t j = 0; j <= pos; ++j)
    for (size_t c = 0; c < cx.size(); ++c) cx[c] += p[j] * cache.v[j][c];
  r.scores.push_back(s);
  r.weights.push_back(p);
  r.ctx.push_back(cx);
  r.attn.push_back(affine(cx, w.wo, w.bo));          // [C]
  r.h1.push_back(add(r.x[n], r.attn.back()));        // [C]
  r.pre.push_back(affine(r.h1.back(), w.w1, w.b1));  // [F]
  Vec a = r.pre.back();
  for (double& v : a) v = std::tanh(v);
  r.act.push_back(a);                            // [F]
  r.fo.push_back(affine(a, w.w2, w.b2));         // [C]
  r.h.push_back(add(r.h1.back(), r.fo.back()));  // [C]
}

void put_values(const RoundValues& v, const F15Cache& cache, nlohmann::json& r) {
  r["positions"] = v.positions;
  r["x"] = rounded(v.x);
  r["q"] = rounded(v.q);
  r["k_new"] = rounded(v.kn);
  r["v_new"] = rounded(v.vn);
  r["k_cache"] = rounded(cache.k);
  r["v_cache"] = rounded(cache.v);
  r["scores"] = rounded(v.scores);
  r["weights"] = rounded(v.weights);
  r["context"] = rounded(v.ctx);
  r["attn_out"] = rounded(v.attn);
  r["h1"] = rounded(v.h1);
  r["ffn_pre"] = rounded(v.pre);
  r["ffn_act"] = rounded(v.act);
  r["ffn_out"] = rounded(v.fo);
  r["h"] = rounded(v.h);
}

double max_abs_diff(const Vec& a, const Vec& b) {
  double d = 0;
  for (size_t j = 0; j < a.size(); ++j) d = std::max(d, std::abs(a[j] - b[j]));
  return d;
}

int32_t argmax(const Vec& logits) {
  int32_t best = 0;
  for (size_t j = 1; j < logits.size(); ++j)
    if (logits[j] > logits[static_cast<size_t>(best)]) best = static_cast<int32_t>(j);
  return best;
}

// The logits of the round and how they compare with the training model's full recompute and
// with the cached engine's round (when it ran that far).
int32_t put_logits(DecoderOnly& model, const Vocab& vocab, const Vec& h_last, const F15Weights& w,
                   const std::vector<int32_t>& sequence, const Round* engine, nlohmann::json& r) {
  const Vec logits = affine(h_last, w.wout, w.bout);  // [V]
  const Vec probs = softmax(logits);                  // [V]
  const int32_t best = argmax(logits);
  const std::vector<double> full = last_logits(model, sequence);  // training model, whole prefix
  r["logits"] = rounded(logits);
  r["probs"] = rounded(probs);
  r["selected"] = {
      {"id", best}, {"token", vocab.token(best)}, {"prob", r6(probs[static_cast<size_t>(best)])}};
  r["recompute_logits"] = rounded(Vec(full.begin(), full.end()));
  r["max_abs_delta_recompute"] = max_abs_diff(full, logits);
  if (engine) {
    r["cached_engine_logits"] = rounded(engine->logits);
    r["max_abs_delta_cached_engine"] = max_abs_diff(engine->logits, logits);
  }
  return best;
}

nlohmann::json run_description(DecoderOnly& model, const Vocab& vocab) {
  nlohmann::json out;
  out["what"] =
      "F15 (reference document 000): every parameter of the tiny decoder-only model and every "
      "intermediate value of the greedy run from 我爱, computed by a plain KV-cached forward in "
      "double precision. Parameters are exact (float32 values as shortest decimals); "
      "intermediates are rounded to 6 decimals. Layout: y = x·W + b, W stored [in, out].";
  out["regenerate"] = "seqtape walkthrough --write-f15 datasets/f15";
  out["vocab"] = vocab.tokens();
  out["config"] = model.config().to_json();
  out["forward"] = {
      "x = embed[token]                                  (no positional encoding)",
      "q, k, v = x·wq + bq, x·wk + bk, x·wv + bv         (k, v appended to the cache)",
      "scores[j] = q·k_cache[j] / sqrt(4) for cached positions j <= i (causal)",
      "weights = softmax(scores); context = Σ_j weights[j]·v_cache[j]",
      "attn_out = context·wo + bo;  h1 = x + attn_out    (residual, no norm)",
      "ffn_pre = h1·w1 + b1;  ffn_act = tanh(ffn_pre);  ffn_out = ffn_act·w2 + b2",
      "h = h1 + ffn_out                                  (residual, no norm)",
      "logits = h[last]·out_proj.weight + out_proj.bias;  probs = softmax(logits)",
      "greedy: selected = argmax(logits)"};
  nlohmann::json params = nlohmann::json::object();
  for (const auto& [name, p] : model.named_parameters()) params[name] = parameter_json(p.value());
  out["parameters"] = params;
  return out;
}

}  // namespace

nlohmann::json f15_run_json(DecoderOnly& model) {
  const Vocab vocab = f15_vocab();
  const F15Weights w = f15_weights(model);
  nlohmann::json out = run_description(model, vocab);
  std::vector<int32_t> sequence = {kF15Wo, kF15Ai};
  out["prompt"] = {{"text", "我爱"}, {"ids", sequence}};
  // The same run on the real KV-cached decoder (infer/, float32), for comparison.
  const std::vector<Round> engine = greedy_rounds_cached(model, vocab, sequence, 8).rounds;
  F15Cache cache;
  int64_t processed = 0;
  nlohmann::json rounds = nlohmann::json::array();
  std::vector<int32_t> selections;
  std::vector<int64_t> cache_lengths;
  for (int round = 0; round < 8; ++round) {
    nlohmann::json r = {{"round", round + 1}, {"phase", round == 0 ? "prefill" : "decode"}};
    const auto at = static_cast<size_t>(round);
    const std::vector<int32_t> fed(sequence.begin() + processed, sequence.end());
    r["fed"] = fed;
    r["cache_before"] = processed;
    RoundValues v;
    project_fed(w, fed, processed, cache, v);
    for (size_t n = 0; n < fed.size(); ++n) attend_and_ffn(w, cache, n, v);
    processed = static_cast<int64_t>(sequence.size());
    put_values(v, cache, r);
    const int32_t best = put_logits(model, vocab, v.h.back(), w, sequence,
                                    at < engine.size() ? &engine[at] : nullptr, r);
    r["cache_after"] = processed;
    sequence.push_back(best);  // selected, not yet processed
    r["sequence"] = sequence;
    const bool eos = best == vocab.eos_id();
    r["stop"] = {{"stopped", eos},
                 {"reason", eos ? nlohmann::json("eos") : nlohmann::json(nullptr)}};
    rounds.push_back(r);
    selections.push_back(best);
    cache_lengths.push_back(processed);
    if (eos) break;
  }
  out["rounds"] = rounds;
  out["result"] = {{"selections", selections}, {"cache_lengths", cache_lengths}};
  return out;
}

double json_max_abs_diff(const nlohmann::json& a, const nlohmann::json& b) {
  const double inf = std::numeric_limits<double>::infinity();
  if (a.is_number() && b.is_number()) return std::abs(a.get<double>() - b.get<double>());
  if (a.type() != b.type()) return inf;
  if (a.is_array()) {
    if (a.size() != b.size()) return inf;
    double m = 0;
    for (size_t i = 0; i < a.size(); ++i) m = std::max(m, json_max_abs_diff(a[i], b[i]));
    return m;
  }
  if (a.is_object()) {
    if (a.size() != b.size()) return inf;
    double m = 0;
    for (auto it = a.begin(); it != a.end(); ++it) {
      if (!b.contains(it.key())) return inf;
      m = std::max(m, json_max_abs_diff(it.value(), b.at(it.key())));
    }
    return m;
  }
  return a == b ? 0.0 : inf;
}

}  // namespace seqtape::reference
