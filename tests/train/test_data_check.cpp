// Data checked before step 1: too-long examples (error naming file:line, skip, truncate) and
// the data summary (lengths, percentiles, <unk> rate).
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "text/text_codec.h"
#include "train/data_check.h"
#include "train/trainer.h"

namespace seqtape {
namespace {

using test_util::TempDir;

std::vector<TextPair> pairs_with_lengths(const std::vector<std::pair<int, int>>& lens) {
  std::vector<TextPair> out;
  int64_t line = 1;
  for (auto [s, t] : lens)
    out.push_back({std::string(size_t(s), 'a'), std::string(size_t(t), 'b'), line++});
  return out;
}

TEST(DataCheck, TooLongIsAnErrorNamingFileLinesAndTheCount) {
  std::vector<TextPair> pairs = pairs_with_lengths(
      {{3, 3}, {9, 2}, {2, 2}, {2, 8}, {10, 10}, {9, 9}, {9, 9}, {9, 9}, {9, 9}});
  const CharCodec codec(build_vocab(pairs));
  EncodedPairs d = encode_pairs(Arch::Seq2Seq, codec, pairs, "train.tsv");
  const std::string msg =
      test_util::error_of([&] { check_lengths(d, pairs, 8, TooLong::kError, "train.tsv"); });
  // src 9 + <eos> = 10 > 8; <bos> + tgt 8 = 9 > 8.
  EXPECT_NE(msg.find("train.tsv: 7 examples are longer than the model's max_positions 8"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("train.tsv:2 (encoder input 10 positions, decoder input 3)"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("train.tsv:4 (encoder input 3 positions, decoder input 9)"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find("train.tsv:7"), std::string::npos) << msg;   // the fifth
  EXPECT_EQ(msg.find("train.tsv:8 "), std::string::npos) << msg;  // only the first five
  EXPECT_NE(msg.find("--too-long"), std::string::npos) << msg;
  // Exactly max_positions fits.
  std::vector<TextPair> fit = pairs_with_lengths({{7, 7}});
  EncodedPairs f = encode_pairs(Arch::Seq2Seq, codec, fit, "fit.tsv");
  EXPECT_EQ(check_lengths(f, fit, 8, TooLong::kError, "fit.tsv").too_long, 0);
}

TEST(DataCheck, SkipRemovesExamplesAndPairsTogether) {
  std::vector<TextPair> pairs = pairs_with_lengths({{3, 3}, {9, 2}, {2, 2}, {2, 8}});
  const CharCodec codec(build_vocab(pairs));
  EncodedPairs d = encode_pairs(Arch::Seq2Seq, codec, pairs, "t");
  const LengthCheck c = check_lengths(d, pairs, 8, TooLong::kSkip, "t");
  EXPECT_EQ(c.too_long, 2);
  EXPECT_EQ(c.skipped, 2);
  EXPECT_EQ(c.truncated, 0);
  ASSERT_EQ(pairs.size(), 2u);
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(pairs[0].line, 1);
  EXPECT_EQ(pairs[1].line, 3);
  EXPECT_EQ(d.enc_dec[1].enc.size(), 3u);
}

TEST(DataCheck, TruncateKeepsTheFirstTokensAndTheEos) {
  std::vector<TextPair> pairs = pairs_with_lengths({{9, 2}, {2, 8}});
  const CharCodec codec(build_vocab(pairs));
  const Vocab& v = codec.vocab();
  EncodedPairs d = encode_pairs(Arch::Seq2Seq, codec, pairs, "t");
  const LengthCheck c = check_lengths(d, pairs, 8, TooLong::kTruncate, "t");
  EXPECT_EQ(c.truncated, 2);
  EXPECT_EQ(c.skipped, 0);
  const int32_t a = *v.find("a"), b = *v.find("b");
  EXPECT_EQ(d.enc_dec[0].enc, (std::vector<int32_t>{a, a, a, a, a, a, a, v.eos_id()}));
  EXPECT_EQ(d.enc_dec[1].dec_in, (std::vector<int32_t>{v.bos_id(), b, b, b, b, b, b, b}));
  EXPECT_EQ(d.enc_dec[1].labels, (std::vector<int32_t>{b, b, b, b, b, b, b, v.eos_id()}));

  // Decoder-only: the sequence src <sep> tgt is cut to max_positions; a prompt that leaves no
  // target position is skipped.
  std::vector<TextPair> lm_pairs = pairs_with_lengths({{3, 6}, {8, 2}, {2, 2}});
  const CharCodec lm_codec(build_vocab(lm_pairs));
  EncodedPairs lm = encode_pairs(Arch::DecoderOnly, lm_codec, lm_pairs, "lm");
  const LengthCheck lc = check_lengths(lm, lm_pairs, 8, TooLong::kTruncate, "lm");
  EXPECT_EQ(lc.too_long, 2);  // 3+1+6 = 10 and 8+1+2 = 11 positions
  EXPECT_EQ(lc.truncated, 1);
  EXPECT_EQ(lc.skipped, 1);
  ASSERT_EQ(lm.size(), 2u);
  EXPECT_EQ(lm.lm[0].tokens.size(), 8u);
  EXPECT_EQ(lm.lm[0].labels.size(), 8u);
  EXPECT_EQ(lm_pairs[1].line, 3);
}

TEST(DataCheck, SummaryGivesPercentilesAndTheUnkRate) {
  EXPECT_EQ(percentile({}, 50), 0);
  EXPECT_EQ(percentile({1, 2, 3, 4}, 50), 2);
  EXPECT_EQ(percentile({1, 2, 3, 4}, 90), 4);
  std::vector<int64_t> hundred;
  for (int i = 1; i <= 100; ++i) hundred.push_back(i);
  EXPECT_EQ(percentile(hundred, 50), 50);
  EXPECT_EQ(percentile(hundred, 90), 90);
  EXPECT_EQ(percentile(hundred, 99), 99);

  // A vocabulary without 'z': each z is an <unk> on the source side.
  std::vector<TextPair> known = pairs_with_lengths({{1, 1}});
  const CharCodec codec(build_vocab(known));
  const std::vector<TextPair> pairs = {{"aaz", "bb", 1}, {"a", "bbbb", 2}, {"aazz", "b", 3}};
  const EncodedPairs d = encode_pairs(Arch::Seq2Seq, codec, pairs, "t");
  const DataSummary s = summarize(d, codec.vocab().unk_id());
  EXPECT_EQ(s.source.examples, 3);
  EXPECT_EQ(s.source.tokens, 8);
  EXPECT_EQ(s.source.unk, 3);
  EXPECT_EQ(s.source.p50, 3);
  EXPECT_EQ(s.source.max, 4);
  EXPECT_EQ(s.target.tokens, 7);
  EXPECT_EQ(s.target.unk, 0);
  EXPECT_EQ(s.target.p90, 4);
  const std::string text = format_summary(s, "training");
  EXPECT_NE(text.find("training source: 3 examples, 8 tokens, length p50 3 p90 4 p99 4 max 4, "
                      "<unk> 37.50%"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("warning: 37.50% of the training source tokens are <unk> (3 of 8)"),
            std::string::npos)
      << text;
  EXPECT_EQ(text.find("target tokens are <unk>"), std::string::npos) << text;

  // The same for decoder-only examples (src <sep> tgt).
  const EncodedPairs lm = encode_pairs(Arch::DecoderOnly, codec, pairs, "t");
  const DataSummary ls = summarize(lm, codec.vocab().unk_id());
  EXPECT_EQ(ls.source.tokens, 8);
  EXPECT_EQ(ls.source.unk, 3);
  EXPECT_EQ(ls.target.tokens, 7);
  EXPECT_EQ(ls.target.max, 4);
}

TEST(DataCheck, TrainChecksDataAndValidBeforeStepOne) {
  TempDir dir("data_check_train");
  write_tsv(dir.file("train.tsv"), pairs_with_lengths({{3, 3}, {4, 4}, {3, 2}, {2, 3}}));
  write_tsv(dir.file("valid.tsv"), pairs_with_lengths({{3, 3}, {12, 3}}));
  TrainOptions o;
  o.data = dir.file("train.tsv");
  o.valid_data = dir.file("valid.tsv");
  o.out_dir = dir.file("run");
  o.model = preset("seed", 10);
  o.model.max_positions = 8;
  o.steps = 2;
  o.batch = 2;
  o.progress = 0;
  std::ostringstream log;
  EXPECT_ERROR_HAS(train(o, log), dir.file("valid.tsv") + ":2 (encoder input 13 positions");
  EXPECT_FALSE(std::filesystem::exists(dir.file("run/checkpoint.bin")));
  o.too_long = TooLong::kTruncate;  // validation: skipped
  const TrainReport r = train(o, log);
  EXPECT_EQ(r.valid.examples, 1);
  EXPECT_NE(log.str().find("(validation): 1 examples longer than max_positions 8"),
            std::string::npos)
      << log.str();
  EXPECT_NE(log.str().find("training source: 4 examples, 12 tokens"), std::string::npos)
      << log.str();
}

}  // namespace
}  // namespace seqtape
