#include <gtest/gtest.h>

#include <cmath>

#include "model/sinusoidal.h"
#include "reference/encdec.h"

namespace seqtape::reference {
namespace {

TEST(EncDec, CopySampleIds) {
  Example ex = copy_example();
  EXPECT_EQ(ex.enc, (std::vector<int32_t>{3, 4, 4, 5, 6, 7, 2}));
  EXPECT_EQ(ex.dec_in, (std::vector<int32_t>{1, 3, 4, 4, 5, 6, 7}));
  EXPECT_EQ(ex.labels, (std::vector<int32_t>{3, 4, 4, 5, 6, 7, 2}));
  // The shipped reference vocabulary is the same list.
  EXPECT_EQ(Vocab::load(std::string(SEQTAPE_SOURCE_DIR) + "/datasets/reference/vocab.txt").tokens(),
            copy_vocab().tokens());
}

TEST(EncDec, PositionalEncodingBase100MatchesEveryPrintedEntry) {
  Tensor pe = reference_pe_table();
  auto printed = printed_pe_rows();
  ASSERT_EQ(pe.shape(), (Shape{7, 4}));
  for (int64_t p = 0; p < 7; ++p)
    for (int64_t j = 0; j < 4; ++j)
      EXPECT_NEAR(pe.get(p * 4 + j), printed[static_cast<size_t>(p)][static_cast<size_t>(j)], 0.01)
          << "PE(" << p << "," << j << ")";
  EXPECT_LT(pe_max_abs_diff(), 0.01);
  // The usual base 10000 does not reproduce the table (column 2 of row 1 would be 0.01).
  Tensor usual = sinusoidal_table(7, 4, 10000.0, DType::F64);
  EXPECT_GT(std::abs(usual.get(1 * 4 + 2) - printed[1][2]), 0.05);
}

TEST(EncDec, CausalMaskHidesTheFutureWithExactZeros) {
  auto mask = causal_mask_rows(7);
  auto w = causal_softmax_of_zeros(7);
  for (size_t i = 0; i < 7; ++i)
    for (size_t j = 0; j < 7; ++j) {
      EXPECT_EQ(mask[i][j], j > i ? 1 : 0);
      if (j > i)
        EXPECT_EQ(w[i][j], 0.0);
      else
        EXPECT_NEAR(w[i][j], 1.0 / static_cast<double>(i + 1), 1e-12);
    }
}

TEST(EncDec, CrossEntropyArithmetic) {
  EXPECT_NEAR(cross_entropy_for_prob(0.131), 2.03, 0.005);
  EXPECT_NEAR(cross_entropy_for_prob(0.131), -std::log(0.131), 1e-12);
  const double mean = mean_cross_entropy_of_printed_losses();
  EXPECT_NEAR(mean, 1.86, 0.005);
  EXPECT_NEAR(mean, 13.04 / 7.0, 1e-12);
}

TEST(EncDec, PaddedBatchPadsGetNoAttentionNoLossNoGradient) {
  PaddedBatchCheck pb = padded_batch_check();
  const Batch& b = pb.batch;
  ASSERT_EQ(b.B, 2);
  ASSERT_EQ(b.S, 7);
  EXPECT_EQ(pb.src_tokens[0],
            (std::vector<std::string>{"今", "天", "很", "好", "<eos>", "<pad>", "<pad>"}));
  EXPECT_EQ(pb.src_tokens[1],
            (std::vector<std::string>{"明", "天", "会", "下", "雨", "吧", "<eos>"}));
  EXPECT_EQ(b.src_len, (std::vector<int32_t>{5, 7}));
  // Encoder self-attention, decoder self- and cross-attention in both layers: 6 modules.
  ASSERT_EQ(pb.max_weight_on_pad.size(), 6u);
  for (const auto& [name, w] : pb.max_weight_on_pad) EXPECT_EQ(w, 0.0) << name;
  EXPECT_EQ(pb.label_tokens, 12);
  EXPECT_EQ(pb.loss, pb.loss_pads_changed) << "the pad ids changed the loss";
  EXPECT_NEAR(pb.loss, pb.loss_rows_separately, 1e-6);
  EXPECT_EQ(pb.pad_row_grad_max, 0.0);
  EXPECT_EQ(pb.changed_pad_row_grad_max, 0.0);
  EXPECT_GT(pb.real_row_grad_max, 0.0);
}

}  // namespace
}  // namespace seqtape::reference
