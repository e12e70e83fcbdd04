// Metric values worked out by hand (the arithmetic is in the comments) and published examples:
//   sacreBLEU's own tests, github.com/mjpost/sacrebleu: test/test_bleu.py,
//   test/test_sentence_bleu.py, test/test_chrf.py, test/test_ter.py (tolerances as there: 1e-8,
//   1e-3, 1e-4, 1e-3);
//   the chrF metric card of github.com/huggingface/datasets, metrics/chrf/README.md.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "eval/metrics.h"
#include "tests/test_util.h"
#include "train/dataset.h"

namespace seqtape::metrics {
namespace {

using Strings = std::vector<std::string>;

double bleu1(const std::string& hyp, const std::string& ref, const BleuOptions& opt = {}) {
  const Strings h{hyp}, r{ref};
  return corpus_bleu(h, r, opt).score;
}

double chrf1(const std::string& hyp, const std::string& ref, const ChrfOptions& opt = {}) {
  const Strings h{hyp}, r{ref};
  return corpus_chrf(h, r, opt);
}

// ---- 13a tokenizer --------------------------------------------------------------------------

TEST(Tokenize13a, SplitsPunctuationAsMteval) {
  EXPECT_EQ(tokenize_13a("Hello, world!"), "Hello , world !");
  // period and comma stay inside numbers; a dash after a digit is split off
  EXPECT_EQ(tokenize_13a("3.14 and 1,000"), "3.14 and 1,000");
  EXPECT_EQ(tokenize_13a("1990-2000"), "1990 - 2000");
  EXPECT_EQ(tokenize_13a("a-b don't"), "a-b don't");  // ' and - between letters stay
  EXPECT_EQ(tokenize_13a("(hi) x.y end."), "( hi ) x . y end .");
  EXPECT_EQ(tokenize_13a("costs $5.00 or 5."), "costs $ 5.00 or 5 .");
  EXPECT_EQ(tokenize_13a("&amp;lt; &quot;a&quot;"), "< \" a \"");  // entities, in sequence
  EXPECT_EQ(tokenize_13a("Grüße, 你好."), "Grüße , 你好 .");
  EXPECT_EQ(tokenize_13a("  a \t b\u3000c  "), "a b c");  // Unicode whitespace collapses
  EXPECT_EQ(tokenize_13a(""), "");
}

// ---- BLEU, by hand ------------------------------------------------------------------------

TEST(Bleu, HandWorkedValues) {
  EXPECT_NEAR(bleu1("the cat sat on the mat", "the cat sat on the mat"), 100.0, 1e-9);
  // a b c d e | a b c d f: 1-grams 4/5, 2-grams 3/4 (ab bc cd), 3-grams 2/3, 4-grams 1/2;
  // BLEU = (4/5·3/4·2/3·1/2)^(1/4) = 0.2^(1/4), no brevity penalty.
  EXPECT_NEAR(bleu1("a b c d e", "a b c d f"), 100 * std::pow(0.2, 0.25), 1e-9);
  // a b c x | a b c d: 3/4, 2/3, 1/2 and 0/1 4-grams; 'exp' smoothing makes the first zero
  // precision 1/(2·1): BLEU = (3/4·2/3·1/2·1/2)^(1/4) = 0.125^(1/4).
  EXPECT_NEAR(bleu1("a b c x", "a b c d"), 100 * std::pow(0.125, 0.25), 1e-9);
  // a b c d | a b c d e f: every precision 1, brevity penalty exp(1 - 6/4).
  EXPECT_NEAR(bleu1("a b c d", "a b c d e f"), 100 * std::exp(-0.5), 1e-9);
  // Three tokens have no 4-gram: the 4-gram total is 0, its precision stays 0 and sacreBLEU's
  // log(0) = -9999999999 makes BLEU 0 without effective order.
  EXPECT_EQ(bleu1("the cat sat", "the cat sat on the mat"), 0.0);
  // No match at all is 0 under any smoothing.
  EXPECT_EQ(bleu1("x y z w", "a b c d"), 0.0);
}

TEST(Bleu, CorpusStatisticsAreSummedBeforeTheScore) {
  // Segment 1: a b c d e | a b c d f  -> correct 4,3,2,1 of 5,4,3,2, lengths 5/5.
  // Segment 2: a b c d | a b c d      -> correct 4,3,2,1 of 4,3,2,1, lengths 4/4.
  // Corpus: 8/9 · 6/7 · 4/5 · 2/3, not the mean of the two sentence scores.
  const Strings hyps{"a b c d e", "a b c d"}, refs{"a b c d f", "a b c d"};
  const BleuScore s = corpus_bleu(hyps, refs);
  EXPECT_EQ(s.sys_len, 9);
  EXPECT_EQ(s.ref_len, 9);
  const double expected = 100 * std::pow(8.0 / 9 * 6.0 / 7 * 4.0 / 5 * 2.0 / 3, 0.25);
  EXPECT_NEAR(s.score, expected, 1e-9);
  BleuStats sum = bleu_segment_stats(hyps[0], std::span(refs).subspan(0, 1));
  sum.add(bleu_segment_stats(hyps[1], std::span(refs).subspan(1, 1)));
  EXPECT_EQ(sum.correct, (std::vector<int64_t>{8, 6, 4, 2}));
  EXPECT_EQ(sum.total, (std::vector<int64_t>{9, 7, 5, 3}));
}

TEST(Bleu, RejectsMismatchedCorpora) {
  const Strings hyps{"a", "b"}, refs{"a"};
  EXPECT_ERROR_HAS(corpus_bleu(hyps, refs), "2 hypotheses but reference stream 0 has 1");
}

// ---- BLEU, published (sacreBLEU test/test_bleu.py, test/test_sentence_bleu.py) -------------

const Strings kHyps{"The dog bit the man.", "It wasn't surprising.",
                    "The man had just bitten him."};
const std::vector<Strings> kRefs{
    {"The dog bit the man.", "It was not unexpected.", "The man bit him first."},
    {"The dog had bit the man.", "No one was surprised.", "The man had bitten the dog."}};

TEST(BleuSacrebleu, CorpusBleuTwoReferences) {
  EXPECT_NEAR(corpus_bleu(kHyps, kRefs).score, 48.530827, 1e-6);
  EXPECT_EQ(corpus_bleu(Strings{"", "", ""}, kRefs).score, 0.0);
  BleuOptions none;
  none.tokenize = BleuTokenize::kNone;
  EXPECT_NEAR(corpus_bleu(kHyps, kRefs, none).score, 49.1919566, 1e-6);
  BleuOptions nosmooth;
  nosmooth.smooth = BleuSmooth::kNone;
  EXPECT_NEAR(corpus_bleu(kHyps, kRefs, nosmooth).score, 48.530827, 1e-6);
}

TEST(BleuSacrebleu, MaxOrder) {
  // test_max_ngram_order: the scores printed with two decimals.
  const std::vector<std::pair<int, double>> cases{{1, 77.65}, {2, 60.50}, {3, 53.93},
                                                  {4, 48.53}, {5, 46.14}, {6, 43.28}};
  for (const auto& [order, expected] : cases) {
    BleuOptions o;
    o.max_order = order;
    EXPECT_NEAR(corpus_bleu(kHyps, kRefs, o).score, expected, 0.005) << order;
  }
}

// raw_corpus_bleu: tokenize 'none', smoothing 'floor', effective order.
BleuOptions raw_options(double floor) {
  BleuOptions o;
  o.tokenize = BleuTokenize::kNone;
  o.smooth = BleuSmooth::kFloor;
  o.smooth_value = floor;
  o.effective_order = true;
  return o;
}

TEST(BleuSacrebleu, RawAndEffectiveOrder) {
  const BleuOptions raw = raw_options(0.01);
  EXPECT_NEAR(bleu1("this is a test", "this is a test", raw) / 100, 1.0, 1e-8);
  EXPECT_NEAR(bleu1("this is a fest", "this is a test", raw) / 100, 0.223606797749979, 1e-8);
  EXPECT_EQ(
      corpus_bleu(Strings{"this is a test", "another test"}, Strings{"ref1", "ref2"}, raw).score,
      0.0);
  EXPECT_NEAR(bleu1("test", "a test", raw) / 100, 0.3678794411714425, 1e-8);
  EXPECT_NEAR(bleu1("a test", "a test", raw) / 100, 1.0, 1e-8);
  EXPECT_NEAR(bleu1("a little test", "a test", raw) / 100, 0.03218297948685433, 1e-8);
  // test_offset: floor 0 gives 0, the default floor 0.1 gives 0.1555722182.
  const std::string h = "am I am a character sequence", r = "I am a symbol string sequence a a";
  EXPECT_EQ(bleu1(h, r, raw_options(0.0)), 0.0);
  BleuOptions dflt = raw_options(0.1);
  dflt.smooth_value.reset();
  EXPECT_NEAR(bleu1(h, r, dflt) / 100, 0.1555722182, 1e-8);
  // test_statistics
  const BleuStats st = bleu_segment_stats(h, Strings{r}, raw);
  EXPECT_EQ(st.correct, (std::vector<int64_t>{4, 2, 1, 0}));
  EXPECT_EQ(st.total, (std::vector<int64_t>{6, 5, 4, 3}));
}

TEST(BleuSacrebleu, ScoringFromStatistics) {
  // test_scoring: compute_bleu([9,7,5,3], [10,8,6,4], 11, 11), smoothing 'none'.
  BleuStats st;
  st.correct = {9, 7, 5, 3};
  st.total = {10, 8, 6, 4};
  st.sys_len = st.ref_len = 11;
  BleuOptions o;
  o.smooth = BleuSmooth::kNone;
  EXPECT_NEAR(bleu_from_stats(st, o).score / 100, 0.8375922397, 1e-8);
  // test_degenerate_statistics (floor): zero matches are 0 whatever the offset.
  o.smooth = BleuSmooth::kFloor;
  o.smooth_value = 0.1;
  st.correct = {0, 0, 0, 0};
  EXPECT_EQ(bleu_from_stats(st, o).score, 0.0);
  st = BleuStats{};
  st.correct = {6, 5, 4, 0};
  st.total = {6, 5, 4, 3};
  st.sys_len = st.ref_len = 6;
  o.smooth_value = 0.0;
  EXPECT_EQ(bleu_from_stats(st, o).score, 0.0);
}

TEST(BleuSacrebleu, SentenceBleuSmoothingsIssue98) {
  // test_sentence_bleu.py: Romanian with ţ/ș diacritics, 13a unless said, effective order.
  const std::string ref = "producţia de zahăr brut se exprimă în zahăr alb;";
  const std::string sys =
      "Producția de zahăr primă va fi exprimată în ceea ce privește zahărul alb;";
  struct Case {
    BleuSmooth smooth;
    std::optional<double> value;
    BleuTokenize tok;
    double expected;
  };
  const std::vector<Case> cases{
      {BleuSmooth::kExp, {}, BleuTokenize::k13a, 8.493},
      {BleuSmooth::kNone, {}, BleuTokenize::k13a, 0.0},
      {BleuSmooth::kFloor, {}, BleuTokenize::k13a, 4.51688},
      {BleuSmooth::kFloor, 0.1, BleuTokenize::k13a, 4.51688},
      {BleuSmooth::kFloor, 0.5, BleuTokenize::k13a, 10.10},
      {BleuSmooth::kAddK, {}, BleuTokenize::k13a, 14.882},
      {BleuSmooth::kAddK, 1, BleuTokenize::k13a, 14.882},
      {BleuSmooth::kAddK, 2, BleuTokenize::k13a, 21.389},
      {BleuSmooth::kExp, {}, BleuTokenize::kNone, 7.347},
      {BleuSmooth::kExp, {}, BleuTokenize::kChar, 40.8759},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    BleuOptions o;
    o.smooth = cases[i].smooth;
    o.smooth_value = cases[i].value;
    o.tokenize = cases[i].tok;
    o.effective_order = true;
    EXPECT_NEAR(bleu1(sys, ref, o), cases[i].expected, 1e-3) << "case " << i;
    // Issue #141 (test_cases_zero_bleu, 13a): no word matches, 0 with every smoothing.
    if (cases[i].tok == BleuTokenize::k13a) {
      EXPECT_EQ(bleu1("this is a cat", "okay thanks", o), 0.0) << "case " << i;
    }
  }
}

TEST(Bleu, CharTokenizerForTextWithoutSpaces) {
  // 今天天气 | 今天天气很好, characters as tokens: every n-gram of the hypothesis matches
  // (4, 3, 2, 1 of them), brevity penalty exp(1 - 6/4).
  BleuOptions o;
  o.tokenize = BleuTokenize::kChar;
  EXPECT_NEAR(bleu1("今天天气", "今天天气很好", o), 100 * std::exp(-0.5), 1e-9);
  // With 13a the whole line is one token: no 2-gram, BLEU 0.
  EXPECT_EQ(bleu1("今天天气", "今天天气很好"), 0.0);
}

// ---- chrF, by hand --------------------------------------------------------------------------

TEST(Chrf, HandWorkedValues) {
  EXPECT_DOUBLE_EQ(chrf1("ab", "ab"), 100.0);
  // aa | ab: 1-grams P=R=1/2, 2-grams aa vs ab P=R=0; orders 3..6 absent from the reference
  // do not count. Averages P=R=1/4, so F = 1/4 for any beta.
  EXPECT_NEAR(chrf1("aa", "ab"), 25.0, 1e-12);
  // ab | abc: 1-grams P=2/2, R=2/3; 2-grams P=1/1, R=1/2; 3-gram only in the reference (the
  // hypothesis has none: not effective). P=1, R=7/12, F2 = 5PR/(4P+R) = (35/12)/(55/12) = 7/11.
  EXPECT_NEAR(chrf1("ab", "abc"), 100.0 * 7 / 11, 1e-12);
  // Whitespace is removed before counting.
  EXPECT_DOUBLE_EQ(chrf1("a b c", "abc"), 100.0);
  EXPECT_EQ(chrf1("", "abc"), 0.0);
}

TEST(Chrf, CountsCharactersNotBytes) {
  // 今天天气 | 今天天气很好 (characters): P = 1 for orders 1..4, R = 4/6, 3/5, 2/4, 1/3;
  // orders 5, 6 have no hypothesis n-gram. R = 2.1/4 = 0.525, F2 = 5·0.525/(4 + 0.525).
  EXPECT_NEAR(chrf1("今天天气", "今天天气很好"), 100 * 5 * 0.525 / 4.525, 1e-12);
  // Grüße | Gruße: 1-grams 4/5, 2-grams Gr ße 2/4, orders 3..5 nothing matches, no 6-gram:
  // P = R = (0.8 + 0.5) / 5 = 0.26. Counting bytes would see ü as two symbols.
  EXPECT_NEAR(chrf1("Grüße", "Gruße"), 26.0, 1e-12);
  const std::vector<char32_t> c = characters("Grüße 今");
  EXPECT_EQ(c.size(), 7u);
  // Invalid UTF-8 does not stop an evaluation: one U+FFFD per bad byte.
  EXPECT_EQ(characters("a\xFF"
                       "b"),
            (std::vector<char32_t>{U'a', U'\uFFFD', U'b'}));
}

TEST(Chrf, SeveralReferencesTakeTheBestSentenceScore) {
  // ab against xy (chrF 0) and ab (100): the second reference's statistics are used.
  const std::vector<Strings> streams{{"xy"}, {"ab"}};
  EXPECT_DOUBLE_EQ(corpus_chrf(Strings{"ab"}, streams), 100.0);
  const ChrfStats st = chrf_segment_stats("ab", Strings{"xy", "ab"});
  EXPECT_EQ(st.match, (std::vector<int64_t>{2, 1, 0, 0, 0, 0}));
  EXPECT_EQ(st.hyp, (std::vector<int64_t>{2, 1, 0, 0, 0, 0}));
}

TEST(Chrf, CorpusStatisticsAreSummedBeforeTheScore) {
  // aa|ab and ab|ab: 1-grams hyp 4, ref 4, match 3; 2-grams hyp 2, ref 2, match 1.
  // P = R = (3/4 + 1/2)/2 = 5/8, not the mean of the sentence scores (25 and 100).
  EXPECT_NEAR(corpus_chrf(Strings{"aa", "ab"}, Strings{"ab", "ab"}), 62.5, 1e-12);
}

// ---- chrF, published ----------------------------------------------------------------------

TEST(ChrfSacrebleu, EffectiveOrderBeta3) {
  // test_chrf.py, test_cases_effective_order (the default eps_smoothing=False), beta 3.
  ChrfOptions o;
  o.beta = 3;
  EXPECT_NEAR(chrf1("a", "a", o), 100.0, 1e-4);
  EXPECT_NEAR(chrf1("", "reference", o), 0.0, 1e-4);
  EXPECT_NEAR(chrf1("a b c", "a b c", o), 100.0, 1e-4);
  EXPECT_NEAR(chrf1("a b c", "abc", o), 100.0, 1e-4);
  EXPECT_NEAR(chrf1("", "c", o), 0.0, 1e-4);
  EXPECT_NEAR(corpus_chrf(Strings{"a", "b"}, Strings{"a", "c"}, o), 50.0, 1e-4);
  EXPECT_NEAR(chrf1("aa", "ab", o), 25.0, 1e-4);
}

TEST(ChrfSacrebleu, EpsSmoothingBeta3) {
  // test_chrf.py, test_cases (eps_smoothing=True), beta 3; includes German with ä.
  ChrfOptions o;
  o.beta = 3;
  o.eps_smoothing = true;
  EXPECT_NEAR(chrf1("abcdefg", "hijklmnop", o), 0.0, 1e-4);
  EXPECT_NEAR(chrf1("a", "b", o), 0.0, 1e-4);
  EXPECT_NEAR(chrf1("", "b", o), 0.0, 1e-4);
  EXPECT_NEAR(chrf1("", "reference", o), 0.0, 1e-4);
  EXPECT_NEAR(chrf1("aa", "ab", o), 8.3333, 1e-4);
  EXPECT_NEAR(corpus_chrf(Strings{"a", "b"}, Strings{"a", "c"}, o), 8.3333, 1e-4);
  EXPECT_NEAR(chrf1("a", "a", o), 16.6667, 1e-4);
  EXPECT_NEAR(chrf1("a b c", "a b c", o), 50.0, 1e-4);
  EXPECT_NEAR(chrf1(" risk assessment must be made of those who are qualified and expertise in "
                    "the sector - these are the scientists .",
                    "risk assessment has to be undertaken by those who are qualified and expert "
                    "in that area - that is the scientists .",
                    o),
              63.361730, 1e-4);
  EXPECT_NEAR(
      chrf1(" Die    Beziehung zwischen  Obama und Netanjahu ist nicht gerade  freundlich. ",
            "Das Verhältnis zwischen Obama und Netanyahu ist nicht gerade freundschaftlich.", o),
      64.1302698, 1e-4);
  EXPECT_NEAR(chrf1("Niemand hat die Absicht, eine Mauer zu errichten",
                    "Niemand hat die Absicht, eine Mauer zu errichten", o),
              100.0, 1e-4);
}

TEST(ChrfSacrebleu, KeepWhitespaceBeta3) {
  // test_chrf.py, test_cases_keep_whitespace.
  ChrfOptions o;
  o.beta = 3;
  o.whitespace = true;
  EXPECT_NEAR(
      chrf1("Die Beziehung zwischen Obama und Netanjahu ist nicht gerade freundlich.",
            "Das Verhältnis zwischen Obama und Netanyahu ist nicht gerade freundschaftlich.", o),
      67.3481606, 1e-4);
  EXPECT_NEAR(chrf1("risk assessment must be made of those who are qualified and expertise in "
                    "the sector - these are the scientists .",
                    "risk assessment has to be undertaken by those who are qualified and expert "
                    "in that area - that is the scientists .",
                    o),
              65.2414427, 1e-4);
}

TEST(ChrfSacrebleu, SentenceLevelCzechEpsSmoothing) {
  // test_chrf.py, test_sentence_level_chrf: beta 2, eps smoothing, Czech diacritics.
  ChrfOptions o;
  o.eps_smoothing = true;
  EXPECT_NEAR(chrf1("Co nás nejvíc trápí, protože lékaři si vybírají, kdo bude žít a kdo zemře.",
                    "Nejvíce smutní jsme z toho, že musíme rozhodovat o tom, kdo bude žít a kdo "
                    "zemře.",
                    o),
              39.14078509, 1e-4);
  EXPECT_NEAR(
      chrf1("Nebo prostě nemají vybavení, které by jim pomohlo, uvedli lékaři.",
            "A někdy nemáme ani potřebný materiál, abychom jim pomohli, popsali lékaři.", o),
      31.22557079, 1e-4);
  EXPECT_NEAR(chrf1("Lapali po dechu, jejich životy skončily dřív, než skutečně začaly.",
                    "Lapali po dechu a pak jejich život skončil - dřív, než skutečně mohl začít, "
                    "připomněli.",
                    o),
              57.15704367, 1e-4);
}

TEST(ChrfSacrebleu, DefaultsHuggingFaceMetricCard) {
  // huggingface/datasets metrics/chrf/README.md: sacreBLEU's defaults (6, 0, beta 2).
  EXPECT_NEAR(chrf1("The relationship between Obama and Netanyahu is not exactly friendly.",
                    "The ties between Obama and Netanyahu are not particularly friendly."),
              61.576379378113785, 1e-9);
  EXPECT_NEAR(
      corpus_chrf(Strings{"The relationship between cats and dogs is not exactly friendly.",
                          "a good bookshop is just a genteel black hole that knows how to read."},
                  Strings{"The relationship between dogs and cats is not exactly friendly.",
                          "A good bookshop is just a genteel Black Hole that knows how to read."}),
      84.64214891738334, 1e-9);
}

// ---- error rates, accuracy, exact match ---------------------------------------------------

TEST(EditDistance, HandWorkedValues) {
  const auto cd = [](const std::string& a, const std::string& b) {
    const auto x = characters(a), y = characters(b);
    return edit_distance(std::span<const char32_t>(x), std::span<const char32_t>(y));
  };
  EXPECT_EQ(cd("kitten", "sitting"), 3);  // k->s, e->i, +g
  EXPECT_EQ(cd("", "abc"), 3);
  EXPECT_EQ(cd("abc", ""), 3);
  EXPECT_EQ(cd("abc", "abc"), 0);
  EXPECT_EQ(cd("今天天气", "今天气很好"), 3);  // -天, +很, +好
  EXPECT_EQ(cd("flaw", "lawn"), 2);            // -f, +n
}

TEST(ErrorRate, CorpusRatesAreSummed) {
  // "the cat sat" vs "the cat sat down": 1 edit / 4; "a b" vs "a b": 0 / 2.
  ErrorRate er;
  const std::vector<int32_t> h1{1, 2, 3}, r1{1, 2, 3, 4}, h2{5, 6}, r2{5, 6};
  er.add(std::span<const int32_t>(h1), std::span<const int32_t>(r1));
  er.add(std::span<const int32_t>(h2), std::span<const int32_t>(r2));
  EXPECT_DOUBLE_EQ(er.token_error_rate(), 1.0 / 6);
  EXPECT_DOUBLE_EQ(er.sequence_error_rate(), 0.5);
  ErrorRate empty;
  EXPECT_EQ(empty.token_error_rate(), 0.0);
}

TEST(TokenAccuracy, SkipsPadding) {
  TokenAccuracy acc;
  const std::vector<int32_t> pred{3, 4, 9, 0, 7}, labels{3, 4, 5, 0, 0};
  acc.add(pred, labels, /*ignore_id=*/0);  // 2 of the 3 non-pad labels
  EXPECT_DOUBLE_EQ(acc.value(), 2.0 / 3);
  EXPECT_ERROR_HAS(acc.add(std::vector<int32_t>{1}, labels, 0), "1 predictions for 5 labels");
}

TEST(CorpusMetrics, SummaryCombinesEveryMetric) {
  CorpusMetrics m;  // error rate over characters
  m.add("今天天气很好", "今天天气很好");
  m.add("今天气", "今天天气");
  const EvalSummary s = m.summary();
  EXPECT_EQ(s.segments, 2);
  EXPECT_DOUBLE_EQ(s.exact, 0.5);
  EXPECT_DOUBLE_EQ(s.ser, 0.5);
  EXPECT_DOUBLE_EQ(s.cer, 1.0 / 10);  // one deletion over 6 + 4 reference characters
  EXPECT_NEAR(s.chrf,
              corpus_chrf(Strings{"今天天气很好", "今天气"}, Strings{"今天天气很好", "今天天气"}),
              1e-12);
  CorpusMetrics words(ErrorUnit::kWords);
  words.add("the cat sat", "the cat sat down");
  EXPECT_DOUBLE_EQ(words.summary().cer, 0.25);
  CorpusMetrics ids;
  const std::vector<int32_t> h{7, 8}, r{7, 8, 9};
  ids.add_tokens("ab", "abc", h, r);
  EXPECT_DOUBLE_EQ(ids.summary().cer, 1.0 / 3);
}

// G2P: one word, several pronunciations. WER counts words whose hypothesis is none of them;
// PER takes the closest reference's edits over that reference's length, summed over words.
TEST(CorpusMetrics, WerAndPerAgainstSeveralReferences) {
  CorpusMetrics m;
  m.add("r eh d", Strings{"r iy d", "r eh d"});  // the second reference: right, 0 edits of 3
  // One edit from each reference: the first listed counts, 1 edit of 4 (not 1 of 2).
  m.add("a b c", Strings{"a b c d", "a b"});
  m.add("x y", Strings{"x y z"});  // 1 edit of 3
  const EvalSummary s = m.summary();
  EXPECT_EQ(s.segments, 3);
  EXPECT_DOUBLE_EQ(s.wer, 2.0 / 3);
  EXPECT_DOUBLE_EQ(s.exact, 1.0 / 3);
  EXPECT_DOUBLE_EQ(s.per, 2.0 / 10);  // (0 + 1 + 1) / (3 + 4 + 3)
  // CER in characters, closest reference too: 0 of 6, 2 of 7 ("a b c d" less " d"; "a b" plus
  // " c" is 2 edits too, the first listed counts), 2 of 5.
  EXPECT_DOUBLE_EQ(s.cer, 4.0 / 18);
  EXPECT_DOUBLE_EQ(s.ser, 2.0 / 3);
  // BLEU and chrF see every reference, as sacreBLEU's several reference streams.
  const Strings hyps{"r eh d", "a b c", "x y"};
  const std::vector<Strings> streams{{"r iy d", "a b c d", "x y z"}, {"r eh d", "a b", "x y z"}};
  EXPECT_NEAR(s.bleu, corpus_bleu(hyps, streams).score, 1e-12);
  EXPECT_NEAR(s.chrf, corpus_chrf(hyps, streams), 1e-12);
  EXPECT_NEAR(s.ter, corpus_ter(hyps, streams), 1e-12);
  EXPECT_ERROR_HAS(m.add("a", Strings{}), "no reference");
}

// ---- TER ----------------------------------------------------------------------------------

double ter1(const std::string& hyp, const std::string& ref) {
  const std::vector<Strings> r{{ref}};
  return corpus_ter(Strings{hyp}, r);
}

// sacreBLEU's test/test_ter.py, every case: corpus TER of the hypotheses against one
// reference stream, |score - 100·expected| < 1e-3.
TEST(TerSacrebleu, TestTerCases) {
  EXPECT_NEAR(ter1("aaaa bbbb cccc dddd", "aaaa bbbb cccc dddd"), 0.0, 1e-3);  // perfect match
  EXPECT_NEAR(ter1("dddd eeee ffff", "aaaa bbbb cccc"), 100.0, 1e-3);          // no overlap
  EXPECT_NEAR(ter1("", "a"), 100.0, 1e-3);  // corner case, empty hypothesis
  EXPECT_NEAR(ter1("d e f g h a b c", "a b c d e f g h"), 100.0 / 8, 1e-3);  // one shift fixes it
  // Realistic example from WMT dev data (2019).
  const Strings hyps{
      "wählen Sie \" Bild neu berechnen , \" um beim Ändern der Bildgröße Pixel hinzuzufügen "
      "oder zu entfernen , damit das Bild ungefähr dieselbe Größe aufweist wie die andere Größe .",
      "wenn Sie alle Aufgaben im aktuellen Dokument aktualisieren möchten , wählen Sie im Menü "
      "des Aufgabenbedienfelds die Option \" Alle Aufgaben aktualisieren . \"",
      "klicken Sie auf der Registerkarte \" Optionen \" auf die Schaltfläche \" Benutzerdefiniert "
      "\" und geben Sie Werte für \" Fehlerkorrektur-Level \" und \" Y / X-Verhältnis \" ein .",
      "Sie können beispielsweise ein Dokument erstellen , das ein Auto über die Bühne enthält .",
      "wählen Sie im Dialogfeld \" Neu aus Vorlage \" eine Vorlage aus und klicken Sie auf \" Neu "
      ". \""};
  const Strings refs{
      "wählen Sie \" Bild neu berechnen , \" um beim Ändern der Bildgröße Pixel hinzuzufügen "
      "oder zu entfernen , damit die Darstellung des Bildes in einer anderen Größe beibehalten "
      "wird .",
      "wenn Sie alle Aufgaben im aktuellen Dokument aktualisieren möchten , wählen Sie im Menü "
      "des Aufgabenbedienfelds die Option \" Alle Aufgaben aktualisieren . \"",
      "klicken Sie auf der Registerkarte \" Optionen \" auf die Schaltfläche \" Benutzerdefiniert "
      "\" und geben Sie für \" Fehlerkorrektur-Level \" und \" Y / X-Verhältnis \" niedrigere "
      "Werte ein .",
      "Sie können beispielsweise ein Dokument erstellen , das ein Auto enthalt , das sich über "
      "die Bühne bewegt .",
      "wählen Sie im Dialogfeld \" Neu aus Vorlage \" eine Vorlage aus und klicken Sie auf \" Neu "
      ". \""};
  EXPECT_NEAR(corpus_ter(hyps, std::vector<Strings>{refs}), 13.6, 1e-3);
}

// sacreBLEU's test/test_tokenizer_ter.py, the default tokenizer's cases.
TEST(TerSacrebleu, TokenizerDefaults) {
  EXPECT_EQ(ter_tokenize("a b c d"), "a b c d");
  EXPECT_EQ(ter_tokenize(""), "");
  EXPECT_EQ(ter_tokenize("a b c d."), "a b c d.");
  EXPECT_EQ(ter_tokenize("A B C D."), "a b c d.");
}

// PER is a word edit rate over whitespace-separated symbols, as sacreBLEU's WER metric, but
// case-sensitive: sacreBLEU's test/test_wer.py cases, on the 0..1 scale.
TEST(CorpusMetrics, PerMatchesSacrebleuWerCases) {
  const auto per1 = [](const std::string& hyp, const std::string& ref) {
    CorpusMetrics m;
    m.add(hyp, ref);
    return m.summary().per;
  };
  EXPECT_NEAR(per1("aaaa bbbb cccc dddd", "aaaa bbbb cccc dddd"), 0.0, 1e-5);  // perfect match
  EXPECT_NEAR(per1("dddd eeee ffff", "aaaa bbbb cccc"), 1.0, 1e-5);  // no overlap, same length
  EXPECT_NEAR(per1("", "a"), 1.0, 1e-5);                             // empty hypothesis
  EXPECT_NEAR(per1("a", ""), 1.0, 1e-5);                             // empty reference
  EXPECT_NEAR(per1("", ""), 0.0, 1e-5);                              // both empty
  EXPECT_NEAR(per1("the cat sat on the mat", "the cat sat on a mat"), 1.0 / 6, 1e-5);
  EXPECT_NEAR(per1("a b c d", "a b d"), 1.0 / 3, 1e-5);              // one inserted word
  EXPECT_NEAR(per1("The cat sat.", "the cat sat."), 1.0 / 3, 1e-5);  // case-sensitive
}

TEST(Ter, HandWorkedValues) {
  // A shift of a block is one edit where the edit distance alone counts one per word moved:
  // "c d a b" -> "a b c d" is one shift of "a b" (or of "c d"): 1 edit of 4.
  EXPECT_DOUBLE_EQ(ter1("c d a b", "a b c d"), 25.0);
  EXPECT_EQ(edit_distance(std::span<const char>(std::string_view("cdab")),
                          std::span<const char>(std::string_view("abcd"))),
            4);
  // Case-insensitive by default (Latin-1 letters too), punctuation kept as it is.
  EXPECT_DOUBLE_EQ(ter1("The CAT sat. ÄRGER", "the cat sat. ärger"), 0.0);
  EXPECT_DOUBLE_EQ(ter1("the cat sat", "the cat sat ."), 25.0);  // one insertion of 4
  EXPECT_EQ(ter_tokenize("ÀÉÎ Σ Ж Ё Łódź"), "àéî σ ж ё łódź");
  // Several references: the fewest edits, over the mean reference length (sacreBLEU):
  // 0 edits against "a b", over (2 + 4) / 2 words.
  const TerStats st = ter_segment_stats("a b", Strings{"a b c d", "a b"});
  EXPECT_DOUBLE_EQ(st.edits, 0.0);
  EXPECT_DOUBLE_EQ(st.ref_len, 3.0);
  // An empty reference: every hypothesis word is an edit, and no length, so 100 alone.
  EXPECT_DOUBLE_EQ(ter1("x y", ""), 100.0);
  const TerStats empty = ter_segment_stats("x y", Strings{""});
  EXPECT_DOUBLE_EQ(empty.edits, 2.0);
  EXPECT_DOUBLE_EQ(empty.ref_len, 0.0);
}

TEST(CorpusMetrics, CopyBaseline) {
  // Copying is perfect where source == target and scores the overlap elsewhere.
  const Strings src{"Hand", "Haus", "Computer"}, ref{"hand", "house", "Computer"};
  const EvalSummary s = copy_baseline(src, ref);
  EXPECT_DOUBLE_EQ(s.exact, 1.0 / 3);
  EXPECT_NEAR(s.chrf, corpus_chrf(src, ref), 1e-12);
  EXPECT_NEAR(s.bleu, corpus_bleu(src, ref).score, 1e-12);
  EXPECT_ERROR_HAS(copy_baseline(src, Strings{"x"}), "3 sources but 1 references");
}

// The copy baseline of datasets/de-en (generated by datasets/de-en/make.sh, not committed):
// skipped when the split has not been made. Prints the figures quoted in docs/cli.md.
TEST(CorpusMetrics, CopyBaselineOnDeEnTestSplit) {
  const std::string path = std::string(SEQTAPE_SOURCE_DIR) + "/datasets/de-en/test.tsv";
  if (!std::filesystem::exists(path)) GTEST_SKIP() << path << " not made (datasets/de-en/make.sh)";
  Strings src, ref;
  int64_t identical = 0;
  for (const TextPair& p : read_tsv(path)) {
    src.push_back(p.source);
    ref.push_back(p.target);
    identical += p.source == p.target ? 1 : 0;
  }
  const EvalSummary s = copy_baseline(src, ref);
  EXPECT_EQ(s.segments, static_cast<int64_t>(src.size()));
  EXPECT_DOUBLE_EQ(s.exact, static_cast<double>(identical) / src.size());
  EXPECT_DOUBLE_EQ(s.ser, 1.0 - s.exact);
  std::printf(
      "de-en test copy baseline: %lld segments, chrF %.2f, BLEU %.2f, exact %.4f, "
      "character error rate %.4f\n",
      static_cast<long long>(s.segments), s.chrf, s.bleu, s.exact, s.cer);
}

}  // namespace
}  // namespace seqtape::metrics
