#include "eval/metrics.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <tuple>
#include <unordered_map>

#include "tensor/tensor.h"   // seqtape::fail
#include "text/tokenizer.h"  // utf8_decode_one

namespace seqtape::metrics {

// ---- text helpers -------------------------------------------------------------------------

namespace {

// Python's str.isspace() set, which str.split() splits on.
bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

// The code point at byte `pos` and its length in bytes; an invalid byte is one U+FFFD.
std::pair<char32_t, size_t> char_at(std::string_view s, size_t pos) {
  const Utf8Char c = utf8_decode_one(s, pos);
  if (c.err != Utf8Error::kNone) return {U'\uFFFD', 1};
  return {c.cp, c.len};
}

std::string replace_all(std::string s, std::string_view from, std::string_view to) {
  for (size_t pos = s.find(from); pos != std::string::npos; pos = s.find(from, pos + to.size()))
    s.replace(pos, from.size(), to);
  return s;
}

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

// One pass of a two-character regular expression substitution, with re.sub's semantics:
// the leftmost match wins, matches do not overlap, scanning resumes after a match. Working
// on bytes gives the same result as on code points here, because every pattern position is
// either an ASCII class or [^0-9], which matches each byte of a multi-byte character as it
// matches the character.
template <typename Match, typename Emit>
std::string sub_pairs(const std::string& s, Match match, Emit emit) {
  std::string out;
  out.reserve(s.size() + s.size() / 4);
  size_t i = 0;
  while (i < s.size()) {
    if (i + 1 < s.size() && match(s[i], s[i + 1])) {
      emit(out, s[i], s[i + 1]);
      i += 2;
    } else {
      out += s[i++];
    }
  }
  return out;
}

// The first rule of sacreBLEU's TokenizerRegexp: ASCII punctuation and symbols except
// ' , - . get spaces around them ([\{-\~\[-\` -\&\(-\+\:-\@\/]).
bool is_13a_symbol(char c) {
  const auto u = static_cast<unsigned char>(c);
  return (u >= 0x7B && u <= 0x7E) || (u >= 0x5B && u <= 0x60) || (u >= 0x20 && u <= 0x26) ||
         (u >= 0x28 && u <= 0x2B) || (u >= 0x3A && u <= 0x40) || u == 0x2F;
}

std::string join_words(std::string_view text) {
  std::string out;
  for (std::string_view w : split_whitespace(text)) {
    if (!out.empty()) out += ' ';
    out += w;
  }
  return out;
}

// Python's str.rstrip(): trailing whitespace removed.
std::string_view rstrip(std::string_view s) {
  size_t end = 0;
  for (size_t pos = 0; pos < s.size();) {
    const auto [cp, len] = char_at(s, pos);
    pos += len;
    if (!is_space(cp)) end = pos;
  }
  return s.substr(0, end);
}

}  // namespace

std::vector<char32_t> characters(std::string_view text) {
  std::vector<char32_t> out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const auto [cp, len] = char_at(text, pos);
    out.push_back(cp);
    pos += len;
  }
  return out;
}

std::vector<std::string_view> split_whitespace(std::string_view text) {
  std::vector<std::string_view> words;
  size_t start = std::string_view::npos;
  for (size_t pos = 0; pos < text.size();) {
    const auto [cp, len] = char_at(text, pos);
    if (is_space(cp)) {
      if (start != std::string_view::npos) words.push_back(text.substr(start, pos - start));
      start = std::string_view::npos;
    } else if (start == std::string_view::npos) {
      start = pos;
    }
    pos += len;
  }
  if (start != std::string_view::npos) words.push_back(text.substr(start));
  return words;
}

// ---- BLEU ---------------------------------------------------------------------------------

