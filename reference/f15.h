#pragma once
// F15, the tiny decoder-only model of the first reference document ("from the last row, to one
// token, to an answer"), rebuilt with the library: a 7-token teaching vocabulary, d_model 4,
// one layer with one head of causal self-attention, residual connections, a tanh feed-forward,
// no normalization and no positional encoding. Every parameter except the output head is drawn
// from a fixed seed and frozen; the head (out_proj.*) is fitted on the three prefixes
// [1,2]→3, [1,2,3]→5, [1,2,3,5]→6 so that greedy decoding of 我爱 gives 学习 ！ <eos>.
//
// Dimension key: B batch (the three training prefixes), T positions, C d_model = 4,
//                F d_ff = 8, V vocabulary = 7.

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "nn/transformer.h"
#include "text/tokenizer.h"

namespace seqtape::reference {

// The document fixes 我=1 爱=2 学习=3 ！=5 <eos>=6 and leaves ids 0 and 4 open. The library's
// Vocab needs <pad>, <bos> and <eos>, so 0 = <pad> (the usual padding id, as in the second
// document) and 4 = <bos> (never used by the F15 run: the prompt is the raw prefix).
inline constexpr int32_t kF15Pad = 0, kF15Wo = 1, kF15Ai = 2, kF15Xuexi = 3, kF15Bos = 4,
                         kF15Bang = 5, kF15Eos = 6;
inline constexpr uint64_t kF15Seed = 15;

std::vector<std::string> f15_tokens();  // id order: <pad> 我 爱 学习 <bos> ！ <eos>
Vocab f15_vocab();
ModelConfig f15_config();

struct F15Prefix {
  std::vector<int32_t> prefix;
  int32_t next = 0;
};
// [1,2]→3, [1,2,3]→5, [1,2,3,5]→6
std::vector<F15Prefix> f15_training_prefixes();

// Every parameter except out_proj.* is a multiple of 0.01 drawn uniformly from [-1, 1] by
// Rng(kF15Seed) in parameter order (Rng::uniform is portable: mt19937_64 and our own scaling);
// out_proj starts at zero.
std::unique_ptr<DecoderOnly> f15_base_model();

struct F15Fit {
  int64_t steps = 0;
  double lr = 0;
  double first_loss = 0, final_loss = 0;  // mean CE over the three prefixes, before/after
  std::vector<double> target_prob;        // per prefix, with the published (rounded) head
  std::vector<double> margin;             // target logit minus the best other logit
  int64_t frozen_without_grad = 0;        // parameter tensors checked to receive no gradient
};

// Freezes everything but out_proj, then full-batch gradient descent (SGD) on the mean
// cross-entropy at the last valid position of each (right-padded) prefix, until every target
// has probability >= 0.9; the head is then rounded to 3 decimals (so the published numbers are
// exact and the checkpoint is reproducible bit for bit) and the margins are re-checked.
// Throws Error if a frozen parameter received a gradient or the fit does not converge.
F15Fit fit_f15_head(DecoderOnly& model);

struct F15Model {
  std::unique_ptr<DecoderOnly> model;
  F15Fit fit;
};
F15Model make_f15_model();  // base + fit: the published model, deterministic

// The fields train/trainer.cpp writes: config, vocabulary, parameters, optimizer "sgd" (no
// state), step = fit steps, an RNG state, a loader state and the fit summary as metrics.
Checkpoint f15_checkpoint(const DecoderOnly& model, const F15Fit& fit);
// Writes DIR/vocab.txt, DIR/checkpoint.bin and DIR/run.json (reference/f15_run.h); returns
// the model written.
F15Model write_f15(const std::string& dir);
// A model whose parameters come from a checkpoint (names and shapes must match the F15 model).
std::unique_ptr<DecoderOnly> load_f15_model(const std::string& checkpoint_path);

// ---- one generation, recomputed from scratch at every round --------------------------------

struct Candidate {
  int32_t id = 0;
  std::string token;
  double logit = 0, prob = 0;
};

struct AttentionRows {
  std::string name;  // e.g. "decoder.layers.0.self_attn"
  int64_t layer = 0, head = 0;
  std::string kind;                          // "self" or "cross"
  std::vector<int64_t> rows;                 // query positions (the positions fed this round)
  std::vector<int64_t> cols;                 // key positions 0..cache_after-1
  std::vector<std::vector<double>> weights;  // [rows, cols]
};

struct Round {
  int64_t index = 0;
  std::string phase;         // "prefill" or "decode"
  std::vector<int32_t> fed;  // tokens processed by this round
  int64_t cache_before = 0, cache_after = 0;
  std::vector<double> logits, probs;  // [V] at the last processed position
  std::vector<Candidate> top;         // best first
  Candidate selected;
  std::optional<std::string> stop;       // "eos" or "length" when this round stops
  std::vector<int32_t> sequence;         // prompt + selections, after this round
  std::vector<AttentionRows> attention;  // the rows computed this round
  std::optional<double> max_abs_delta;   // cached vs recomputed logits, when a cache was used
};

// Greedy decoding with the processed/selected bookkeeping of the document: round 1 (prefill)
// feeds the prompt, every later round (decode) feeds only the token selected before it; the
// cache length is the number of processed tokens. Each round's logits come from recomputing the
// whole processed prefix on the training model (no tape). Stops at <eos> or after max_new.
std::vector<Round> greedy_rounds_recompute(DecoderOnly& model, const Vocab& vocab,
                                           const std::vector<int32_t>& prompt, int64_t max_new,
                                           int64_t top_k = 4);

// "decoder.layers.3.self_attn" -> 3 (0 when the name has no layer index).
int64_t layer_of(const std::string& name);

// The same greedy run on the real KV-cached decoder (infer/, sharing the model's weights),
// recorded through infer/trace.h: every round's logits and attention come from the cache, and
// max_abs_delta compares them with the uncached recompute of the whole prefix. `trace` is the
// seqtape-trace of the run.
struct CachedRun {
  std::vector<Round> rounds;
  nlohmann::json trace;
};
CachedRun greedy_rounds_cached(const DecoderOnly& model, const Vocab& vocab,
                               const std::vector<int32_t>& prompt, int64_t max_new,
                               int64_t top_k = 4);

// Logits [V] of the last position of `prefix`, recomputed from scratch.
std::vector<double> last_logits(DecoderOnly& model, const std::vector<int32_t>& prefix);

// ---- the two small examples of the document ------------------------------------------------

// h = [1,2], Wout = [[0,1,0,1,-1,0],[0,0,1,1,0,-1]]: h·Wout through the library's matmul op.
struct OutputHeadExample {
  std::vector<double> h;
  std::vector<std::vector<double>> w;
  std::vector<double> scores;  // [0,1,2,3,-1,-2]
  int64_t argmax = 0;          // 3
};
OutputHeadExample output_head_example();

// The processed/selected state of the document's run example on prompt [1,2,3]: after
// prefill the cache holds 3 positions while the output already holds 4 tokens; the next
// decode computes the 4th token's K/V.
struct StateRow {
  std::string event;
  std::vector<int32_t> output;
  int64_t cache = 0;
  std::vector<int32_t> pending;  // selected but not yet processed
};
std::vector<StateRow> state_example(DecoderOnly& model);

// The document's given candidate probabilities [0.6,0.3,0.1] for ids [4,5,<eos>]: greedy takes
// the highest (4), it does not sample.
int32_t greedy_pick(const std::vector<int32_t>& ids, const std::vector<double>& probs);

}  // namespace seqtape::reference
