#pragma once
// Evaluation metrics for sequence-to-sequence output, tape-free (eval/) so that training,
// `eval`, inference and the server can all use them.
//
// BLEU and chrF follow sacreBLEU 2.x exactly (metrics/bleu.py, metrics/chrf.py,
// tokenizers/tokenizer_13a.py): corpus scores are computed from sufficient statistics summed
// over all segments, then turned into one score. Scores are on sacreBLEU's 0..100 scale.
//   BLEU defaults: 13a tokenizer, max order 4, smoothing 'exp', no effective order.
//   chrF defaults: character order 6, word order 0, beta 2, whitespace removed, no eps smoothing.
// Text is UTF-8; chrF counts characters (code points), never bytes. Whitespace is Python's
// str.split() whitespace (Unicode White_Space), as sacreBLEU sees it.
//
// TER follows sacreBLEU 2.x (metrics/ter.py, metrics/lib_ter.py, tokenizers/tokenizer_ter.py)
// with its defaults: not normalized, punctuation kept, no Asian support, case-insensitive.
//
// Error rates are Levenshtein edit distance (insertions, deletions, substitutions, each 1)
// over a token sequence divided by the reference length, summed over the corpus as sacreBLEU's
// corpus rates are: Σ edits / Σ reference lengths, never a mean of sentence rates.
//
// Several references per source: BLEU and chrF as sacreBLEU; TER the fewest edits over the
// references, over their mean length (sacreBLEU); and for the edit rates below (CER, PER)
// the closest reference, the one with the fewest edits (the first listed on a tie), whose
// length is the denominator's share:
//   WER = sources whose hypothesis equals none of its references (as text) / sources: the
//         word error rate of G2P (a word is wrong or right), not sacreBLEU's WER, which is a
//         word edit rate (PER here, but lower-cased)
//   PER = Σ_sources min_ref edits(hyp, ref) / Σ_sources len(that ref), over space-separated
//         symbols (phonemes in G2P; words in translation)
//   CER = the same over characters (or the unit CorpusMetrics is given)

#include <algorithm>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace seqtape::metrics {

// ---- BLEU ---------------------------------------------------------------------------------

enum class BleuSmooth { kNone, kFloor, kAddK, kExp };
// 13a (the default), none (split on whitespace only), char (every non-space character is a
// token: sacreBLEU's 'char', for text without spaces such as Chinese).
enum class BleuTokenize { k13a, kNone, kChar };

struct BleuOptions {
  BleuSmooth smooth = BleuSmooth::kExp;
  // floor: 0.1 and add-k: 1 when unset (sacreBLEU's SMOOTH_DEFAULTS); unused by none/exp.
  std::optional<double> smooth_value;
  bool effective_order = false;  // sacreBLEU recommends it only for sentence-level BLEU
  BleuTokenize tokenize = BleuTokenize::k13a;
  int max_order = 4;
};

// Sufficient statistics; summing them over segments gives the corpus statistics.
struct BleuStats {
  int64_t sys_len = 0, ref_len = 0;
  std::vector<int64_t> correct, total;  // per order 1..max_order
  void add(const BleuStats& o);
};

struct BleuScore {
  double score = 0;                // 0..100
  std::vector<double> precisions;  // per order, 0..100 (after smoothing)
  double bp = 0;                   // brevity penalty
  int64_t sys_len = 0, ref_len = 0;
};

// mteval-v13a tokenization as sacreBLEU's Tokenizer13a: tokens separated by one space.
std::string tokenize_13a(std::string_view line);

// One segment against one or more references (the closest reference length is used, ties to
// the shorter; n-gram counts are clipped by the maximum count over references).
BleuStats bleu_segment_stats(std::string_view hyp, std::span<const std::string> refs,
                             const BleuOptions& opt = {});
BleuScore bleu_from_stats(const BleuStats& stats, const BleuOptions& opt = {});
// hyps[i] against refs[i]. Sizes must match (an Error otherwise).
BleuScore corpus_bleu(std::span<const std::string> hyps, std::span<const std::string> refs,
                      const BleuOptions& opt = {});
