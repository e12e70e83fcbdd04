#pragma once
// The encoder-decoder document's computable numbers, reproduced with the library: the id
// conversion of the copy sample 今天天气很好, the base-100 positional-encoding table, the
// causal mask, the cross-entropy arithmetic, and the padded batch whose pad positions get no
// attention, no loss and no gradient.
//
// Dimension key: B batch, S source length, T target length, C d_model = 4, V vocabulary.

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "text/tokenizer.h"
#include "train/dataset.h"

namespace seqtape::reference {

// {<pad>:0, <bos>:1, <eos>:2, 今:3, 天:4, 气:5, 很:6, 好:7, 的:8, 是:9}, as printed.
Vocab copy_vocab();
inline constexpr const char* kCopySample = "今天天气很好";
// enc [3,4,4,5,6,7,2], dec_in [1,3,4,4,5,6,7], labels [3,4,4,5,6,7,2]
Example copy_example();

// ---- positional encoding ------------------------------------------------------------------

// The 7 rows printed in the document (two decimals).
std::vector<std::array<double, 4>> printed_pe_rows();
// sinusoidal_table(7, 4, base 100) → [7, 4]
Tensor reference_pe_table();
// Largest |computed - printed| over the 28 entries.
double pe_max_abs_diff();

// ---- causal mask --------------------------------------------------------------------------

// Mask::causal(T) as rows of 0/1 (1 = position j is hidden from position i).
std::vector<std::vector<int>> causal_mask_rows(int64_t T);
// softmax(masked_fill(zeros [T, T], causal, -inf)): row i is 1/(i+1) on j <= i and exactly 0
// above the diagonal.
std::vector<std::vector<double>> causal_softmax_of_zeros(int64_t T);

// ---- cross-entropy arithmetic -------------------------------------------------------------

inline constexpr double kPrintedTargetProb = 0.131;
inline const std::vector<double> kPrintedLosses = {2.03, 1.88, 1.92, 1.82, 1.84, 1.86, 1.69};
inline constexpr double kPrintedMeanLoss = 1.86;

// Logits [rows, V] whose softmax gives target_probs[r] at target[r] (the rest share the
// remainder equally).
Tensor logits_with_target_probs(const std::vector<double>& target_probs,
                                const std::vector<int32_t>& targets, int64_t V);
// cross_entropy on one row of V = 10 logits whose target has probability p: −log p.
double cross_entropy_for_prob(double p);
// One cross_entropy over 7 rows whose target probabilities are exp(−loss) for each printed
// loss: the library's mean (1.8629 → 1.86).
double mean_cross_entropy_of_printed_losses();

// ---- the padded batch ---------------------------------------------------------------------

// copy_vocab() + 明 会 下 雨 吧 (ids 10..14), so both sentences of the batch encode.
Vocab padded_batch_vocab();

struct PaddedBatchCheck {
  Batch batch;  // copy task on 今天很好 and 明天会下雨吧
  std::vector<std::vector<std::string>> src_tokens;  // [B][S], <pad> shown by name
  // Per attention module (encoder self, decoder self, decoder cross; all layers): the largest
  // weight that any query of row 0 gives to a pad key. Exactly 0.
  std::vector<std::pair<std::string, double>> max_weight_on_pad;
  double loss = 0;                      // batch mean over the 12 label tokens
  double loss_pads_changed = 0;         // the same with every pad id replaced by 是 (9)
  double loss_rows_separately = 0;      // (5·loss(row 0 alone) + 7·loss(row 1 alone)) / 12
  int64_t label_tokens = 0;             // 12: the two pad label positions are ignored
  double pad_row_grad_max = 0;          // max |∂L/∂embed.weight[<pad>]|: 0
  double changed_pad_row_grad_max = 0;  // max |∂L/∂embed.weight[是]| when pads hold 是: 0
  double real_row_grad_max = 0;         // max |∂L/∂embed.weight[今]|: not 0
};
// Seq2Seq with the "seed" preset (C 4, 1 head, 2+2 layers, F 16, post-norm, PE base 100).
PaddedBatchCheck padded_batch_check();

}  // namespace seqtape::reference
