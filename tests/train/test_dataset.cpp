#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "train/copy_task.h"
#include "train/dataset.h"
#include "train/dist.h"

namespace seqtape {
namespace {

const std::string kRefDir = std::string(SEQTAPE_SOURCE_DIR) + "/datasets/reference";
using Ids = std::vector<int32_t>;

using test_util::error_of;

std::filesystem::path temp_dir() {
  const auto dir = std::filesystem::temp_directory_path() / "seqtape_test_dataset";
  std::filesystem::create_directories(dir);
  return dir;
}

Tokenizer reference_tokenizer() {
  return Tokenizer(Vocab::load(kRefDir + "/vocab.txt"));
}

TEST(Tsv, ReferenceCopyFile) {
  const std::vector<TextPair> pairs = read_tsv(kRefDir + "/copy.tsv");
  ASSERT_EQ(pairs.size(), 1u);
  EXPECT_EQ(pairs[0].source, "今天天气很好");
  EXPECT_EQ(pairs[0].target, "今天天气很好");
  EXPECT_EQ(pairs[0].line, 1);
}

TEST(Tsv, CrlfBlankLinesAndLineNumbers) {
  const auto pairs = parse_tsv("\xEF\xBB\xBF今天\t天气\r\n\r\n   \n很好\t好的", "mem");
  ASSERT_EQ(pairs.size(), 2u);
  EXPECT_EQ(pairs[0].source, "今天");
  EXPECT_EQ(pairs[0].target, "天气");
  EXPECT_EQ(pairs[1].source, "很好");
  EXPECT_EQ(pairs[1].target, "好的");
  EXPECT_EQ(pairs[1].line, 4);
}

TEST(Tsv, ErrorsNameFileAndLine) {
  struct Case {
    std::string text;
    std::string where;
    std::string what;
  };
  const std::vector<Case> cases = {
      {"a\tb\nno tab here\n", "d.tsv:2", "no tab"},
      {"a\tb\n\na\tb\tc\n", "d.tsv:3", "more than one tab"},
      {"\tb\n", "d.tsv:1", "empty source"},
      {"a\t\r\n", "d.tsv:1", "empty target"},
      {"a\tb\na\t\xC0\xAF\n", "d.tsv:2", "overlong"},
      {"a\tb\n\xED\xA0\x80\tb\n", "d.tsv:2", "surrogate"},
      {"a\tb\nx\t\xE4\xBB\n", "d.tsv:2", "truncated"},
      {"a\tb\nx\t\xF4\x90\x80\x80\n", "d.tsv:2", "U+10FFFF"},
      {"a\rb\tc\n", "d.tsv:1", "carriage return"},
      {"\n \n\r\n", "d.tsv", "no examples"},
      {"", "d.tsv", "no examples"},
  };
  for (const Case& c : cases) {
    const std::string msg = error_of([&] { parse_tsv(c.text, "d.tsv"); });
    EXPECT_HAS(msg, c.where);
    EXPECT_HAS(msg, c.what);
  }
}

TEST(Tsv, MissingFileSaysSo) {
  const std::string p = (temp_dir() / "no_such_file.tsv").string();
  const std::string msg = error_of([&] { read_tsv(p); });
  EXPECT_HAS(msg, p);
  EXPECT_HAS(msg, "does not exist");
}

TEST(Tsv, WriteReadRoundTrip) {
  const std::vector<TextPair> pairs = {{"今天", "今天", 1}, {"a b", "c", 2}};
  const std::string p = (temp_dir() / "rt.tsv").string();
  write_tsv(p, pairs);
  const auto back = read_tsv(p);
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[1].source, "a b");
  EXPECT_EQ(back[1].line, 2);
  EXPECT_THROW(write_tsv(p, {{"a\tb", "c", 1}}), Error);
}

TEST(Encode, ReferenceTeacherForcing) {
  const Tokenizer tok = reference_tokenizer();
  const std::vector<Example> ex = encode_examples(tok, read_tsv(kRefDir + "/copy.tsv"), "copy.tsv");
  ASSERT_EQ(ex.size(), 1u);
  EXPECT_EQ(ex[0].enc, (Ids{3, 4, 4, 5, 6, 7, 2}));
  EXPECT_EQ(ex[0].dec_in, (Ids{1, 3, 4, 4, 5, 6, 7}));
  EXPECT_EQ(ex[0].labels, (Ids{3, 4, 4, 5, 6, 7, 2}));
}

TEST(Encode, ErrorNamesFileLineAndCharacter) {
  const Tokenizer tok = reference_tokenizer();
  const auto pairs = parse_tsv("今天\t今天\n今天\t明天\n", "data.tsv");
  const std::string msg = error_of([&] { encode_examples(tok, pairs, "data.tsv"); });
  EXPECT_HAS(msg, "data.tsv:2");
  EXPECT_HAS(msg, "target");
  EXPECT_HAS(msg, "character 1");
  EXPECT_HAS(msg, "明");
  EXPECT_HAS(msg, "U+660E");
}

TEST(Encode, DecoderOnlyMasksThePrompt) {
  const Tokenizer tok(Vocab::from_tokens(
      {"<pad>", "<bos>", "<eos>", "今", "天", "气", "很", "好", "的", "是", "<sep>"}));
  const LmExample e = encode_lm_example(tok, {"今天", "好", 1}, "x");
  EXPECT_EQ(e.tokens, (Ids{3, 4, 10, 7}));
  EXPECT_EQ(e.labels, (Ids{kIgnoreIndex, kIgnoreIndex, 7, 2}));
  // Labels are the next token wherever they are not ignored.
  const Ids full = {3, 4, 10, 7, 2};
  for (size_t i = 0; i < e.labels.size(); ++i) {
    if (e.labels[i] != kIgnoreIndex) {
      EXPECT_EQ(e.labels[i], full[i + 1]);
    }
  }
  // The reference vocabulary has no <sep>: decoder-only encoding must say why it fails.
  EXPECT_HAS(error_of([&] {
               encode_lm_example(reference_tokenizer(), {"今", "天", 1}, "x");
             }),
             "<sep>");
}

TEST(Encode, EncodedPairsGivePromptAndTargetForBothArchitectures) {
  const CharCodec tok(Vocab::from_tokens(
      {"<pad>", "<bos>", "<eos>", "今", "天", "气", "很", "好", "的", "是", "<sep>"}));
  const std::vector<TextPair> pairs = {{"今天", "好", 1}, {"气", "很好的", 2}};
  const EncodedPairs s2s = encode_pairs(Arch::Seq2Seq, tok, pairs, "p");
  ASSERT_EQ(s2s.size(), 2u);
  EXPECT_FALSE(s2s.decoder_only);
  EXPECT_EQ(s2s.prompt(0), (Ids{3, 4, 2}));  // src + <eos>
  EXPECT_EQ(s2s.target(0), (Ids{7}));        // tgt without <eos>
  EXPECT_EQ(s2s.target(1), (Ids{6, 7, 8}));
  const EncodedPairs lm = encode_pairs(Arch::DecoderOnly, tok, pairs, "p");
  ASSERT_EQ(lm.size(), 2u);
  EXPECT_TRUE(lm.decoder_only);
  EXPECT_EQ(lm.prompt(0), (Ids{3, 4, 10}));  // src + <sep>
  EXPECT_EQ(lm.target(0), (Ids{7}));
  EXPECT_EQ(lm.prompt(1), (Ids{5, 10}));
  EXPECT_EQ(lm.target(1), (Ids{6, 7, 8}));
  // Batches and the loader take either form.
  EXPECT_EQ(batches_in_order(lm, 2, 0).at(0).tokens.size(), 2u * 5u);
  EXPECT_EQ(batches_in_order(s2s, 1, 0).size(), 2u);
  DataLoader loader(lm, 0, LoaderOptions{2, 1, false});
  EXPECT_TRUE(loader.decoder_only());
  EXPECT_EQ(loader.next_batch().B, 2);
}

TEST(Batch, SliceRowsKeepsPaddedLengthsAndCountsItsOwnLabels) {
  const Tokenizer tok = reference_tokenizer();
  const auto ex = encode_examples(
      tok, parse_tsv("今天很好\t今天很好\n今天天气很好\t今天天气很好\n好\t好\n", "p"), "p");
  const std::vector<uint32_t> idx = {0, 1, 2};
  const Batch b = make_batch(ex, idx, tok.vocab().pad_id());
  const Batch s = slice_rows(b, 1, 3);
  EXPECT_EQ(s.B, 2);
  EXPECT_EQ(s.S, b.S);  // padded lengths stay those of the whole batch
  EXPECT_EQ(s.T, b.T);
  EXPECT_EQ(s.src, Ids(b.src.begin() + b.S, b.src.end()));
  EXPECT_EQ(s.labels, Ids(b.labels.begin() + b.T, b.labels.end()));
  EXPECT_EQ(s.src_len, (Ids{7, 2}));
  EXPECT_EQ(s.n_label_tokens, 7 + 2);
  EXPECT_EQ(s.index, (std::vector<uint32_t>{1, 2}));
  EXPECT_TRUE(s.tokens.empty());
  const Batch none = slice_rows(b, 3, 3);
  EXPECT_EQ(none.B, 0);
  EXPECT_EQ(none.n_label_tokens, 0);
  EXPECT_THROW(slice_rows(b, 2, 4), Error);
}

TEST(Batch, ShardRowsCoverTheBatchOnceWithinOneRow) {
  for (int n = 1; n <= 5; ++n)
    for (int64_t rows = 0; rows <= 11; ++rows) {
      int64_t next = 0, lo = rows, hi = 0;
      for (int r = 0; r < n; ++r) {
        const auto [begin, end] = shard_rows(rows, r, n);
        EXPECT_EQ(begin, next);
        next = end;
        lo = std::min(lo, end - begin);
        hi = std::max(hi, end - begin);
      }
      EXPECT_EQ(next, rows);
      EXPECT_LE(hi - lo, 1);
    }
}

TEST(Batch, PaddedPairMasksAndLabels) {
  // The reference's padded pair: a 4-character sentence beside a 6-character one.
  const Tokenizer tok = reference_tokenizer();
  const auto ex =
      encode_examples(tok, parse_tsv("今天很好\t今天很好\n今天天气很好\t今天天气很好\n", "p"), "p");
  const std::vector<uint32_t> idx = {0, 1};
  const Batch b = make_batch(ex, idx, tok.vocab().pad_id());
  EXPECT_EQ(b.B, 2);
  EXPECT_EQ(b.S, 7);
  EXPECT_EQ(b.T, 7);
  // [今,天,很,好,<eos>,<pad>,<pad>] as in the reference.
  EXPECT_EQ(b.src, (Ids{3, 4, 6, 7, 2, 0, 0, /**/ 3, 4, 4, 5, 6, 7, 2}));
  EXPECT_EQ(b.src_len, (Ids{5, 7}));
  EXPECT_EQ(b.tgt_in, (Ids{1, 3, 4, 6, 7, 0, 0, /**/ 1, 3, 4, 4, 5, 6, 7}));
  EXPECT_EQ(b.tgt_len, (Ids{5, 7}));
  const int32_t I = kIgnoreIndex;
  EXPECT_EQ(b.labels, (Ids{3, 4, 6, 7, 2, I, I, /**/ 3, 4, 4, 5, 6, 7, 2}));
  EXPECT_EQ(b.n_label_tokens, 12);
  EXPECT_TRUE(b.tokens.empty());
  EXPECT_EQ(b.index, (std::vector<uint32_t>{0, 1}));
}

TEST(Batch, DecoderOnlyPadding) {
  const Tokenizer tok(Vocab::build({"今天很好气"}));
  const auto ex = encode_lm_examples(tok, parse_tsv("今\t天\n今天\t很好气\n", "p"), "p");
  const std::vector<uint32_t> idx = {0, 1};
  const Batch b = make_lm_batch(ex, idx, tok.vocab().pad_id());
  const auto id = [&](const char* s) { return *tok.vocab().find(s); };
  const int32_t sep = tok.vocab().sep_id(), eos = tok.vocab().eos_id(), I = kIgnoreIndex;
  EXPECT_EQ(b.T, 6);
  EXPECT_EQ(b.S, 0);
  EXPECT_EQ(b.tokens, (Ids{id("今"), sep, id("天"), 0, 0, 0, /**/ id("今"), id("天"), sep, id("很"),
                           id("好"), id("气")}));
  EXPECT_EQ(b.len, (Ids{3, 6}));
  EXPECT_EQ(b.labels,
            (Ids{I, id("天"), eos, I, I, I, /**/ I, I, id("很"), id("好"), id("气"), eos}));
  EXPECT_EQ(b.n_label_tokens, 6);
}

std::vector<Example> numbered_examples(size_t n) {
  std::vector<Example> ex(n);
  for (size_t i = 0; i < n; ++i) {
    const auto k = static_cast<int32_t>(i);
    ex[i] = {{k, 2}, {1, k}, {k, 2}};
  }
  return ex;
}

std::vector<std::vector<uint32_t>> draw(DataLoader& dl, int n) {
  std::vector<std::vector<uint32_t>> out;
  for (int i = 0; i < n; ++i) out.push_back(dl.next_batch().index);
  return out;
}

TEST(DataLoader, EpochsCoverEveryExampleOnceAndReshuffle) {
  DataLoader dl(numbered_examples(10), 0, {.batch_size = 4, .seed = 7});
  EXPECT_EQ(dl.batches_per_epoch(), 3);
  std::vector<uint32_t> epoch0, epoch1;
  for (const auto& b : draw(dl, 3)) epoch0.insert(epoch0.end(), b.begin(), b.end());
  EXPECT_EQ(dl.epoch(), 0u);
  for (const auto& b : draw(dl, 3)) epoch1.insert(epoch1.end(), b.begin(), b.end());
  EXPECT_EQ(dl.epoch(), 1u);
  EXPECT_NE(epoch0, epoch1);
  std::sort(epoch0.begin(), epoch0.end());
  std::sort(epoch1.begin(), epoch1.end());
  std::vector<uint32_t> all(10);
  for (uint32_t i = 0; i < 10; ++i) all[i] = i;
  EXPECT_EQ(epoch0, all);
  EXPECT_EQ(epoch1, all);
}

TEST(DataLoader, ShuffleIsDeterministicPerSeedAndDiffersAcrossSeeds) {
  DataLoader a(numbered_examples(50), 0, {.batch_size = 8, .seed = 1});
  DataLoader b(numbered_examples(50), 0, {.batch_size = 8, .seed = 1});
  DataLoader c(numbered_examples(50), 0, {.batch_size = 8, .seed = 2});
  const auto da = draw(a, 20), db = draw(b, 20), dc = draw(c, 20);
  EXPECT_EQ(da, db);
  EXPECT_NE(da, dc);
  DataLoader plain(numbered_examples(5), 0, {.batch_size = 2, .seed = 1, .shuffle = false});
  EXPECT_EQ(draw(plain, 4), (std::vector<std::vector<uint32_t>>{{0, 1}, {2, 3}, {4}, {0, 1}}));
}

TEST(DataLoader, SavedStateResumesTheSameBatches) {
  const LoaderOptions opt{.batch_size = 3, .seed = 42};
  DataLoader original(numbered_examples(11), 0, opt);
  draw(original, 5);  // into the second epoch
  const LoaderState saved = original.state();
  const auto expected = draw(original, 12);

  DataLoader resumed(numbered_examples(11), 0, {.batch_size = 3, .seed = 999});
  resumed.set_state(saved);
  EXPECT_EQ(resumed.epoch(), saved.epoch);
  EXPECT_EQ(draw(resumed, 12), expected);

  // Batches contents follow the indices, not just the indices themselves.
  DataLoader r2(numbered_examples(11), 0, opt);
  r2.set_state(saved);
  const Batch b = r2.next_batch();
  EXPECT_EQ(b.src[0], static_cast<int32_t>(b.index[0]));
}

TEST(DataLoader, SetStateValidates) {
  DataLoader dl(numbered_examples(4), 0, {.batch_size = 2, .seed = 3});
  const LoaderState good = dl.state();
  LoaderState s = good;
  s.order = {0, 1, 2};
  EXPECT_HAS(error_of([&] { dl.set_state(s); }), "order");
  s = good;
  s.order = {0, 1, 1, 3};
  EXPECT_HAS(error_of([&] { dl.set_state(s); }), "permutation");
  s = good;
  s.order = {0, 1, 2, 4};
  EXPECT_HAS(error_of([&] { dl.set_state(s); }), "permutation");
  s = good;
  s.cursor = 5;
  EXPECT_HAS(error_of([&] { dl.set_state(s); }), "cursor");
  s = good;
  s.rng_state = "not a state";
  EXPECT_HAS(error_of([&] { dl.set_state(s); }), "rng_state");
  // A rejected state leaves the loader untouched.
  EXPECT_EQ(dl.state().order, good.order);
  EXPECT_EQ(dl.state().rng_state, good.rng_state);
  EXPECT_THROW(DataLoader(std::vector<Example>{}, 0, {}), Error);
  EXPECT_THROW(DataLoader(numbered_examples(2), 0, {.batch_size = 0}), Error);
}

TEST(Split, DeterministicDisjointAndOrderPreserving) {
  std::vector<TextPair> pairs;
  for (int i = 0; i < 20; ++i) pairs.push_back({std::to_string(i), "t", i + 1});
  const TextSplit a = split_validation_count(pairs, 5, 11);
  const TextSplit b = split_validation_count(pairs, 5, 11);
  const TextSplit c = split_validation_fraction(pairs, 0.25, 12);
  ASSERT_EQ(a.valid.size(), 5u);
  ASSERT_EQ(a.train.size(), 15u);
  ASSERT_EQ(c.valid.size(), 5u);
  std::vector<int64_t> va, vb, vc;
  for (const auto& p : a.valid) va.push_back(p.line);
  for (const auto& p : b.valid) vb.push_back(p.line);
  for (const auto& p : c.valid) vc.push_back(p.line);
  EXPECT_EQ(va, vb);
  EXPECT_NE(va, vc);
  EXPECT_TRUE(std::is_sorted(va.begin(), va.end()));
  std::set<int64_t> lines;
  for (const auto& p : a.train) lines.insert(p.line);
  for (const auto& p : a.valid) EXPECT_TRUE(lines.insert(p.line).second);
  EXPECT_EQ(lines.size(), 20u);
  EXPECT_THROW(split_validation_count(pairs, 20, 1), Error);
  EXPECT_THROW(split_validation_fraction(pairs, 1.0, 1), Error);
}

TEST(CopyTask, DefaultAlphabetHasFortyDistinctCharacters) {
  const auto a = default_copy_alphabet();
  EXPECT_EQ(a.size(), 40u);
  EXPECT_EQ(std::set<std::string>(a.begin(), a.end()).size(), 40u);
  for (const auto& c : a) EXPECT_EQ(utf8_decode(c, "alphabet").size(), 1u) << c;
}

TEST(CopyTask, ValidationStringsAreDistinctAndNeverInTraining) {
  CopyTaskOptions opt;
  opt.n_train = 3000;
  opt.n_valid = 60;
  opt.max_len = 3;  // small space, so collisions would happen without the rule
  opt.seed = 5;
  const CopyTask t = generate_copy_task(opt);
  ASSERT_EQ(t.train.size(), 3000u);
  ASSERT_EQ(t.valid.size(), 60u);
  std::set<std::string> valid;
  for (const auto& p : t.valid) {
    EXPECT_EQ(p.source, p.target);
    EXPECT_TRUE(valid.insert(p.source).second) << "repeated " << p.source;
  }
  size_t short_train = 0;
  for (const auto& p : t.train) {
    EXPECT_EQ(p.source, p.target);
    EXPECT_FALSE(valid.contains(p.source)) << p.source;
    const size_t n = utf8_decode(p.source, "s").size();
    EXPECT_GE(n, 1u);
    EXPECT_LE(n, 3u);
    short_train += n == 1;
  }
  EXPECT_GT(short_train, 0u);
  // Same options, same data; another seed, other data.
  EXPECT_EQ(generate_copy_task(opt).train[17].source, t.train[17].source);
  opt.seed = 6;
  const CopyTask u = generate_copy_task(opt);
  bool differs = false;
  for (size_t i = 0; i < 50; ++i) differs |= u.train[i].source != t.train[i].source;
  EXPECT_TRUE(differs);
}

TEST(CopyTask, ImpossibleSizesAreAnError) {
  CopyTaskOptions opt;
  opt.alphabet = {"a", "b"};
  opt.min_len = 1;
  opt.max_len = 2;  // 2 + 4 = 6 strings
  opt.n_valid = 6;
  opt.n_train = 1;
  EXPECT_HAS(error_of([&] { generate_copy_task(opt); }), "only 6 distinct strings");
  opt.n_valid = 7;
  opt.n_train = 0;
  EXPECT_THROW(generate_copy_task(opt), Error);
  opt.n_valid = 5;  // leaves exactly one string for training
  opt.n_train = 10;
  const CopyTask t = generate_copy_task(opt);
  for (const auto& p : t.train) EXPECT_EQ(p.source, t.train[0].source);
  opt.alphabet = {"a", "a"};
  EXPECT_HAS(error_of([&] { generate_copy_task(opt); }), "twice");
  opt.alphabet = {"ab"};
  EXPECT_HAS(error_of([&] { generate_copy_task(opt); }), "one character");
}

TEST(CopyTask, WrittenFilesReadBack) {
  CopyTaskOptions opt;
  opt.n_train = 50;
  opt.n_valid = 10;
  opt.seed = 3;
  const CopyTask t = generate_copy_task(opt);
  const std::string dir = (temp_dir() / "copy").string();
  write_copy_task(dir, t, opt.alphabet);
  const auto train = read_tsv(dir + "/train.tsv");
  ASSERT_EQ(train.size(), 50u);
  EXPECT_EQ(train[3].source, t.train[3].source);
  const Vocab v = Vocab::load(dir + "/vocab.txt");
  EXPECT_EQ(v.size(), 45);
  const Tokenizer tok(v);
  EXPECT_NO_THROW(encode_examples(tok, read_tsv(dir + "/valid.tsv"), "valid.tsv"));
}

}  // namespace
}  // namespace seqtape