// Several references per segment: ref_streams[k][i] is reference k of segment i.
BleuScore corpus_bleu(std::span<const std::string> hyps,
                      const std::vector<std::vector<std::string>>& ref_streams,
                      const BleuOptions& opt = {});

// ---- chrF ---------------------------------------------------------------------------------

struct ChrfOptions {
  int char_order = 6;
  double beta = 2;
  bool whitespace = false;     // true keeps whitespace inside the character n-grams
  bool eps_smoothing = false;  // false: sacreBLEU's default "effective order" averaging
};

// Per order 1..char_order: n-grams in the hypothesis, in the reference, and matched (clipped).
struct ChrfStats {
  std::vector<int64_t> hyp, ref, match;
  void add(const ChrfStats& o);
};

// With several references, the statistics of the reference with the best sentence chrF.
ChrfStats chrf_segment_stats(std::string_view hyp, std::span<const std::string> refs,
                             const ChrfOptions& opt = {});
double chrf_from_stats(const ChrfStats& stats, const ChrfOptions& opt = {});  // 0..100
double corpus_chrf(std::span<const std::string> hyps, std::span<const std::string> refs,
                   const ChrfOptions& opt = {});
double corpus_chrf(std::span<const std::string> hyps,
                   const std::vector<std::vector<std::string>>& ref_streams,
                   const ChrfOptions& opt = {});

// ---- edit distance, error rates, accuracy -------------------------------------------------

// Levenshtein distance between two sequences (unit costs), O(|a|·|b|) time, O(|b|) memory.
template <typename T>
int64_t edit_distance(std::span<const T> a, std::span<const T> b) {
  std::vector<int64_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = static_cast<int64_t>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    int64_t diag = row[0];  // row[i-1][j-1]
    row[0] = static_cast<int64_t>(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      const int64_t up = row[j];  // row[i-1][j]
      const int64_t sub = diag + (a[i - 1] == b[j - 1] ? 0 : 1);
      row[j] = std::min({sub, up + 1, row[j - 1] + 1});
      diag = up;
    }
  }
  return row[b.size()];
}

// Code points of UTF-8 text. A metric must not stop an evaluation, so an invalid byte becomes
// U+FFFD (as Python's errors="replace" would) instead of an Error.
std::vector<char32_t> characters(std::string_view text);
// Split on Unicode whitespace, as Python's str.split().
std::vector<std::string_view> split_whitespace(std::string_view text);

// Corpus error rates. The token error rate is Σ edits / Σ reference tokens (0 when every
// reference is empty and every hypothesis is too; edits against an empty reference count,
// so the rate can exceed 1); the sequence error rate is the fraction of segments whose tokens
// differ at all.
struct ErrorRate {
  int64_t edits = 0, ref_tokens = 0, sequences = 0, wrong_sequences = 0;
  template <typename T>
  void add(std::span<const T> hyp, std::span<const T> ref) {
    add_edits(edit_distance(hyp, ref), static_cast<int64_t>(ref.size()));
  }
  // Against the closest of several references (fewest edits, the first on a tie); none is an
  // Error.
  template <typename T>
  void add_closest(std::span<const T> hyp, const std::vector<std::vector<T>>& refs) {
    if (refs.empty()) throw_no_references();
    int64_t best = -1, best_len = 0;
    for (const std::vector<T>& r : refs) {
      const int64_t d = edit_distance(hyp, std::span<const T>(r));
      if (best < 0 || d < best) best = d, best_len = static_cast<int64_t>(r.size());
    }
    add_edits(best, best_len);
  }
  void add_edits(int64_t d, int64_t ref_len) {
    edits += d;
    ref_tokens += ref_len;
    sequences += 1;
    wrong_sequences += d > 0 ? 1 : 0;
  }
  [[noreturn]] static void throw_no_references();
  double token_error_rate() const;     // 0..∞ (a fraction, not a percentage)
  double sequence_error_rate() const;  // 0..1
};

// Teacher-forced token accuracy: positions where predicted == label, over the labels that
// are not `ignore_id` (the padding). Sizes must match.
struct TokenAccuracy {
  int64_t correct = 0, counted = 0;
  void add(std::span<const int32_t> predicted, std::span<const int32_t> labels, int32_t ignore_id);
  double value() const { return counted ? static_cast<double>(correct) / counted : 0.0; }
};

