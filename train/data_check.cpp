#include "train/data_check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <span>
#include <utility>

#include "tensor/tensor.h"  // fail

namespace seqtape {

TooLong parse_too_long(std::string_view name) {
  if (name == "error") return TooLong::kError;
  if (name == "skip") return TooLong::kSkip;
  if (name == "truncate") return TooLong::kTruncate;
  fail("--too-long", "'" + std::string(name) + "' is not error, skip or truncate");
}

const char* too_long_name(TooLong t) {
  switch (t) {
    case TooLong::kError:
      return "error";
    case TooLong::kSkip:
      return "skip";
    case TooLong::kTruncate:
      return "truncate";
  }
  return "?";
}

namespace {

constexpr size_t kFirstFew = 5;

size_t prompt_tokens(const LmExample& e) {  // source tokens: the positions without a label
  size_t k = 0;
  while (k < e.labels.size() && e.labels[k] == kIgnoreIndex) ++k;
  return k;
}

// Cuts an encoder-decoder example to max_positions P (see check_lengths).
void truncate(Example& e, size_t P) {
  if (e.enc.size() > P) {
    const int32_t eos = e.enc.back();
    e.enc.resize(P - 1);
    e.enc.push_back(eos);
  }
  if (e.dec_in.size() > P) {
    const int32_t eos = e.labels.back();
    e.dec_in.resize(P);
    e.labels.resize(P - 1);
    e.labels.push_back(eos);
  }
}

// Cuts a decoder-only example to P positions; false when no labelled position would remain.
bool truncate(LmExample& e, size_t P) {
  e.tokens.resize(std::min(e.tokens.size(), P));
  e.labels.resize(std::min(e.labels.size(), P));
  return std::any_of(e.labels.begin(), e.labels.end(), [](int32_t l) { return l != kIgnoreIndex; });
}

template <class Ex>
void erase_flagged(std::vector<Ex>& v, const std::vector<uint8_t>& drop) {
  size_t w = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (drop[i]) continue;
    if (w != i) v[w] = std::move(v[i]);  // never self-move: that empties a vector
    ++w;
  }
  v.resize(w);
}

}  // namespace

LengthCheck check_lengths(EncodedPairs& data, std::vector<TextPair>& pairs, int64_t max_positions,
                          TooLong policy, std::string_view name) {
  if (data.size() != pairs.size())
    fail(std::string(name), "internal: " + std::to_string(data.size()) + " encoded examples for " +
                                std::to_string(pairs.size()) + " pairs");
  const auto P = static_cast<size_t>(max_positions);
  LengthCheck r;
  std::vector<uint8_t> drop(pairs.size(), 0);
  for (size_t i = 0; i < pairs.size(); ++i) {
    std::string what;
    if (data.decoder_only) {
      const LmExample& e = data.lm[i];
      if (e.tokens.size() <= P) continue;
      what = "sequence " + std::to_string(e.tokens.size()) + " positions";
    } else {
      const Example& e = data.enc_dec[i];
      if (e.enc.size() <= P && e.dec_in.size() <= P) continue;
      what = "encoder input " + std::to_string(e.enc.size()) + " positions, decoder input " +
             std::to_string(e.dec_in.size());
    }
    ++r.too_long;
    if (r.first.size() < kFirstFew)
      r.first.push_back(std::string(name) + ":" + std::to_string(pairs[i].line) + " (" + what +
                        ")");
    if (policy == TooLong::kSkip) {
      drop[i] = 1;
    } else if (policy == TooLong::kTruncate) {
      if (data.decoder_only) {
        if (truncate(data.lm[i], P))
          ++r.truncated;
        else
          drop[i] = 1;
      } else {
        truncate(data.enc_dec[i], P);
        ++r.truncated;
      }
    }
  }
  if (r.too_long > 0 && policy == TooLong::kError) {
    std::string msg =
        std::to_string(r.too_long) + " example" + (r.too_long == 1 ? " is" : "s are") +
        " longer than the model's max_positions " + std::to_string(max_positions) + ": ";
    for (size_t k = 0; k < r.first.size(); ++k) msg += (k ? "; " : "") + r.first[k];
    if (r.too_long > static_cast<int64_t>(r.first.size())) msg += "; ...";
    msg += " (--too-long skip or truncate, or a larger max_positions)";
    fail(std::string(name), msg);
  }
  for (uint8_t d : drop) r.skipped += d;
  if (r.skipped > 0) {
    erase_flagged(pairs, drop);
    if (data.decoder_only)
      erase_flagged(data.lm, drop);
    else
      erase_flagged(data.enc_dec, drop);
  }
  return r;
}