std::string tokenize_13a(std::string_view line) {
  std::string s(line);
  s = replace_all(std::move(s), "<skipped>", "");
  s = replace_all(std::move(s), "-\n", "");
  s = replace_all(std::move(s), "\n", " ");
  if (s.find('&') != std::string::npos) {
    s = replace_all(std::move(s), "&quot;", "\"");
    s = replace_all(std::move(s), "&amp;", "&");
    s = replace_all(std::move(s), "&lt;", "<");
    s = replace_all(std::move(s), "&gt;", ">");
  }
  std::string spaced = " ";
  for (char c : s) {
    if (is_13a_symbol(c)) {
      spaced += ' ';
      spaced += c;
      spaced += ' ';
    } else {
      spaced += c;
    }
  }
  spaced += ' ';
  const auto is_dot = [](char c) { return c == '.' || c == ','; };
  // period and comma unless preceded by a digit: ([^0-9])([\.,]) -> "\1 \2 "
  spaced = sub_pairs(
      spaced, [&](char a, char b) { return !is_digit(a) && is_dot(b); },
      [](std::string& o, char a, char b) {
        o.append({a, ' ', b, ' '});
      });
  // period and comma unless followed by a digit: ([\.,])([^0-9]) -> " \1 \2"
  spaced = sub_pairs(
      spaced, [&](char a, char b) { return is_dot(a) && !is_digit(b); },
      [](std::string& o, char a, char b) {
        o.append({' ', a, ' ', b});
      });
  // dash preceded by a digit: ([0-9])(-) -> "\1 \2 "
  spaced = sub_pairs(
      spaced, [](char a, char b) { return is_digit(a) && b == '-'; },
      [](std::string& o, char a, char b) {
        o.append({a, ' ', b, ' '});
      });
  return join_words(spaced);
}

void BleuStats::add(const BleuStats& o) {
  sys_len += o.sys_len;
  ref_len += o.ref_len;
  if (correct.size() < o.correct.size()) correct.resize(o.correct.size());
  if (total.size() < o.total.size()) total.resize(o.total.size());
  for (size_t i = 0; i < o.correct.size(); ++i) correct[i] += o.correct[i];
  for (size_t i = 0; i < o.total.size(); ++i) total[i] += o.total[i];
}

namespace {

// n-grams (1..max_order) of whitespace-separated tokens, keyed by the tokens joined with ' '
// and by order (a key of n tokens has n-1 spaces, so keys of different orders never collide).
using NgramCounts = std::unordered_map<std::string, int64_t>;

NgramCounts word_ngrams(const std::vector<std::string_view>& tokens, int max_order) {
  NgramCounts counts;
  for (int n = 1; n <= max_order; ++n) {
    for (size_t i = 0; i + n <= tokens.size(); ++i) {
      std::string key(tokens[i]);
      for (int k = 1; k < n; ++k) (key += ' ') += tokens[i + k];
      ++counts[key];
    }
  }
  return counts;
}

int order_of(const std::string& key) {
  return 1 + static_cast<int>(std::count(key.begin(), key.end(), ' '));
}

// sacreBLEU's TokenizerChar: " ".join(line); the whitespace characters vanish in the split.
std::string space_characters(std::string_view text) {
  std::string out;
  for (size_t pos = 0; pos < text.size();) {
    const auto [cp, len] = char_at(text, pos);
    if (!out.empty()) out += ' ';
    out.append(text.substr(pos, len));
    pos += len;
  }
  return out;
}

std::string bleu_preprocess(std::string_view text, BleuTokenize tok) {
  const std::string_view stripped = rstrip(text);
  switch (tok) {
    case BleuTokenize::k13a:
      return tokenize_13a(stripped);
    case BleuTokenize::kChar:
      return space_characters(stripped);
    case BleuTokenize::kNone:
      break;
  }
  return std::string(stripped);
}

int64_t closest_ref_len(int64_t hyp_len, const std::vector<int64_t>& ref_lens) {
  int64_t best_diff = -1, best = -1;
  for (int64_t len : ref_lens) {
    const int64_t diff = std::llabs(hyp_len - len);
    if (best_diff < 0 || diff < best_diff || (diff == best_diff && len < best)) {
      best_diff = diff;
      best = len;
    }
  }
  return best;
}

// sacreBLEU's my_log: log(0) is a large negative number, so a zero precision gives BLEU 0.
double bleu_log(double x) {
  return x == 0.0 ? -9999999999.0 : std::log(x);
}

}  // namespace

BleuStats bleu_segment_stats(std::string_view hyp, std::span<const std::string> refs,
                             const BleuOptions& opt) {
  if (refs.empty()) fail("bleu", "a segment needs at least one reference");
  const int max_order = opt.max_order;
  NgramCounts ref_max;
  std::vector<int64_t> ref_lens;
  for (const std::string& ref : refs) {
    const std::string tokenized = bleu_preprocess(ref, opt.tokenize);
    const auto tokens = split_whitespace(tokenized);
    ref_lens.push_back(static_cast<int64_t>(tokens.size()));
    for (const auto& [key, count] : word_ngrams(tokens, max_order)) {
      int64_t& m = ref_max[key];
      m = std::max(m, count);
    }
  }
  const std::string hyp_tok = bleu_preprocess(hyp, opt.tokenize);
  const auto hyp_tokens = split_whitespace(hyp_tok);
  BleuStats st;
  st.sys_len = static_cast<int64_t>(hyp_tokens.size());
  st.ref_len = closest_ref_len(st.sys_len, ref_lens);
  st.correct.assign(max_order, 0);
  st.total.assign(max_order, 0);
  for (const auto& [key, count] : word_ngrams(hyp_tokens, max_order)) {
    const int n = order_of(key) - 1;
    st.total[n] += count;
    const auto it = ref_max.find(key);
    if (it != ref_max.end()) st.correct[n] += std::min(count, it->second);
  }
  return st;
}

