// The encoder-decoder document's numbers, computed by the library.
//
// Dimension key: B batch, S source length, T target length, C d_model = 4, V vocabulary.

#include "reference/encdec.h"

#include <cmath>
#include <limits>

#include "model/sinusoidal.h"
#include "nn/loss.h"
#include "nn/transformer.h"

namespace seqtape::reference {

Vocab copy_vocab() {
  return Vocab::from_tokens({"<pad>", "<bos>", "<eos>", "今", "天", "气", "很", "好", "的", "是"},
                            "copy_vocab");
}

Example copy_example() {
  Tokenizer tok(copy_vocab());
  return encode_example(tok, {kCopySample, kCopySample, 1}, "copy sample");
}

std::vector<std::array<double, 4>> printed_pe_rows() {
  return {{0.00, 1.00, 0.00, 1.00},  {0.84, 0.54, 0.10, 0.99},   {0.91, -0.42, 0.20, 0.98},
          {0.14, -0.99, 0.30, 0.95}, {-0.76, -0.65, 0.39, 0.92}, {-0.96, 0.28, 0.48, 0.88},
          {-0.28, 0.96, 0.56, 0.83}};
}

Tensor reference_pe_table() {
  return sinusoidal_table(7, 4, 100.0, DType::F64);  // [7, 4]
}

double pe_max_abs_diff() {
  Tensor pe = reference_pe_table();
  auto printed = printed_pe_rows();
  double worst = 0;
  for (int64_t p = 0; p < 7; ++p)
    for (int64_t j = 0; j < 4; ++j)
      worst = std::max(worst, std::abs(pe.get(p * 4 + j) -
                                       printed[static_cast<size_t>(p)][static_cast<size_t>(j)]));
  return worst;
}

std::vector<std::vector<int>> causal_mask_rows(int64_t T) {
  Mask m = Mask::causal(T);  // [T, T]
  std::vector<std::vector<int>> rows(static_cast<size_t>(T));
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < T; ++j)
      rows[static_cast<size_t>(i)].push_back(m.data[static_cast<size_t>(i * T + j)]);
  return rows;
}

std::vector<std::vector<double>> causal_softmax_of_zeros(int64_t T) {
  NoGradGuard no_grad;
  Var scores(Tensor::zeros({T, T}, DType::F64));  // [T, T]
  Var w = softmax(masked_fill(scores, Mask::causal(T),
                              -std::numeric_limits<double>::infinity()));  // [T, T]
  std::vector<std::vector<double>> rows(static_cast<size_t>(T));
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < T; ++j)
      rows[static_cast<size_t>(i)].push_back(w.value().get(i * T + j));
  return rows;
}

Tensor logits_with_target_probs(const std::vector<double>& target_probs,
                                const std::vector<int32_t>& targets, int64_t V) {
  if (target_probs.size() != targets.size() || V < 2)
    fail("logits_with_target_probs", std::to_string(target_probs.size()) + " probabilities, " +
                                         std::to_string(targets.size()) +
                                         " targets, V = " + std::to_string(V));
  const auto R = static_cast<int64_t>(targets.size());
  Tensor z({R, V}, DType::F64);  // [R, V]
  for (int64_t r = 0; r < R; ++r) {
    const double p = target_probs[static_cast<size_t>(r)];
    if (!(p > 0 && p < 1)) fail("logits_with_target_probs", "probability outside (0, 1)");
    // softmax(log q) = q when q sums to 1.
    for (int64_t j = 0; j < V; ++j)
      z.set(r * V + j, std::log((1 - p) / static_cast<double>(V - 1)));
    z.set(r * V + targets[static_cast<size_t>(r)], std::log(p));
  }
  return z;
}

double cross_entropy_for_prob(double p) {
  NoGradGuard no_grad;
  Var z(logits_with_target_probs({p}, {3}, 10));  // [1, V=10], target 今
  return cross_entropy(z, {3}).item();
}

double mean_cross_entropy_of_printed_losses() {
  NoGradGuard no_grad;
  // The labels of the copy sample, [3,4,4,5,6,7,2], as the seven targets.
  const std::vector<int32_t> targets = copy_example().labels;
  std::vector<double> probs;
  for (double l : kPrintedLosses) probs.push_back(std::exp(-l));
  Var z(logits_with_target_probs(probs, targets, 10));  // [7, V=10]
  return cross_entropy(z, targets).item();
}

