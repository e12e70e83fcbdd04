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

}  // namespace

nlohmann::json f15_run_json(DecoderOnly& model) {
  const Vocab vocab = f15_vocab();
  const std::string L = "decoder.layers.0.";
  const Mat embed = as_mat(model, "embed.weight");  // [V, C]
  const Mat wq = as_mat(model, L + "self_attn.wq"), wk = as_mat(model, L + "self_attn.wk"),
            wv = as_mat(model, L + "self_attn.wv"),
            wo = as_mat(model, L + "self_attn.wo");  // [C, C]
  const Vec bq = as_mat(model, L + "self_attn.bq")[0], bk = as_mat(model, L + "self_attn.bk")[0],
            bv = as_mat(model, L + "self_attn.bv")[0],
            bo = as_mat(model, L + "self_attn.bo")[0];                           // [C]
  const Mat w1 = as_mat(model, L + "ffn.w1"), w2 = as_mat(model, L + "ffn.w2");  // [C, F], [F, C]
  const Vec b1 = as_mat(model, L + "ffn.b1")[0], b2 = as_mat(model, L + "ffn.b2")[0];  // [F], [C]
  const Mat wout = as_mat(model, "out_proj.weight");                                   // [C, V]
  const Vec bout = as_mat(model, "out_proj.bias")[0];                                  // [V]
  const double scale =
      1.0 / std::sqrt(static_cast<double>(model.config().d_model));  // 1/√Dh, H = 1

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

  std::vector<int32_t> sequence = {kF15Wo, kF15Ai};
  out["prompt"] = {{"text", "我爱"}, {"ids", sequence}};
  // The same run on the real KV-cached decoder (infer/, float32), for comparison.
  const std::vector<Round> engine = greedy_rounds_cached(model, vocab, sequence, 8).rounds;
  Mat k_cache, v_cache;  // [K, C]
  int64_t processed = 0;
  nlohmann::json rounds = nlohmann::json::array();
  std::vector<int32_t> selections;
  std::vector<int64_t> cache_lengths;
  for (int round = 0; round < 8; ++round) {
    nlohmann::json r;
    r["round"] = round + 1;
    r["phase"] = round == 0 ? "prefill" : "decode";
    std::vector<int32_t> fed(sequence.begin() + processed, sequence.end());
    r["fed"] = fed;
    r["cache_before"] = processed;
    Mat x, q, kn, vn, scores, weights, ctx, attn, h1, pre, act, fo, h;
    std::vector<int64_t> positions;
    for (size_t n = 0; n < fed.size(); ++n) {
      const int64_t pos = processed + static_cast<int64_t>(n);
      positions.push_back(pos);
      x.push_back(embed[static_cast<size_t>(fed[n])]);  // [C]
      q.push_back(affine(x.back(), wq, bq));            // [C]
      kn.push_back(affine(x.back(), wk, bk));           // [C]
      vn.push_back(affine(x.back(), wv, bv));           // [C]
      k_cache.push_back(kn.back());
      v_cache.push_back(vn.back());
    }
    for (size_t n = 0; n < fed.size(); ++n) {
      const size_t pos = static_cast<size_t>(positions[n]);
      Vec s;
      for (size_t j = 0; j <= pos; ++j) {  // causal: keys 0..pos
        double d = 0;
        for (size_t c = 0; c < q[n].size(); ++c) d += q[n][c] * k_cache[j][c];
        s.push_back(d * scale);
      }
      Vec w = softmax(s);  // [pos + 1]
      Vec cx(q[n].size(), 0.0);
      for (size_t j = 0; j <= pos; ++j)
        for (size_t c = 0; c < cx.size(); ++c) cx[c] += w[j] * v_cache[j][c];
      scores.push_back(s);
      weights.push_back(w);
      ctx.push_back(cx);
      attn.push_back(affine(cx, wo, bo));        // [C]
      h1.push_back(add(x[n], attn.back()));      // [C]
      pre.push_back(affine(h1.back(), w1, b1));  // [F]
      Vec a = pre.back();
      for (double& v : a) v = std::tanh(v);
      act.push_back(a);                        // [F]
      fo.push_back(affine(a, w2, b2));         // [C]
      h.push_back(add(h1.back(), fo.back()));  // [C]
    }
    processed = static_cast<int64_t>(sequence.size());
    const Vec logits = affine(h.back(), wout, bout);  // [V]
    const Vec probs = softmax(logits);                // [V]
    int32_t best = 0;
    for (size_t j = 1; j < logits.size(); ++j)
      if (logits[j] > logits[static_cast<size_t>(best)]) best = static_cast<int32_t>(j);
    std::vector<double> full = last_logits(model, sequence);  // training model, whole prefix
    double delta = 0;
    for (size_t j = 0; j < full.size(); ++j) delta = std::max(delta, std::abs(full[j] - logits[j]));

    r["positions"] = positions;
    r["x"] = rounded(x);
    r["q"] = rounded(q);
    r["k_new"] = rounded(kn);
    r["v_new"] = rounded(vn);
    r["k_cache"] = rounded(k_cache);
    r["v_cache"] = rounded(v_cache);
    r["scores"] = rounded(scores);
    r["weights"] = rounded(weights);
    r["context"] = rounded(ctx);
    r["attn_out"] = rounded(attn);
    r["h1"] = rounded(h1);
    r["ffn_pre"] = rounded(pre);
    r["ffn_act"] = rounded(act);
    r["ffn_out"] = rounded(fo);
    r["h"] = rounded(h);
    r["logits"] = rounded(logits);
    r["probs"] = rounded(probs);
    r["selected"] = {
        {"id", best}, {"token", vocab.token(best)}, {"prob", r6(probs[static_cast<size_t>(best)])}};
    r["cache_after"] = processed;
    r["recompute_logits"] = rounded(Vec(full.begin(), full.end()));
    r["max_abs_delta_recompute"] = delta;
    if (static_cast<size_t>(round) < engine.size()) {
      const Vec& el = engine[static_cast<size_t>(round)].logits;
      double de = 0;
      for (size_t j = 0; j < el.size(); ++j) de = std::max(de, std::abs(el[j] - logits[j]));
      r["cached_engine_logits"] = rounded(el);
      r["max_abs_delta_cached_engine"] = de;
    }
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