BleuScore bleu_from_stats(const BleuStats& stats, const BleuOptions& opt) {
  const int max_order = opt.max_order;
  BleuScore s;
  s.sys_len = stats.sys_len;
  s.ref_len = stats.ref_len;
  s.precisions.assign(max_order, 0.0);
  if (s.sys_len < s.ref_len)
    s.bp = s.sys_len > 0 ? std::exp(1.0 - static_cast<double>(s.ref_len) / s.sys_len) : 0.0;
  else
    s.bp = 1.0;
  std::vector<double> correct(max_order, 0.0), total(max_order, 0.0);
  bool any_correct = false;
  for (int n = 0; n < max_order; ++n) {
    correct[n] = n < static_cast<int>(stats.correct.size()) ? stats.correct[n] : 0;
    total[n] = n < static_cast<int>(stats.total.size()) ? stats.total[n] : 0;
    any_correct = any_correct || correct[n] != 0;
  }
  if (!any_correct) return s;  // sacreBLEU #141: no match at all is BLEU 0 under any smoothing

  const double value = opt.smooth_value.value_or(opt.smooth == BleuSmooth::kAddK ? 1.0 : 0.1);
  double smooth_exp = 1.0;
  int eff_order = max_order;
  for (int n = 0; n < max_order; ++n) {
    if (opt.smooth == BleuSmooth::kAddK && n > 0) {
      correct[n] += value;
      total[n] += value;
    }
    if (total[n] == 0) break;
    if (opt.effective_order) eff_order = n + 1;
    if (correct[n] == 0) {
      // NIST's geometric smoothing: the k-th zero precision counts as 1 / (2^k · total).
      if (opt.smooth == BleuSmooth::kExp) {
        smooth_exp *= 2;
        s.precisions[n] = 100.0 / (smooth_exp * total[n]);
      } else if (opt.smooth == BleuSmooth::kFloor) {
        s.precisions[n] = 100.0 * value / total[n];
      }
    } else {
      s.precisions[n] = 100.0 * correct[n] / total[n];
    }
  }
  double log_sum = 0;
  for (int n = 0; n < eff_order; ++n) log_sum += bleu_log(s.precisions[n]);
  s.score = s.bp * std::exp(log_sum / eff_order);
  return s;
}

namespace {

void check_sizes(size_t hyps, const std::vector<std::vector<std::string>>& streams,
                 const char* metric) {
  if (streams.empty()) fail(metric, "no reference stream");
  for (size_t k = 0; k < streams.size(); ++k)
    if (streams[k].size() != hyps)
      fail(metric, std::to_string(hyps) + " hypotheses but reference stream " + std::to_string(k) +
                       " has " + std::to_string(streams[k].size()) + " segments");
}

std::vector<std::string> refs_of(const std::vector<std::vector<std::string>>& streams, size_t i) {
  std::vector<std::string> refs;
  refs.reserve(streams.size());
  for (const auto& s : streams) refs.push_back(s[i]);
  return refs;
}

}  // namespace

BleuScore corpus_bleu(std::span<const std::string> hyps,
                      const std::vector<std::vector<std::string>>& ref_streams,
                      const BleuOptions& opt) {
  check_sizes(hyps.size(), ref_streams, "bleu");
  BleuStats total;
  total.correct.assign(opt.max_order, 0);
  total.total.assign(opt.max_order, 0);
  for (size_t i = 0; i < hyps.size(); ++i)
    total.add(bleu_segment_stats(hyps[i], refs_of(ref_streams, i), opt));
  return bleu_from_stats(total, opt);
}

BleuScore corpus_bleu(std::span<const std::string> hyps, std::span<const std::string> refs,
                      const BleuOptions& opt) {
  const std::vector<std::vector<std::string>> streams{
      std::vector<std::string>(refs.begin(), refs.end())};
  return corpus_bleu(hyps, streams, opt);
}

// ---- chrF ---------------------------------------------------------------------------------