int64_t percentile(const std::vector<int64_t>& sorted, double q) {
  if (sorted.empty()) return 0;
  const auto n = static_cast<double>(sorted.size());
  const auto rank = static_cast<size_t>(std::ceil(q / 100.0 * n));  // nearest rank, 1-based
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}

namespace {

void add_side(SideStats& s, std::vector<int64_t>& lengths, std::span<const int32_t> ids,
              std::optional<int32_t> unk) {
  lengths.push_back(static_cast<int64_t>(ids.size()));
  s.tokens += static_cast<int64_t>(ids.size());
  if (unk) s.unk += std::count(ids.begin(), ids.end(), *unk);
}

void finish_side(SideStats& s, std::vector<int64_t>& lengths) {
  std::sort(lengths.begin(), lengths.end());
  s.examples = static_cast<int64_t>(lengths.size());
  s.p50 = percentile(lengths, 50);
  s.p90 = percentile(lengths, 90);
  s.p99 = percentile(lengths, 99);
  s.max = lengths.empty() ? 0 : lengths.back();
}

}  // namespace

DataSummary summarize(const EncodedPairs& data, std::optional<int32_t> unk_id) {
  DataSummary s;
  std::vector<int64_t> src_len, tgt_len;
  for (size_t i = 0; i < data.size(); ++i) {
    std::span<const int32_t> src, tgt;
    if (data.decoder_only) {
      const LmExample& e = data.lm[i];
      const size_t k = prompt_tokens(e);
      src = std::span<const int32_t>(e.tokens).first(k);
      tgt = std::span<const int32_t>(e.labels).subspan(k, e.labels.size() - k - 1);  // no <eos>
    } else {
      const Example& e = data.enc_dec[i];
      src = std::span<const int32_t>(e.enc).first(e.enc.size() - 1);        // no <eos>
      tgt = std::span<const int32_t>(e.labels).first(e.labels.size() - 1);  // no <eos>
    }
    add_side(s.source, src_len, src, unk_id);
    add_side(s.target, tgt_len, tgt, unk_id);
  }
  finish_side(s.source, src_len);
  finish_side(s.target, tgt_len);
  return s;
}

std::string format_summary(const DataSummary& s, std::string_view label) {
  std::string out;
  char buf[256];
  for (const auto& [side, st] : {std::pair<const char*, const SideStats&>{"source", s.source},
                                 std::pair<const char*, const SideStats&>{"target", s.target}}) {
    std::snprintf(buf, sizeof buf,
                  "%.*s %s: %lld examples, %lld tokens, length p50 %lld p90 %lld p99 %lld max "
                  "%lld, <unk> %.2f%%\n",
                  static_cast<int>(label.size()), label.data(), side,
                  static_cast<long long>(st.examples), static_cast<long long>(st.tokens),
                  static_cast<long long>(st.p50), static_cast<long long>(st.p90),
                  static_cast<long long>(st.p99), static_cast<long long>(st.max),
                  100.0 * st.unk_rate());
    out += buf;
  }
  for (const auto& [side, st] : {std::pair<const char*, const SideStats&>{"source", s.source},
                                 std::pair<const char*, const SideStats&>{"target", s.target}}) {
    if (st.unk_rate() > kHighUnkRate) {
      std::snprintf(buf, sizeof buf,
                    "warning: %.2f%% of the %.*s %s tokens are <unk> (%lld of %lld): the "
                    "vocabulary misses characters of this data\n",
                    100.0 * st.unk_rate(), static_cast<int>(label.size()), label.data(), side,
                    static_cast<long long>(st.unk), static_cast<long long>(st.tokens));
      out += buf;
    }
  }
  return out;
}

}  // namespace seqtape