Vocab padded_batch_vocab() {
  std::vector<std::string> t = copy_vocab().tokens();
  for (const char* c : {"明", "会", "下", "雨", "吧"}) t.emplace_back(c);
  return Vocab::from_tokens(t, "padded_batch_vocab");
}

namespace {

double batch_loss(Seq2Seq& model, const Batch& b, bool backward) {
  Rng rng(0);
  Tape::current().clear();
  model.zero_grad();
  Var loss = model.loss(b, rng);  // []
  if (backward) Tape::current().backward(loss);
  const double v = loss.item();
  return v;
}

double max_abs_row(const Var& p, int64_t row) {
  if (!p.has_grad()) return 0;
  const int64_t C = p.dim(1);
  double m = 0;
  for (int64_t j = 0; j < C; ++j) m = std::max(m, std::abs(p.grad().get(row * C + j)));
  return m;
}

// For each attention module, the largest weight row 0 puts on a pad key.
std::vector<std::pair<std::string, double>> max_weight_on_pad(
    const std::vector<AttentionWeights>& weights, const Batch& b) {
  std::vector<std::pair<std::string, double>> out;
  for (const AttentionWeights& aw : weights) {
    const Tensor& w = aw.weights;  // [B, H, Tq, Tk]
    const int64_t H = w.dim(1), Tq = w.dim(2), Tk = w.dim(3);
    const bool keys_are_src =
        aw.name.find("encoder") == 0 || aw.name.find("cross") != std::string::npos;
    const int64_t valid = keys_are_src ? b.src_len[0] : b.tgt_len[0];
    double m = 0;
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Tq; ++i)
        for (int64_t j = valid; j < Tk; ++j)
          m = std::max(m, w.get(((0 * H + h) * Tq + i) * Tk + j));
    out.emplace_back(aw.name, m);
  }
  return out;
}

}  // namespace

PaddedBatchCheck padded_batch_check() {
  PaddedBatchCheck out;
  Vocab vocab = padded_batch_vocab();
  Tokenizer tok(vocab);
  std::vector<TextPair> pairs = {{"今天很好", "今天很好", 1}, {"明天会下雨吧", "明天会下雨吧", 2}};
  std::vector<Example> ex = encode_examples(tok, pairs, "padded batch");
  const std::vector<uint32_t> both = {0, 1};
  Batch b = make_batch(ex, both, vocab.pad_id());
  out.batch = b;
  out.label_tokens = b.n_label_tokens;
  for (int64_t r = 0; r < b.B; ++r) {
    std::vector<std::string> row;
    for (int64_t s = 0; s < b.S; ++s)
      row.push_back(vocab.token(b.src[static_cast<size_t>(r * b.S + s)]));
    out.src_tokens.push_back(row);
  }

  ModelConfig cfg = preset("seed", vocab.size());
  cfg.init_seed = 4;
  Seq2Seq model(cfg);
  model.set_training(false);
  model.set_capture_attention(true);
  Var embed = model.parameter("embed.weight");

  out.loss = batch_loss(model, b, true);
  out.pad_row_grad_max = max_abs_row(embed, vocab.pad_id());
  out.real_row_grad_max = max_abs_row(embed, 3);
  out.max_weight_on_pad = max_weight_on_pad(model.attention_weights(), b);

  // Replace every pad id by 是 (9), which occurs nowhere else in the batch.
  Batch changed = b;
  const int32_t shi = *vocab.find("是");
  for (int64_t r = 0; r < b.B; ++r) {
    for (int64_t s = b.src_len[static_cast<size_t>(r)]; s < b.S; ++s)
      changed.src[static_cast<size_t>(r * b.S + s)] = shi;
    for (int64_t t = b.tgt_len[static_cast<size_t>(r)]; t < b.T; ++t)
      changed.tgt_in[static_cast<size_t>(r * b.T + t)] = shi;
  }
  out.loss_pads_changed = batch_loss(model, changed, true);
  out.changed_pad_row_grad_max = max_abs_row(embed, shi);

  // Each row alone, unpadded: the batch mean is their token-weighted mean.
  double weighted = 0;
  for (uint32_t i : both) {
    const std::vector<uint32_t> one = {i};
    Batch single = make_batch(ex, one, vocab.pad_id());
    weighted += batch_loss(model, single, false) * static_cast<double>(single.n_label_tokens);
  }
  out.loss_rows_separately = weighted / static_cast<double>(b.n_label_tokens);
  Tape::current().clear();
  model.set_capture_attention(false);
  return out;
}

}  // namespace seqtape::reference