void ChrfStats::add(const ChrfStats& o) {
  const size_t n = std::max(hyp.size(), o.hyp.size());
  hyp.resize(n);
  ref.resize(n);
  match.resize(n);
  for (size_t i = 0; i < o.hyp.size(); ++i) {
    hyp[i] += o.hyp[i];
    ref[i] += o.ref[i];
    match[i] += o.match[i];
  }
}

namespace {

using CharNgrams = std::vector<std::unordered_map<std::u32string_view, int64_t>>;

// Character n-grams of orders 1..max_order over `chars` (views into it: keep it alive).
CharNgrams char_ngrams(const std::u32string& chars, int max_order) {
  CharNgrams out(max_order);
  const std::u32string_view v(chars);
  for (int n = 1; n <= max_order; ++n)
    for (size_t i = 0; i + n <= v.size(); ++i) ++out[n - 1][v.substr(i, n)];
  return out;
}

std::u32string chrf_chars(std::string_view text, bool keep_whitespace) {
  std::u32string out;
  for (char32_t c : characters(text))
    if (keep_whitespace || !is_space(c)) out += c;
  return out;
}

}  // namespace

ChrfStats chrf_segment_stats(std::string_view hyp, std::span<const std::string> refs,
                             const ChrfOptions& opt) {
  if (refs.empty()) fail("chrf", "a segment needs at least one reference");
  const std::u32string hyp_chars = chrf_chars(hyp, opt.whitespace);
  const CharNgrams hyp_ngrams = char_ngrams(hyp_chars, opt.char_order);
  ChrfStats best;
  double best_f = -1.0;
  for (const std::string& ref : refs) {
    const std::u32string ref_chars = chrf_chars(ref, opt.whitespace);
    const CharNgrams ref_ngrams = char_ngrams(ref_chars, opt.char_order);
    ChrfStats st;
    st.hyp.assign(opt.char_order, 0);
    st.ref.assign(opt.char_order, 0);
    st.match.assign(opt.char_order, 0);
    for (int n = 0; n < opt.char_order; ++n) {
      int64_t hyp_count = 0, match = 0, ref_count = 0;
      for (const auto& [g, c] : hyp_ngrams[n]) {
        hyp_count += c;
        const auto it = ref_ngrams[n].find(g);
        if (it != ref_ngrams[n].end()) match += std::min(c, it->second);
      }
      for (const auto& [g, c] : ref_ngrams[n]) ref_count += c;
      // sacreBLEU counts no hypothesis n-grams of an order the reference does not have.
      st.hyp[n] = ref_ngrams[n].empty() ? 0 : hyp_count;
      st.ref[n] = ref_count;
      st.match[n] = match;
    }
    const double f = chrf_from_stats(st, opt);
    if (f > best_f) {
      best_f = f;
      best = std::move(st);
    }
  }
  return best;
}

double chrf_from_stats(const ChrfStats& stats, const ChrfOptions& opt) {
  const double eps = 1e-16;
  const double factor = opt.beta * opt.beta;
  double eps_score = 0, avg_prec = 0, avg_rec = 0;
  int effective_order = 0;
  const int order = opt.char_order;
  for (int n = 0; n < order; ++n) {
    const int64_t h = n < static_cast<int>(stats.hyp.size()) ? stats.hyp[n] : 0;
    const int64_t r = n < static_cast<int>(stats.ref.size()) ? stats.ref[n] : 0;
    const int64_t m = n < static_cast<int>(stats.match.size()) ? stats.match[n] : 0;
    const double prec = h > 0 ? static_cast<double>(m) / h : eps;
    const double rec = r > 0 ? static_cast<double>(m) / r : eps;
    const double denom = factor * prec + rec;
    eps_score += denom > 0 ? (1 + factor) * prec * rec / denom : eps;
    if (h > 0 && r > 0) {
      avg_prec += prec;
      avg_rec += rec;
      ++effective_order;
    }
  }
  if (opt.eps_smoothing) return 100 * eps_score / order;
  if (effective_order == 0) return 0.0;
  avg_prec /= effective_order;
  avg_rec /= effective_order;
  if (avg_prec + avg_rec == 0) return 0.0;
  return 100 * (1 + factor) * avg_prec * avg_rec / (factor * avg_prec + avg_rec);
}

double corpus_chrf(std::span<const std::string> hyps,
                   const std::vector<std::vector<std::string>>& ref_streams,
                   const ChrfOptions& opt) {
  check_sizes(hyps.size(), ref_streams, "chrf");
  ChrfStats total;
  for (size_t i = 0; i < hyps.size(); ++i)
    total.add(chrf_segment_stats(hyps[i], refs_of(ref_streams, i), opt));
  return chrf_from_stats(total, opt);
}

