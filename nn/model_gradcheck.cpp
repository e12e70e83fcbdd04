#include "nn/model_gradcheck.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>
#include <sstream>

#include "nn/loss.h"
#include "nn/transformer.h"

namespace seqtape {

namespace {

std::vector<int64_t> sample_coords(int64_t numel, int64_t k, Rng& rng) {
  std::vector<int64_t> out;
  if (numel <= k) {
    for (int64_t i = 0; i < numel; ++i) out.push_back(i);
    return out;
  }
  std::set<int64_t> picked;
  while (static_cast<int64_t>(picked.size()) < k)
    picked.insert(static_cast<int64_t>(rng.below(static_cast<uint64_t>(numel))));
  return {picked.begin(), picked.end()};
}

}  // namespace

std::vector<ModelGradcheckRow> model_gradcheck(Module& model, const std::function<Var()>& loss_fn,
                                               const ModelGradcheckOptions& opt) {
  auto params = model.named_parameters();
  for (const auto& [name, p] : params)
    if (p.dtype() != DType::F64)
      fail("model_gradcheck", "parameter '" + name + "' is " + dtype_name(p.dtype()) +
                                  "; a central difference with eps " + std::to_string(opt.eps) +
                                  " needs float64");
  TrainingModeGuard eval(model, false);
  Tape& tape = Tape::current();

  // Analytic gradients from one tape backward.
  tape.clear();
  model.zero_grad();
  Var loss = loss_fn();
  if (loss.numel() != 1)
    fail("model_gradcheck", "loss must have one element, got " + shape_str(loss.shape()));
  tape.backward(loss);
  std::vector<Tensor> analytic;
  for (const auto& [name, p] : params)
    analytic.push_back(p.has_grad() ? p.grad().clone() : Tensor::zeros_like(p.value()));
  tape.clear();

  Rng rng(opt.seed);
  std::vector<ModelGradcheckRow> rows;
  NoGradGuard no_grad;
  for (size_t k = 0; k < params.size(); ++k) {
    const auto& [name, p] = params[k];
    if (!p.requires_grad()) continue;
    ModelGradcheckRow row;
    row.name = name;
    row.shape = p.shape();
    Tensor& w = Var(p).mutable_value();
    for (int64_t i : sample_coords(p.numel(), opt.coords_per_param, rng)) {
      const double orig = w.get(i);
      w.set(i, orig + opt.eps);
      const double lp = loss_fn().item();
      w.set(i, orig - opt.eps);
      const double lm = loss_fn().item();
      w.set(i, orig);
      const double numeric = (lp - lm) / (2.0 * opt.eps);
      const double a = analytic[k].get(i);
      const double err = std::abs(a - numeric);
      row.max_abs_err = std::max(row.max_abs_err, err);
      if (numeric != 0.0) row.max_rel_err = std::max(row.max_rel_err, err / std::abs(numeric));
      if (!(err <= opt.atol + opt.rtol * std::abs(numeric))) row.pass = false;
      ++row.coords_checked;
    }
    rows.push_back(row);
  }
  return rows;
}

std::vector<ModelGradcheckRow> gradcheck_config(const ModelConfig& cfg_in,
                                                const ModelGradcheckOptions& opt) {
  ModelConfig cfg = cfg_in;
  cfg.dropout = 0.0;
  cfg.validate();
  const int64_t B = 2;
  const int64_t S = std::min<int64_t>(5, cfg.max_positions);
  const int64_t T = std::min<int64_t>(4, cfg.max_positions);
  const std::vector<int32_t> src_len = {static_cast<int32_t>(S),
                                        static_cast<int32_t>(std::max<int64_t>(1, S - 2))};
  const std::vector<int32_t> tgt_len = {static_cast<int32_t>(T),
                                        static_cast<int32_t>(std::max<int64_t>(1, T - 2))};
  Rng data_rng(opt.seed + 1);
  auto ids = [&](int64_t width, const std::vector<int32_t>& len) {
    std::vector<int32_t> v(static_cast<size_t>(B * width), 0);  // pads hold id 0
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < len[b]; ++t)
        v[b * width + t] = static_cast<int32_t>(data_rng.below(cfg.vocab_size));
    return v;
  };
  const auto src = ids(S, src_len);
  const auto tgt = ids(T, tgt_len);
  auto labels = ids(T, tgt_len);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = tgt_len[b]; t < T; ++t) labels[b * T + t] = -100;

  Batch batch;  // both architectures' fields: each model reads its own
  batch.B = B;
  batch.S = S;
  batch.T = T;
  batch.src = src;
  batch.src_len = src_len;
  batch.tgt_in = batch.tokens = tgt;
  batch.tgt_len = batch.len = tgt_len;
  batch.labels = labels;
  Rng fwd_rng(0);  // unused: dropout is off
  auto model = make_model(cfg, DType::F64);
  return model_gradcheck(
      *model, [&] { return model->loss(batch, fwd_rng); }, opt);
}

bool all_passed(const std::vector<ModelGradcheckRow>& rows) {
  return std::all_of(rows.begin(), rows.end(), [](const ModelGradcheckRow& r) { return r.pass; });
}

std::string format_gradcheck(const std::vector<ModelGradcheckRow>& rows) {
  size_t w = 9;
  for (const auto& r : rows) w = std::max(w, r.name.size());
  std::ostringstream os;
  char buf[256];
  std::snprintf(buf, sizeof buf, "%-*s  %-10s %6s  %11s  %11s  %s\n", static_cast<int>(w),
                "parameter", "shape", "coords", "max_abs", "max_rel", "result");
  os << buf;
  for (const auto& r : rows) {
    std::snprintf(buf, sizeof buf, "%-*s  %-10s %6lld  %11.3e  %11.3e  %s\n", static_cast<int>(w),
                  r.name.c_str(), shape_str(r.shape).c_str(),
                  static_cast<long long>(r.coords_checked), r.max_abs_err, r.max_rel_err,
                  r.pass ? "ok" : "FAIL");
    os << buf;
  }
  return os.str();
}

ModelConfig tiny_gradcheck_config(Arch arch, NormPlacement norm) {
  ModelConfig c;
  c.arch = arch;
  c.vocab_size = 7;
  c.d_model = 4;
  c.n_heads = 2;
  c.n_encoder_layers = arch == Arch::Seq2Seq ? 1 : 0;
  c.n_decoder_layers = 1;
  c.d_ff = 8;
  c.norm = norm;
  c.init_seed = 1;
  return c;
}

}  // namespace seqtape