// ---- TER ----------------------------------------------------------------------------------

// sacreBLEU's TercomTokenizer with TER's defaults: the text lower-cased (Python's str.lower()
// for Latin-1, Latin Extended-A, Greek and Cyrillic capitals, without Python's final-sigma rule;
// other scripts are left as they are), nothing else.
// The words are then the whitespace-separated parts.
std::string ter_tokenize(std::string_view text);

// Translation edit rate of one hypothesis against one reference, as lib_ter's
// translation_edit_rate: greedy shifts of up to 10 words by up to 50 positions while one
// lowers the edit distance (at most 1000 candidate shifts in all), each shift one edit, then
// the beam (25 around the length-scaled diagonal) Levenshtein distance. Returns the edits;
// against an empty reference, the hypothesis' length.
int64_t translation_edits(const std::vector<std::string>& hyp, const std::vector<std::string>& ref);

// Sufficient statistics of sacreBLEU's TER: the fewest edits over a segment's references and
// their mean length (in words), summed over segments.
struct TerStats {
  double edits = 0, ref_len = 0;
  void add(const TerStats& o) { edits += o.edits, ref_len += o.ref_len; }
};
TerStats ter_segment_stats(std::string_view hyp, std::span<const std::string> refs);
// 100 · edits / ref_len on sacreBLEU's scale (100 when ref_len is 0, as sacreBLEU).
double ter_from_stats(const TerStats& stats);
double corpus_ter(std::span<const std::string> hyps,
                  const std::vector<std::vector<std::string>>& ref_streams);

// ---- everything at once -------------------------------------------------------------------

// Which units the error rate counts when only text is given.
enum class ErrorUnit { kCharacters, kWords };

// One segment is one source, however many references it has.
struct EvalSummary {
  int64_t segments = 0;
  double bleu = 0, chrf = 0, ter = 0;  // 0..100, as sacreBLEU prints them
  double exact = 0;  // fraction of hypotheses equal to one of their references, 0..1
  double wer = 0;    // 1 - exact: sources whose hypothesis equals none of its references
  double per = 0;    // edit rate over space-separated symbols, closest reference (fraction)
  double cer = 0;    // edit rate in the unit given (characters by default), closest reference
  double ser = 0;    // sources whose tokens in that unit differ from the closest reference's
};

// Accumulates every metric over a corpus, one hypothesis and its references at a time, so a
// trainer or `eval` can feed decoded batches as they come. CER counts characters or
// whitespace-separated words of the text, or (add_tokens) the model's own token ids.
class CorpusMetrics {
 public:
  explicit CorpusMetrics(ErrorUnit unit = ErrorUnit::kCharacters, BleuOptions bleu = {},
                         ChrfOptions chrf = {});
  void add(std::string_view hyp, std::string_view ref);
  // One source with several references (at least one: none is an Error).
  void add(std::string_view hyp, std::span<const std::string> refs);
  // One reference, with CER and SER over token ids instead of characters or words.
  void add_tokens(std::string_view hyp, std::string_view ref, std::span<const int32_t> hyp_ids,
                  std::span<const int32_t> ref_ids);
  EvalSummary summary() const;

 private:
  void add_text(std::string_view hyp, std::span<const std::string> refs);
  ErrorUnit unit_;
  BleuOptions bleu_opt_;
  ChrfOptions chrf_opt_;
  BleuStats bleu_;
  ChrfStats chrf_;
  TerStats ter_;
  ErrorRate errors_, phonemes_;
  int64_t segments_ = 0, exact_ = 0;
};

// The copy-the-source baseline: every hypothesis is its source. A translation system that does
// not beat it has learnt nothing beyond copying (names, numbers, cognates).
EvalSummary copy_baseline(std::span<const std::string> sources,
                          std::span<const std::string> references,
                          ErrorUnit unit = ErrorUnit::kCharacters);
// references[i]: every reference of source i.
EvalSummary copy_baseline(std::span<const std::string> sources,
                          const std::vector<std::vector<std::string>>& references,
                          ErrorUnit unit = ErrorUnit::kCharacters);

}  // namespace seqtape::metrics