double corpus_chrf(std::span<const std::string> hyps, std::span<const std::string> refs,
                   const ChrfOptions& opt) {
  const std::vector<std::vector<std::string>> streams{
      std::vector<std::string>(refs.begin(), refs.end())};
  return corpus_chrf(hyps, streams, opt);
}

// ---- error rates, accuracy ----------------------------------------------------------------

double ErrorRate::token_error_rate() const {
  if (ref_tokens == 0) return edits == 0 ? 0.0 : static_cast<double>(edits);
  return static_cast<double>(edits) / static_cast<double>(ref_tokens);
}

void ErrorRate::throw_no_references() {
  fail("metrics", "a hypothesis with no reference to score it against");
}

double ErrorRate::sequence_error_rate() const {
  return sequences ? static_cast<double>(wrong_sequences) / static_cast<double>(sequences) : 0.0;
}

void TokenAccuracy::add(std::span<const int32_t> predicted, std::span<const int32_t> labels,
                        int32_t ignore_id) {
  if (predicted.size() != labels.size())
    fail("token_accuracy", std::to_string(predicted.size()) + " predictions for " +
                               std::to_string(labels.size()) + " labels");
  for (size_t i = 0; i < labels.size(); ++i) {
    if (labels[i] == ignore_id) continue;
    ++counted;
    correct += predicted[i] == labels[i] ? 1 : 0;
  }
}

// ---- TER ----------------------------------------------------------------------------------

namespace {

// Python's str.lower() on the letters of Latin-1, Latin Extended-A, Greek and Cyrillic.
char32_t lower_char(char32_t c) {
  if ((c >= U'A' && c <= U'Z') || (c >= 0xC0 && c <= 0xDE && c != 0xD7)) return c + 0x20;
  if (c >= 0x100 && c <= 0x17F) {
    if (c == 0x130 || c == 0x138 || c == 0x149 || c == 0x17F) return c;  // no one-letter lower
    if (c == 0x178) return 0xFF;
    const bool odd_upper = (c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E);
    return (c % 2 == 1) == odd_upper ? c + 1 : c;
  }
  if ((c >= 0x391 && c <= 0x3A9 && c != 0x3A2) || (c >= 0x410 && c <= 0x42F)) return c + 0x20;
  if (c >= 0x400 && c <= 0x40F) return c + 0x50;
  if (c == 0x386) return 0x3AC;
  if (c >= 0x388 && c <= 0x38A) return c + 0x25;
  if (c == 0x38C) return 0x3CC;
  if (c == 0x38E || c == 0x38F) return c + 0x3F;
  return c;
}

// Each distinct word as a small integer, so that the many edit distances compare ints.
using Ids = std::vector<int32_t>;
std::pair<Ids, Ids> intern(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  std::unordered_map<std::string_view, int32_t> id;
  auto map = [&](const std::vector<std::string>& words) {
    Ids out;
    for (const std::string& w : words)
      out.push_back(id.try_emplace(w, static_cast<int32_t>(id.size())).first->second);
    return out;
  };
  Ids x = map(a);
  return {std::move(x), map(b)};
}

constexpr int64_t kTerInf = int64_t{1} << 50;
constexpr int kMaxShiftSize = 10, kMaxShiftDist = 50, kBeamWidth = 25, kMaxShiftCandidates = 1000;

// lib_ter's BeamEditDistance (without its cache, which saves time and changes nothing):
// hypothesis rows i, reference columns j, only a band around the diagonal scaled by the length
// ratio is filled. The trace rewrites the hypothesis into the reference: ' ' keep, 's'
// substitute, 'i' take a reference word, 'd' drop a hypothesis word. Preference on equal cost
// as lib_ter: keep/substitute, then 'd', then 'i'.
// Only the band of each row is stored (a row of a long sentence pair is mostly outside it):
// a cell outside is infinite, as lib_ter's unfilled cells are.
struct BandRow {
  struct Cell {
    int64_t cost;
    char op;
  };
  size_t lo = 0;
  std::vector<Cell> cells;
  Cell at(size_t j) const {
    return j >= lo && j - lo < cells.size() ? cells[j - lo] : Cell{kTerInf, 'x'};
  }
};

std::pair<int64_t, std::string> beam_edit_distance(const Ids& h, const Ids& r) {
  using Cell = BandRow::Cell;
  const size_t n = h.size(), m = r.size();
  std::vector<BandRow> dist(n + 1);
  for (size_t j = 0; j <= m; ++j) dist[0].cells.push_back({static_cast<int64_t>(j), 'i'});
  const double ratio = n ? static_cast<double>(m) / static_cast<double>(n) : 1.0;
  const int64_t beam =
      kBeamWidth < ratio / 2 ? static_cast<int64_t>(std::ceil(ratio / 2 + kBeamWidth)) : kBeamWidth;
  for (size_t i = 1; i <= n; ++i) {
    const auto diag = static_cast<int64_t>(std::floor(static_cast<double>(i) * ratio));
    const auto lo = static_cast<size_t>(std::max<int64_t>(0, diag - beam));
    size_t hi = static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(m) + 1, diag + beam));
    if (i == n) hi = m + 1;
    BandRow& row = dist[i];
    const BandRow& up = dist[i - 1];
    row.lo = lo;
    row.cells.assign(hi > lo ? hi - lo : 0, Cell{kTerInf, 'x'});
    for (size_t j = lo; j < hi; ++j) {
      Cell& cell = row.cells[j - lo];
      if (j == 0) {
        cell = {up.at(0).cost + 1, 'd'};
        continue;
      }
      const bool same = h[i - 1] == r[j - 1];
      const Cell ops[3] = {{up.at(j - 1).cost + (same ? 0 : 1), same ? ' ' : 's'},
                           {up.at(j).cost + 1, 'd'},
                           {row.at(j - 1).cost + 1, 'i'}};
      for (const Cell& c : ops)
        if (cell.cost > c.cost) cell = c;
    }
  }
  std::string trace;
  for (size_t i = n, j = m; i > 0 || j > 0;) {
    const char op = dist[i].at(j).op;
    trace += op;
    if (op == ' ' || op == 's')
      --i, --j;
    else if (op == 'i')
      --j;
    else if (op == 'd')
      --i;
    else
      fail("ter", "edit distance trace left the beam");  // lib_ter raises here too
  }
  std::reverse(trace.begin(), trace.end());
  return {dist[n].at(m).cost, trace};
}

