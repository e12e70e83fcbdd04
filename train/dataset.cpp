#include "train/dataset.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>
#include <string>
#include <type_traits>
#include <unordered_map>

#include "io/envelope.h"

namespace seqtape {

// ---- text ---------------------------------------------------------------------------------

std::vector<TextPair> parse_tsv(std::string_view text, const std::string& name) {
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);
  std::vector<TextPair> out;
  size_t pos = 0;
  int64_t line = 0;
  while (pos < text.size()) {
    ++line;
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view l = text.substr(pos, end - pos);
    pos = end + 1;
    if (l.ends_with('\r')) l.remove_suffix(1);
    if (l.find_first_not_of(' ') == std::string_view::npos) continue;  // blank
    const std::string at = name + ":" + std::to_string(line);
    Utf8Error err;
    const size_t bad = utf8_find_invalid(l, &err);
    if (bad != std::string_view::npos)
      fail(at, "invalid UTF-8 at byte " + std::to_string(bad + 1) + " of the line (" +
                   utf8_error_name(err) + ")");
    if (l.find('\r') != std::string_view::npos) fail(at, "stray carriage return inside the line");
    const size_t tab = l.find('\t');
    if (tab == std::string_view::npos) fail(at, "no tab: each line must be source<TAB>target");
    if (l.find('\t', tab + 1) != std::string_view::npos)
      fail(at, "more than one tab: each line must be source<TAB>target");
    TextPair p{std::string(l.substr(0, tab)), std::string(l.substr(tab + 1)), line};
    if (p.source.empty()) fail(at, "empty source (nothing before the tab)");
    if (p.target.empty()) fail(at, "empty target (nothing after the tab)");
    out.push_back(std::move(p));
  }
  if (out.empty()) fail(name, "no examples (the file has no source<TAB>target line)");
  return out;
}

std::vector<TextPair> read_tsv(const std::string& path) {
  return parse_tsv(read_user_file(path, "TSV file", kMaxTsvBytes), path);
}