// Python's words[a:b] with its clamping.
void append_slice(Ids& out, const Ids& w, size_t a, size_t b) {
  a = std::min(a, w.size()), b = std::min(b, w.size());
  if (a < b)
    out.insert(out.end(), w.begin() + static_cast<std::ptrdiff_t>(a),
               w.begin() + static_cast<std::ptrdiff_t>(b));
}

// lib_ter's _perform_shift: words[start, start+len) moved before position `target`.
Ids perform_shift(const Ids& w, size_t start, size_t len, size_t target) {
  Ids out;
  if (target < start) {
    append_slice(out, w, 0, target), append_slice(out, w, start, start + len);
    append_slice(out, w, target, start), append_slice(out, w, start + len, w.size());
  } else if (target > start + len) {
    append_slice(out, w, 0, start), append_slice(out, w, start + len, target);
    append_slice(out, w, start, start + len), append_slice(out, w, target, w.size());
  } else {
    append_slice(out, w, 0, start), append_slice(out, w, start + len, len + target);
    append_slice(out, w, start, start + len), append_slice(out, w, len + target, w.size());
  }
  return out;
}

// The alignment of lib_ter's trace_to_alignment, from the trace flipped to rewrite the
// reference into the hypothesis: align[ref position] = hypothesis position, and which
// positions on each side are errors.
struct Alignment {
  std::vector<int64_t> align;
  std::vector<int> ref_err, hyp_err;
};
Alignment align_trace(const std::string& inv_trace) {
  Alignment a;
  int64_t pos_hyp = -1;
  for (const char op : inv_trace) {
    // Flipped: the original 'd' (drop a hypothesis word) is an insertion here, and 'i' a deletion.
    if (op == ' ' || op == 's') {
      a.align.push_back(++pos_hyp);
      a.hyp_err.push_back(op == 's'), a.ref_err.push_back(op == 's');
    } else if (op == 'd') {
      ++pos_hyp;
      a.hyp_err.push_back(1);
    } else {
      a.align.push_back(pos_hyp);
      a.ref_err.push_back(1);
    }
  }
  return a;
}

struct ShiftResult {
  int64_t delta = 0;
  Ids words;
};

bool any_error(const std::vector<int>& err, size_t start, size_t len) {
  return std::any_of(err.begin() + static_cast<std::ptrdiff_t>(start),
                     err.begin() + static_cast<std::ptrdiff_t>(start + len),
                     [](int e) { return e != 0; });
}

// lib_ter's _shift: of the candidate shifts of a matching run of words, the one that lowers the
// edit distance most; ties to the longer run, then the earlier start, then the earlier target.
ShiftResult best_shift(const Ids& h, const Ids& r, int64_t& checked) {
  const auto [pre_score, inv_trace] = beam_edit_distance(h, r);
  const Alignment al = align_trace(inv_trace);
  bool found = false;
  int64_t best_delta = 0, best_len = 0, best_start = 0, best_idx = 0;
  Ids best_words;
  for (size_t sh = 0; sh < h.size() && checked < kMaxShiftCandidates; ++sh) {
    for (size_t sr = 0; sr < r.size() && checked < kMaxShiftCandidates; ++sr) {
      if (std::abs(static_cast<int64_t>(sr) - static_cast<int64_t>(sh)) > kMaxShiftDist) continue;
      for (size_t len = 1; len <= kMaxShiftSize && h[sh + len - 1] == r[sr + len - 1]; ++len) {
        const bool last = sh + len == h.size() || sr + len == r.size();
        const auto at = al.align[sr];
        if (any_error(al.hyp_err, sh, len) && any_error(al.ref_err, sr, len) &&
            !(static_cast<int64_t>(sh) <= at && at < static_cast<int64_t>(sh + len))) {
          int64_t prev_idx = -1;
          for (int64_t off = -1; off < static_cast<int64_t>(len); ++off) {
            const int64_t rpos = static_cast<int64_t>(sr) + off;
            if (rpos >= static_cast<int64_t>(r.size())) break;
            const int64_t idx = rpos == -1 ? 0 : al.align[static_cast<size_t>(rpos)] + 1;
            if (idx == prev_idx) continue;
            prev_idx = idx;
            Ids shifted = perform_shift(h, sh, len, static_cast<size_t>(idx));
            const int64_t delta = pre_score - beam_edit_distance(shifted, r).first;
            ++checked;
            const auto key =
                std::make_tuple(delta, static_cast<int64_t>(len), -static_cast<int64_t>(sh), -idx);
            if (!found || key > std::make_tuple(best_delta, best_len, -best_start, -best_idx)) {
              found = true;
              best_delta = delta, best_len = static_cast<int64_t>(len);
              best_start = static_cast<int64_t>(sh), best_idx = idx;
              best_words = std::move(shifted);
            }
          }
        }
        if (last || checked >= kMaxShiftCandidates) break;
      }
    }
  }
  if (!found) return {0, h};
  return {best_delta, std::move(best_words)};
}

}  // namespace

std::string ter_tokenize(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const auto [cp, len] = char_at(text, pos);
    const char32_t low = lower_char(cp);
    if (low == cp)
      out.append(text.substr(pos, len));  // an invalid byte stays as it was
    else
      out += utf8_encode(low);
    pos += len;
  }
  return out;
}

int64_t translation_edits(const std::vector<std::string>& hyp_words,
                          const std::vector<std::string>& ref_words) {
  if (ref_words.empty()) return static_cast<int64_t>(hyp_words.size());
  auto [h, r] = intern(hyp_words, ref_words);
  int64_t shifts = 0, checked = 0;
  for (;;) {
    ShiftResult s = best_shift(h, r, checked);
    // As lib_ter: past the candidate limit even an improving shift is not taken.
    if (checked >= kMaxShiftCandidates || s.delta <= 0) break;
    ++shifts;
    h = std::move(s.words);
  }
  return shifts + beam_edit_distance(h, r).first;
}

TerStats ter_segment_stats(std::string_view hyp, std::span<const std::string> refs) {
  if (refs.empty()) ErrorRate::throw_no_references();
  auto words = [](std::string_view text) {
    const std::string low = ter_tokenize(text);
    std::vector<std::string> out;
    for (std::string_view w : split_whitespace(low)) out.emplace_back(w);
    return out;
  };
  const std::vector<std::string> h = words(hyp);
  TerStats st;
  double best = -1, lengths = 0;
  for (const std::string& ref : refs) {
    const std::vector<std::string> r = words(ref);
    const auto e = static_cast<double>(translation_edits(h, r));
    if (best < 0 || e < best) best = e;
    lengths += static_cast<double>(r.size());
  }
  st.edits = best;
  st.ref_len = lengths / static_cast<double>(refs.size());
  return st;
}

double ter_from_stats(const TerStats& stats) {
  return stats.ref_len > 0 ? 100.0 * stats.edits / stats.ref_len : 100.0;
}