void write_tsv(const std::string& path, const std::vector<TextPair>& pairs) {
  for (size_t i = 0; i < pairs.size(); ++i) {
    for (const std::string* f : {&pairs[i].source, &pairs[i].target}) {
      if (f->empty() || f->find_first_of("\t\r\n") != std::string::npos)
        fail(path, "pair #" + std::to_string(i + 1) +
                       " has an empty field or one with a tab or line break: '" + *f + "'");
    }
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail(path, "cannot open file for writing");
  // read_tsv drops one leading byte-order mark; a first source that starts with U+FEFF itself
  // keeps it only if the file carries a mark of its own in front.
  if (!pairs.empty() && pairs[0].source.starts_with("\xEF\xBB\xBF")) out << "\xEF\xBB\xBF";
  for (const TextPair& p : pairs) out << p.source << '\t' << p.target << '\n';
  out.flush();
  if (!out) fail(path, "error while writing file");
}

Vocab build_vocab(const std::vector<TextPair>& pairs) {
  std::vector<std::string> texts;
  texts.reserve(2 * pairs.size());
  for (const TextPair& p : pairs) {
    texts.push_back(p.source);
    texts.push_back(p.target);
  }
  return Vocab::build(texts);
}

std::vector<SourceGroup> group_sources(const std::vector<TextPair>& pairs, std::string_view name,
                                       bool strict) {
  std::vector<SourceGroup> groups;
  std::unordered_map<std::string_view, size_t> first_line;  // source -> its group's first pair
  for (size_t i = 0; i < pairs.size(); ++i) {
    if (!groups.empty() && pairs[groups.back().first].source == pairs[i].source) {
      ++groups.back().count;
      continue;
    }
    if (strict) {
      const auto [it, fresh] = first_line.try_emplace(pairs[i].source, i);
      if (!fresh)
        fail(std::string(name) + ":" + std::to_string(pairs[i].line),
             "the source '" + pairs[i].source + "' comes back here after other sources (first at " +
                 "line " + std::to_string(pairs[it->second].line) +
                 "): lines with the same source are one source's references and must be "
                 "consecutive");
    }
    groups.push_back({i, 1});
  }
  return groups;
}

std::vector<std::string> references_of(const std::vector<TextPair>& pairs, const SourceGroup& g) {
  std::vector<std::string> refs;
  for (size_t i = g.first; i < g.first + g.count; ++i) refs.push_back(pairs[i].target);
  return refs;
}

TextSplit split_validation_count(const std::vector<TextPair>& pairs, size_t n_valid,
                                 uint64_t seed) {
  if (n_valid >= pairs.size())
    fail("split_validation", "holding out " + std::to_string(n_valid) + " of " +
                                 std::to_string(pairs.size()) + " pairs leaves no training data");
  std::vector<uint32_t> order(pairs.size());
  std::iota(order.begin(), order.end(), 0u);
  Rng rng(seed);
  shuffle_in_place(order, rng);
  std::vector<bool> held(pairs.size(), false);
  for (size_t i = 0; i < n_valid; ++i) held[order[i]] = true;
  TextSplit s;
  for (size_t i = 0; i < pairs.size(); ++i) (held[i] ? s.valid : s.train).push_back(pairs[i]);
  return s;
}

TextSplit split_validation_fraction(const std::vector<TextPair>& pairs, double fraction,
                                    uint64_t seed) {
  if (!(fraction >= 0.0 && fraction < 1.0))
    fail("split_validation", "fraction " + std::to_string(fraction) + " is not in [0, 1)");
  const auto n_valid =
      static_cast<size_t>(std::llround(fraction * static_cast<double>(pairs.size())));
  return split_validation_count(pairs, n_valid, seed);
}

// ---- encoded examples -----------------------------------------------------------------------

namespace {
std::string field_context(std::string_view context, const char* field) {
  return std::string(context) + " (" + field + ")";
}
std::string pair_context(std::string_view name, const TextPair& p) {
  return std::string(name) + ":" + std::to_string(p.line);
}
}  // namespace

namespace {

// A target through the target side's tokenizer (TextCodec::encode_target; one for both sides
// with the character Tokenizer).
template <class Tok>
std::vector<int32_t> encode_target(const Tok& tok, std::string_view text,
                                   const std::string& context) {
  if constexpr (std::is_base_of_v<TextCodec, Tok>)
    return tok.encode_target(text, context);
  else
    return tok.encode(text, context);
}

template <class Tok>
Example encode_example_t(const Tok& tok, const TextPair& pair, std::string_view context) {
  const Vocab& v = tok.vocab();
  const std::vector<int32_t> src = tok.encode(pair.source, field_context(context, "source"));
  const std::vector<int32_t> tgt =
      encode_target(tok, pair.target, field_context(context, "target"));
  Example e;
  e.enc = src;
  e.enc.push_back(v.eos_id());
  e.dec_in.push_back(v.bos_id());
  e.dec_in.insert(e.dec_in.end(), tgt.begin(), tgt.end());
  e.labels = tgt;
  e.labels.push_back(v.eos_id());
  return e;
}

template <class Tok>
LmExample encode_lm_example_t(const Tok& tok, const TextPair& pair, std::string_view context) {
  const Vocab& v = tok.vocab();
  const int32_t sep = v.sep_id();
  const std::vector<int32_t> src = tok.encode(pair.source, field_context(context, "source"));
  const std::vector<int32_t> tgt =
      encode_target(tok, pair.target, field_context(context, "target"));
  LmExample e;
  e.tokens = src;
  e.tokens.push_back(sep);
  e.tokens.insert(e.tokens.end(), tgt.begin(), tgt.end());
  // Positions 0..|src|-1 predict src[1..] and <sep>: prompt, no loss.
  e.labels.assign(src.size(), kIgnoreIndex);
  e.labels.insert(e.labels.end(), tgt.begin(), tgt.end());
  e.labels.push_back(v.eos_id());
  return e;
}

template <class Tok>
std::vector<Example> encode_examples_t(const Tok& tok, const std::vector<TextPair>& pairs,
                                       std::string_view name) {
  std::vector<Example> out;
  out.reserve(pairs.size());
  for (const TextPair& p : pairs) out.push_back(encode_example_t(tok, p, pair_context(name, p)));
  return out;
}

template <class Tok>
std::vector<LmExample> encode_lm_examples_t(const Tok& tok, const std::vector<TextPair>& pairs,
                                            std::string_view name) {
  std::vector<LmExample> out;
  out.reserve(pairs.size());
  for (const TextPair& p : pairs) out.push_back(encode_lm_example_t(tok, p, pair_context(name, p)));
  return out;
}

template <class Tok>
EncodedPairs encode_pairs_t(Arch arch, const Tok& tok, const std::vector<TextPair>& pairs,
                            std::string_view name) {
  EncodedPairs e;
  e.decoder_only = arch == Arch::DecoderOnly;
  if (e.decoder_only)
    e.lm = encode_lm_examples_t(tok, pairs, name);
  else
    e.enc_dec = encode_examples_t(tok, pairs, name);
  return e;
}

}  // namespace

Example encode_example(const Tokenizer& tok, const TextPair& pair, std::string_view context) {
  return encode_example_t(tok, pair, context);
}
Example encode_example(const TextCodec& tok, const TextPair& pair, std::string_view context) {
  return encode_example_t(tok, pair, context);
}
LmExample encode_lm_example(const Tokenizer& tok, const TextPair& pair, std::string_view context) {
  return encode_lm_example_t(tok, pair, context);
}
LmExample encode_lm_example(const TextCodec& tok, const TextPair& pair, std::string_view context) {
  return encode_lm_example_t(tok, pair, context);
}
std::vector<Example> encode_examples(const Tokenizer& tok, const std::vector<TextPair>& pairs,
                                     std::string_view name) {
  return encode_examples_t(tok, pairs, name);
}
std::vector<Example> encode_examples(const TextCodec& tok, const std::vector<TextPair>& pairs,
                                     std::string_view name) {
  return encode_examples_t(tok, pairs, name);
}
std::vector<LmExample> encode_lm_examples(const Tokenizer& tok, const std::vector<TextPair>& pairs,
                                          std::string_view name) {
  return encode_lm_examples_t(tok, pairs, name);
}
std::vector<LmExample> encode_lm_examples(const TextCodec& tok, const std::vector<TextPair>& pairs,
                                          std::string_view name) {
  return encode_lm_examples_t(tok, pairs, name);
}
EncodedPairs encode_pairs(Arch arch, const TextCodec& tok, const std::vector<TextPair>& pairs,
                          std::string_view name) {
  return encode_pairs_t(arch, tok, pairs, name);
}

namespace {
// Where a decoder-only example's target starts: its first position with a label (the <sep>).
size_t lm_prompt_length(const LmExample& e) {
  size_t k = 0;
  while (k < e.labels.size() && e.labels[k] == kIgnoreIndex) ++k;
  return k + 1;
}
}  // namespace

std::vector<int32_t> EncodedPairs::prompt(size_t i) const {
  if (!decoder_only) return enc_dec.at(i).enc;
  const LmExample& e = lm.at(i);
  return {e.tokens.begin(), e.tokens.begin() + static_cast<int64_t>(lm_prompt_length(e))};
}

std::vector<int32_t> EncodedPairs::target(size_t i) const {
  // Both label rows end with the target and <eos>; a decoder-only row starts with the prompt.
  const std::vector<int32_t>& labels = decoder_only ? lm.at(i).labels : enc_dec.at(i).labels;
  const size_t start = decoder_only ? lm_prompt_length(lm.at(i)) - 1 : 0;
  return {labels.begin() + static_cast<int64_t>(start), labels.end() - 1};
}

// ---- batches ------------------------------------------------------------------------------

namespace {

template <typename E>
const E& example_at(const std::vector<E>& examples, uint32_t i) {
  if (i >= examples.size())
    fail("make_batch", "example index " + std::to_string(i) + " is outside [0, " +
                           std::to_string(examples.size()) + ")");
  return examples[i];
}

// Copies `row` into out[b*width ...] and pads the rest of the row with `pad`.
void put_row(std::vector<int32_t>& out, int64_t b, int64_t width, const std::vector<int32_t>& row,
             int32_t pad) {
  const auto base = out.begin() + b * width;
  std::copy(row.begin(), row.end(), base);
  std::fill(base + static_cast<int64_t>(row.size()), base + width, pad);
}

int64_t count_labels(const std::vector<int32_t>& labels) {
  return std::count_if(labels.begin(), labels.end(), [](int32_t l) { return l != kIgnoreIndex; });
}

}  // namespace

Batch make_batch(const std::vector<Example>& examples, std::span<const uint32_t> index,
                 int32_t pad_id) {
  if (index.empty()) fail("make_batch", "empty batch");
  Batch b;
  b.B = static_cast<int64_t>(index.size());
  b.index.assign(index.begin(), index.end());
  for (uint32_t i : index) {
    const Example& e = example_at(examples, i);
    if (e.dec_in.size() != e.labels.size())
      fail("make_batch", "example " + std::to_string(i) + " has " +
                             std::to_string(e.dec_in.size()) + " decoder inputs but " +
                             std::to_string(e.labels.size()) + " labels");
    b.S = std::max<int64_t>(b.S, static_cast<int64_t>(e.enc.size()));
    b.T = std::max<int64_t>(b.T, static_cast<int64_t>(e.dec_in.size()));
  }
  b.src.resize(b.B * b.S);     // [B*S]
  b.tgt_in.resize(b.B * b.T);  // [B*T]
  b.labels.resize(b.B * b.T);  // [B*T]
  for (int64_t r = 0; r < b.B; ++r) {
    const Example& e = examples[index[r]];
    put_row(b.src, r, b.S, e.enc, pad_id);
    put_row(b.tgt_in, r, b.T, e.dec_in, pad_id);
    put_row(b.labels, r, b.T, e.labels, kIgnoreIndex);
    b.src_len.push_back(static_cast<int32_t>(e.enc.size()));
    b.tgt_len.push_back(static_cast<int32_t>(e.dec_in.size()));
  }
  b.n_label_tokens = count_labels(b.labels);
  return b;
}

Batch make_lm_batch(const std::vector<LmExample>& examples, std::span<const uint32_t> index,
                    int32_t pad_id) {
  if (index.empty()) fail("make_lm_batch", "empty batch");
  Batch b;
  b.B = static_cast<int64_t>(index.size());
  b.index.assign(index.begin(), index.end());
  for (uint32_t i : index) {
    const LmExample& e = example_at(examples, i);
    if (e.tokens.size() != e.labels.size())
      fail("make_lm_batch", "example " + std::to_string(i) + " has " +
                                std::to_string(e.tokens.size()) + " tokens but " +
                                std::to_string(e.labels.size()) + " labels");
    b.T = std::max<int64_t>(b.T, static_cast<int64_t>(e.tokens.size()));
  }
  b.tokens.resize(b.B * b.T);  // [B*T]
  b.labels.resize(b.B * b.T);  // [B*T]
  for (int64_t r = 0; r < b.B; ++r) {
    const LmExample& e = examples[index[r]];
    put_row(b.tokens, r, b.T, e.tokens, pad_id);
    put_row(b.labels, r, b.T, e.labels, kIgnoreIndex);
    b.len.push_back(static_cast<int32_t>(e.tokens.size()));
  }
  b.n_label_tokens = count_labels(b.labels);
  return b;
}

namespace {
template <typename E, typename Make>
std::vector<Batch> in_order(const std::vector<E>& examples, int64_t batch_size, Make make) {
  if (batch_size <= 0) fail("batches_in_order", "batch_size " + std::to_string(batch_size));
  std::vector<uint32_t> idx(examples.size());
  std::iota(idx.begin(), idx.end(), 0u);
  std::vector<Batch> out;
  for (size_t i = 0; i < idx.size(); i += static_cast<size_t>(batch_size)) {
    const size_t n = std::min(static_cast<size_t>(batch_size), idx.size() - i);
    out.push_back(make(std::span<const uint32_t>(idx.data() + i, n)));
  }
  return out;
}
}  // namespace

Batch slice_rows(const Batch& b, int64_t begin, int64_t end) {
  if (begin < 0 || end < begin || end > b.B)
    fail("slice_rows", "rows [" + std::to_string(begin) + ", " + std::to_string(end) +
                           ") of a batch of " + std::to_string(b.B));
  Batch s;
  s.B = end - begin;
  s.S = b.S;
  s.T = b.T;
  // Row-major [B, width] fields keep their rows; [B] fields their entries; empty ones stay empty.
  auto rows = [&](const std::vector<int32_t>& v, int64_t width) {
    if (v.empty()) return std::vector<int32_t>{};
    return std::vector<int32_t>(v.begin() + begin * width, v.begin() + end * width);
  };
  s.src = rows(b.src, b.S);
  s.src_len = rows(b.src_len, 1);
  s.tgt_in = rows(b.tgt_in, b.T);
  s.tgt_len = rows(b.tgt_len, 1);
  s.tokens = rows(b.tokens, b.T);
  s.len = rows(b.len, 1);
  s.labels = rows(b.labels, b.T);
  s.n_label_tokens =
      std::count_if(s.labels.begin(), s.labels.end(), [](int32_t l) { return l != kIgnoreIndex; });
  if (!b.index.empty()) s.index.assign(b.index.begin() + begin, b.index.begin() + end);
  return s;
}

std::vector<Batch> batches_in_order(const std::vector<Example>& examples, int64_t batch_size,
                                    int32_t pad_id) {
  return in_order(examples, batch_size,
                  [&](std::span<const uint32_t> s) { return make_batch(examples, s, pad_id); });
}

std::vector<Batch> lm_batches_in_order(const std::vector<LmExample>& examples, int64_t batch_size,
                                       int32_t pad_id) {
  return in_order(examples, batch_size,
                  [&](std::span<const uint32_t> s) { return make_lm_batch(examples, s, pad_id); });
}

std::vector<Batch> batches_in_order(const EncodedPairs& data, int64_t batch_size, int32_t pad_id) {
  return data.decoder_only ? lm_batches_in_order(data.lm, batch_size, pad_id)
                           : batches_in_order(data.enc_dec, batch_size, pad_id);
}

// ---- loader -------------------------------------------------------------------------------

uint64_t uniform_below(Rng& rng, uint64_t n) {
  // Reject the lowest (2^64 mod n) values so every residue is equally likely.
  const uint64_t threshold = (0 - n) % n;
  for (;;) {
    const uint64_t r = rng.next_u64();
    if (r >= threshold) return r % n;
  }
}

void shuffle_in_place(std::vector<uint32_t>& v, Rng& rng) {
  for (size_t i = v.size(); i > 1; --i) {
    const auto j = static_cast<size_t>(uniform_below(rng, i));
    std::swap(v[i - 1], v[j]);
  }
}

DataLoader::DataLoader(std::vector<Example> examples, int32_t pad_id, LoaderOptions opt)
    : enc_dec_(std::move(examples)), pad_id_(pad_id), opt_(opt), rng_(opt.seed) {
  check_options();
  new_order();
}

DataLoader::DataLoader(std::vector<LmExample> examples, int32_t pad_id, LoaderOptions opt)
    : lm_(std::move(examples)), decoder_only_(true), pad_id_(pad_id), opt_(opt), rng_(opt.seed) {
  check_options();
  new_order();
}

DataLoader::DataLoader(EncodedPairs data, int32_t pad_id, LoaderOptions opt)
    : enc_dec_(std::move(data.enc_dec)),
      lm_(std::move(data.lm)),
      decoder_only_(data.decoder_only),
      pad_id_(pad_id),
      opt_(opt),
      rng_(opt.seed) {
  check_options();
  new_order();
}

void DataLoader::check_options() const {
  if (size() == 0) fail("DataLoader", "no examples");
  if (size() > UINT32_MAX) fail("DataLoader", "more than 2^32 examples");
  if (opt_.batch_size <= 0)
    fail("DataLoader", "batch_size must be positive, got " + std::to_string(opt_.batch_size));
  if (opt_.batch_tokens < 0)
    fail("DataLoader", "batch_tokens must be >= 0, got " + std::to_string(opt_.batch_tokens));
  if (opt_.batch_tokens > 0 && opt_.pool <= 0)
    fail("DataLoader", "pool must be positive, got " + std::to_string(opt_.pool));
}

int64_t DataLoader::cost(uint32_t i) const {
  if (decoder_only_) return static_cast<int64_t>(lm_[i].tokens.size());
  const Example& e = enc_dec_[i];
  return static_cast<int64_t>(std::max(e.enc.size(), e.dec_in.size()));
}

std::array<int64_t, 3> DataLoader::sort_key(uint32_t i) const {
  if (decoder_only_) return {cost(i), 0, 0};
  const Example& e = enc_dec_[i];
  return {cost(i), static_cast<int64_t>(e.enc.size()), static_cast<int64_t>(e.dec_in.size())};
}

void DataLoader::new_order() {
  order_.resize(size());
  std::iota(order_.begin(), order_.end(), 0u);
  if (opt_.shuffle) shuffle_in_place(order_, rng_);
  cursor_ = 0;
  next_bound_ = 0;
  bounds_.clear();
  if (opt_.batch_tokens <= 0) return;
  // Length-bucketed batches: sort inside each pool, cut by the token budget, shuffle batches.
  const auto pool = static_cast<size_t>(opt_.pool);
  std::vector<std::vector<uint32_t>> batches;
  for (size_t start = 0; start < order_.size(); start += pool) {
    const auto first = order_.begin() + static_cast<std::ptrdiff_t>(start);
    const auto last =
        order_.begin() + static_cast<std::ptrdiff_t>(std::min(start + pool, order_.size()));
    std::stable_sort(first, last,
                     [&](uint32_t a, uint32_t b) { return sort_key(a) < sort_key(b); });
    std::vector<uint32_t> cur;
    int64_t longest = 0;
    for (auto it = first; it != last; ++it) {
      const int64_t c = cost(*it);
      const int64_t m = std::max(longest, c);
      if (!cur.empty() && static_cast<int64_t>(cur.size() + 1) * m > opt_.batch_tokens) {
        batches.push_back(std::move(cur));
        cur.clear();
        longest = 0;
      }
      cur.push_back(*it);
      longest = std::max(longest, c);
    }
    if (!cur.empty()) batches.push_back(std::move(cur));
  }
  std::vector<uint32_t> perm(batches.size());
  std::iota(perm.begin(), perm.end(), 0u);
  if (opt_.shuffle) shuffle_in_place(perm, rng_);
  order_.clear();
  for (uint32_t b : perm) {
    order_.insert(order_.end(), batches[b].begin(), batches[b].end());
    bounds_.push_back(static_cast<uint32_t>(order_.size()));
  }
}

int64_t DataLoader::batches_per_epoch() const {
  if (opt_.batch_tokens > 0) return static_cast<int64_t>(bounds_.size());  // of this epoch
  const auto n = static_cast<int64_t>(size());
  return (n + opt_.batch_size - 1) / opt_.batch_size;
}

Batch DataLoader::next_batch() {
  if (cursor_ >= order_.size()) {
    ++epoch_;
    new_order();
  }
  size_t n = std::min(static_cast<size_t>(opt_.batch_size), order_.size() - cursor_);
  if (opt_.batch_tokens > 0) n = bounds_[next_bound_++] - cursor_;
  const std::span<const uint32_t> idx(order_.data() + cursor_, n);
  cursor_ += n;
  size_t s = 0, t = 0;
  for (uint32_t i : idx) {
    if (decoder_only_) {
      padding_.real += static_cast<int64_t>(lm_[i].tokens.size());
      s = std::max(s, lm_[i].tokens.size());
    } else {
      padding_.real += static_cast<int64_t>(enc_dec_[i].enc.size() + enc_dec_[i].dec_in.size());
      s = std::max(s, enc_dec_[i].enc.size());
      t = std::max(t, enc_dec_[i].dec_in.size());
    }
  }
  padding_.padded += static_cast<int64_t>(n * (s + t));
  return decoder_only_ ? make_lm_batch(lm_, idx, pad_id_) : make_batch(enc_dec_, idx, pad_id_);
}

LoaderState DataLoader::state() const {
  return {epoch_, cursor_, order_, rng_.state(), bounds_};
}

void DataLoader::set_state(const LoaderState& s) {
  const size_t n = size();
  if (s.order.size() != n)
    fail("DataLoader::set_state", "order has " + std::to_string(s.order.size()) +
                                      " entries but the loader has " + std::to_string(n) +
                                      " examples");
  std::vector<bool> seen(n, false);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t k = s.order[i];
    if (k >= n || seen[k])
      fail("DataLoader::set_state", "order is not a permutation of 0.." + std::to_string(n - 1) +
                                        " (entry " + std::to_string(i) + " = " + std::to_string(k) +
                                        ")");
    seen[k] = true;
  }
  if (s.cursor > n)
    fail("DataLoader::set_state",
         "cursor " + std::to_string(s.cursor) + " is past the " + std::to_string(n) + " examples");
  // Token-budget batches: the bounds must cut the order into non-empty batches, and the
  // cursor must sit on a batch boundary.
  size_t next_bound = 0;
  if (opt_.batch_tokens > 0) {
    uint32_t prev = 0;
    for (uint32_t b : s.bounds) {
      if (b <= prev || b > n)
        fail("DataLoader::set_state",
             "batch bounds are not increasing within 1.." + std::to_string(n));
      prev = b;
    }
    if (s.bounds.empty() || s.bounds.back() != n)
      fail("DataLoader::set_state",
           "batch bounds do not end at the " + std::to_string(n) + " examples");
    if (s.cursor > 0) {
      const auto it = std::find(s.bounds.begin(), s.bounds.end(), static_cast<uint32_t>(s.cursor));
      if (it == s.bounds.end())
        fail("DataLoader::set_state",
             "cursor " + std::to_string(s.cursor) + " is not at a batch boundary");
      next_bound = static_cast<size_t>(it - s.bounds.begin()) + 1;
    }
  } else if (!s.bounds.empty()) {
    fail("DataLoader::set_state",
         "the state has token-budget batch bounds, this loader batches by examples");
  }
  Rng rng;
  try {
    rng.set_state(s.rng_state);
  } catch (const std::exception&) {
    fail("DataLoader::set_state", "rng_state is not a saved generator state");
  }
  // Commit only after every check, so a rejected state leaves the loader as it was.
  rng_ = rng;
  epoch_ = s.epoch;
  cursor_ = s.cursor;
  order_ = s.order;
  bounds_ = s.bounds;
  next_bound_ = next_bound;
}

}  // namespace seqtape