double corpus_ter(std::span<const std::string> hyps,
                  const std::vector<std::vector<std::string>>& ref_streams) {
  check_sizes(hyps.size(), ref_streams, "corpus_ter");
  TerStats total;
  for (size_t i = 0; i < hyps.size(); ++i)
    total.add(ter_segment_stats(hyps[i], refs_of(ref_streams, i)));
  return ter_from_stats(total);
}

// ---- CorpusMetrics ------------------------------------------------------------------------

CorpusMetrics::CorpusMetrics(ErrorUnit unit, BleuOptions bleu, ChrfOptions chrf)
    : unit_(unit), bleu_opt_(std::move(bleu)), chrf_opt_(chrf) {
  bleu_.correct.assign(bleu_opt_.max_order, 0);
  bleu_.total.assign(bleu_opt_.max_order, 0);
}

void CorpusMetrics::add_text(std::string_view hyp, std::span<const std::string> refs) {
  if (refs.empty()) ErrorRate::throw_no_references();
  bleu_.add(bleu_segment_stats(hyp, refs, bleu_opt_));
  chrf_.add(chrf_segment_stats(hyp, refs, chrf_opt_));
  ter_.add(ter_segment_stats(hyp, refs));
  std::vector<std::vector<std::string_view>> symbols;
  for (const std::string& r : refs) symbols.push_back(split_whitespace(r));
  const std::vector<std::string_view> h = split_whitespace(hyp);
  phonemes_.add_closest(std::span<const std::string_view>(h), symbols);
  ++segments_;
  exact_ += std::find(refs.begin(), refs.end(), hyp) != refs.end() ? 1 : 0;
}

void CorpusMetrics::add(std::string_view hyp, std::string_view ref) {
  const std::string ref_s(ref);
  add(hyp, std::span<const std::string>(&ref_s, 1));
}

void CorpusMetrics::add(std::string_view hyp, std::span<const std::string> refs) {
  add_text(hyp, refs);
  if (unit_ == ErrorUnit::kCharacters) {
    std::vector<std::vector<char32_t>> r;
    for (const std::string& ref : refs) r.push_back(characters(ref));
    const std::vector<char32_t> h = characters(hyp);
    errors_.add_closest(std::span<const char32_t>(h), r);
  } else {
    std::vector<std::vector<std::string_view>> r;
    for (const std::string& ref : refs) r.push_back(split_whitespace(ref));
    const std::vector<std::string_view> h = split_whitespace(hyp);
    errors_.add_closest(std::span<const std::string_view>(h), r);
  }
}

void CorpusMetrics::add_tokens(std::string_view hyp, std::string_view ref,
                               std::span<const int32_t> hyp_ids, std::span<const int32_t> ref_ids) {
  const std::string ref_s(ref);
  add_text(hyp, std::span<const std::string>(&ref_s, 1));
  errors_.add(hyp_ids, ref_ids);
}

EvalSummary CorpusMetrics::summary() const {
  EvalSummary s;
  s.segments = segments_;
  s.bleu = bleu_from_stats(bleu_, bleu_opt_).score;
  s.chrf = chrf_from_stats(chrf_, chrf_opt_);
  s.ter = ter_from_stats(ter_);
  s.exact = segments_ ? static_cast<double>(exact_) / static_cast<double>(segments_) : 0.0;
  s.wer = segments_ ? 1.0 - s.exact : 0.0;
  s.per = phonemes_.token_error_rate();
  s.cer = errors_.token_error_rate();
  s.ser = errors_.sequence_error_rate();
  return s;
}

EvalSummary copy_baseline(std::span<const std::string> sources,
                          std::span<const std::string> references, ErrorUnit unit) {
  if (sources.size() != references.size())
    fail("copy_baseline", std::to_string(sources.size()) + " sources but " +
                              std::to_string(references.size()) + " references");
  CorpusMetrics m(unit);
  for (size_t i = 0; i < sources.size(); ++i) m.add(sources[i], references[i]);
  return m.summary();
}

EvalSummary copy_baseline(std::span<const std::string> sources,
                          const std::vector<std::vector<std::string>>& references, ErrorUnit unit) {
  if (sources.size() != references.size())
    fail("copy_baseline", std::to_string(sources.size()) + " sources but " +
                              std::to_string(references.size()) + " reference sets");
  CorpusMetrics m(unit);
  for (size_t i = 0; i < sources.size(); ++i) m.add(sources[i], references[i]);
  return m.summary();
}

}  // namespace seqtape::metrics
