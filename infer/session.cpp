// DecodeSession: the encoder output, cross-attention K/V, the self-attention KV cache and the
// rows; the Transformer itself is infer/layers (prefill and one-token steps are the same code).
//
// Dimension key: B sources, S longest source, R rows, N tokens fed in one call, n rows in one
// call, C d_model, H heads, Dh = C / H, F d_ff, V vocabulary, L decoder layers, Tc capacity.
#include "infer/session.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <numeric>
#include <string>

#include "tensor/kernels.h"

namespace seqtape {

namespace {

// DecodeSession::split: a part per thread only for calls of this many FLOPs (a hand-off to a
// helper costs a few µs), with at least this many fed positions per part (the packed kernel
// takes 8 rows at once).
std::atomic<double> g_split_min_flops{4194304.0};  // 2^22
constexpr int64_t kSplitMinPositions = 8;
std::atomic<int64_t> g_split_calls{0};

// A float32 scratch buffer of at least n elements; reallocated only when it must grow.
float* grow(Tensor& t, int64_t n) {
  if (!t.defined() || t.numel() < n) t = Tensor::empty({std::max<int64_t>(n, 1)}, DType::F32);
  return t.data<float>();
}

}  // namespace

double decode_split_min_flops() {
  return g_split_min_flops.load();
}
double set_decode_split_min_flops(double flops) {
  return g_split_min_flops.exchange(flops);
}
int64_t decode_split_calls() {
  return g_split_calls.load();
}

DecodeSession::DecodeSession(const InferenceModel& model, CacheMode mode)
    : m_(model),
      mode_(mode),
      C_(model.config().d_model),
      H_(model.config().n_heads),
      Dh_(model.config().d_model / model.config().n_heads),
      F_(model.config().d_ff),
      V_(model.config().vocab_size),
      L_(model.config().n_decoder_layers),
      encoder_shape_(BlockShape::of(model.config(), model.matrix_layout())),
      decoder_shape_(BlockShape::of(model.config(), model.matrix_layout())) {
  // 2 FLOPs per weight. Per decoder layer: self-attention's 4 C×C matrices, cross-attention's
  // query and output, the FFN's two; then the output projection. Cross-attention's K and V are
  // projected once per source; per encoder layer 4 C×C and the FFN.
  const double CC = double(C_) * double(C_), CF = double(C_) * double(F_);
  const double per_layer = (m_.seq2seq() ? 6.0 : 4.0) * CC + 2.0 * CF;
  flops_per_position_ = 2.0 * (double(L_) * per_layer + double(C_) * double(V_));
  encoder_flops_ = 2.0 * double(model.config().n_encoder_layers) * (4.0 * CC + 2.0 * CF);
  cross_flops_ = 2.0 * double(L_) * 2.0 * CC;
}

void DecodeSession::check_begin(const std::vector<std::vector<int32_t>>& sources,
                                const std::vector<int32_t>& row_source, int64_t capacity) const {
  const ModelConfig& cfg = m_.config();
  if (row_source.empty()) fail("DecodeSession::begin", "no rows to decode");
  if (capacity < 1 || capacity > cfg.max_positions)
    fail("DecodeSession::begin", "capacity " + std::to_string(capacity) + " outside [1, " +
                                     std::to_string(cfg.max_positions) + "] (max_positions)");
  if (m_.seq2seq()) {
    if (sources.empty()) fail("DecodeSession::begin", "a seq2seq model needs source sequences");
  } else if (!sources.empty()) {
    fail("DecodeSession::begin", "a decoder-only model has no source; prefill the prompt instead");
  }
  const auto n_sources = static_cast<int32_t>(sources.size());
  for (size_t r = 0; r < row_source.size(); ++r)
    if (m_.seq2seq() && (row_source[r] < 0 || row_source[r] >= n_sources))
      fail("DecodeSession::begin", "row " + std::to_string(r) + " refers to source " +
                                       std::to_string(row_source[r]) + " of " +
                                       std::to_string(n_sources));
}

void DecodeSession::check_source(const std::vector<int32_t>& src, const std::string& what,
                                 const char* op) const {
  if (src.empty()) fail(op, what + " is empty");
  if (static_cast<int64_t>(src.size()) > m_.config().max_positions)
    fail(op, what + " has " + std::to_string(src.size()) + " tokens, more than max_positions " +
                 std::to_string(m_.config().max_positions));
  for (int32_t id : src)
    if (id < 0 || id >= V_)
      fail(op, what + " holds id " + std::to_string(id) + " outside the vocabulary [0, " +
                   std::to_string(V_) + ")");
}

// R rows of `capacity` positions (cache slots [0, R); the spare slots come with the first
// reorder that moves a row) and `sources` source slots of S positions.
void DecodeSession::allocate(int64_t rows, int64_t capacity, int64_t sources, int64_t S) {
  R_ = rows;
  cap_ = capacity;
  B_ = sources;
  S_ = S;
  len_.assign(size_t(R_), 0);
  slot_.resize(size_t(R_));
  std::iota(slot_.begin(), slot_.end(), 0);
  slot_used_.assign(size_t(2 * R_), 0);
  std::fill_n(slot_used_.begin(), R_, 1);
  all_rows_.resize(size_t(R_));
  std::iota(all_rows_.begin(), all_rows_.end(), 0);
  history_.assign(mode_ == CacheMode::Uncached ? size_t(R_) : 0, {});
  k_cache_.clear();
  v_cache_.clear();
  k_spare_.clear();
  v_spare_.clear();
  for (int64_t l = 0; l < L_; ++l) {
    k_cache_.push_back(Tensor::empty({R_, H_, cap_, Dh_}, DType::F32));  // [R, H, Tc, Dh]
    v_cache_.push_back(Tensor::empty({R_, H_, cap_, Dh_}, DType::F32));  // [R, H, Tc, Dh]
  }
  src_len_.assign(size_t(B_), 0);
  cross_k_.clear();
  cross_v_.clear();
  memory_ = B_ > 0 ? Tensor::empty({B_, S_, C_}, DType::F32) : Tensor();  // [B, S, C]
  for (int64_t l = 0; B_ > 0 && l < L_; ++l) {
    cross_k_.push_back(Tensor::empty({B_, H_, S_, Dh_}, DType::F32));  // [B, H, S, Dh]
    cross_v_.push_back(Tensor::empty({B_, H_, S_, Dh_}, DType::F32));  // [B, H, S, Dh]
  }
  // Decode steps need n = R rows of scratch, and scores for each part of a split call (one per
  // thread); grow once here, not inside the first step.
  const int64_t n = mode_ == CacheMode::Cached ? R_ : R_ * cap_;
  const int64_t parts = std::max(1, kernels::gemm_nt_rowwise_threads());
  scratch(n, parts * (mode_ == CacheMode::Cached ? std::max(cap_, S_) : cap_ * std::max(cap_, S_)));
  grow(sel_, n * C_);
  grow(logits_, R_ * V_);
  offsets_.reserve(size_t(R_ + 1));
  flat_.reserve(size_t(n));
  pos_.reserve(size_t(n));
  groups_.assign(size_t(parts), {});
  for (std::vector<AttentionGroup>& g : groups_) g.reserve(size_t(R_));
  cut_.reserve(groups_.size() + 1);
}

void DecodeSession::begin(const std::vector<std::vector<int32_t>>& sources,
                          std::vector<int32_t> row_source, int64_t capacity) {
  check_begin(sources, row_source, capacity);
  int64_t S = 0;
  for (size_t b = 0; b < sources.size(); ++b) {
    check_source(sources[b], "source " + std::to_string(b), "DecodeSession::begin");
    S = std::max<int64_t>(S, static_cast<int64_t>(sources[b].size()));
  }
  allocate(static_cast<int64_t>(row_source.size()), capacity,
           m_.seq2seq() ? static_cast<int64_t>(sources.size()) : 0, S);
  opened_ = false;
  row_source_ = std::move(row_source);
  row_used_.assign(size_t(R_), 1);
  free_rows_.clear();
  if (B_ == 0) return;
  std::vector<int64_t> slots(static_cast<size_t>(B_));
  std::iota(slots.begin(), slots.end(), 0);
  encode(sources, slots, mode_ == CacheMode::Cached);
}

void DecodeSession::open(int64_t max_rows, int64_t capacity) {
  const int64_t P = m_.config().max_positions;
  if (mode_ != CacheMode::Cached)
    fail("DecodeSession::open", "continuous batching needs the cached mode");
  if (max_rows < 1) fail("DecodeSession::open", "needs at least one row");
  if (capacity < 1 || capacity > P)
    fail("DecodeSession::open", "capacity " + std::to_string(capacity) + " outside [1, " +
                                    std::to_string(P) + "] (max_positions)");
  allocate(max_rows, capacity, m_.seq2seq() ? max_rows : 0, m_.seq2seq() ? P : 0);
  opened_ = true;
  row_source_.assign(size_t(R_), -1);
  row_used_.assign(size_t(R_), 0);
  free_rows_.resize(size_t(R_));
  std::iota(free_rows_.rbegin(), free_rows_.rend(), 0);  // highest first: pop_back is lowest
  src_rows_.assign(size_t(B_), 0);
}

std::vector<int32_t> DecodeSession::admit(const std::vector<int32_t>& source, int64_t n_rows) {
  return admit(std::vector<std::vector<int32_t>>{source}, {&n_rows, 1}).at(0);
}

std::vector<std::vector<int32_t>> DecodeSession::admit(
    const std::vector<std::vector<int32_t>>& sources, std::span<const int64_t> n_rows) {
  const char* op = "DecodeSession::admit";
  if (!opened_) fail(op, "the session was not opened (call open first)");
  if (sources.size() != n_rows.size())
    fail(op, std::to_string(sources.size()) + " sources but " + std::to_string(n_rows.size()) +
                 " row counts");
  int64_t asked = 0;
  for (int64_t n : n_rows) {
    if (n < 1) fail(op, "every input needs at least one row");
    asked += n;
  }
  if (asked > free_rows())
    fail(op, std::to_string(asked) + " rows asked, " + std::to_string(free_rows()) + " free");
  for (const std::vector<int32_t>& src : sources)
    if (m_.seq2seq())
      check_source(src, "source", op);
    else if (!src.empty())
      fail(op, "a decoder-only model has no source; prefill the prompt instead");
  if (sources.empty()) return {};
  std::vector<int64_t> slots(sources.size(), -1);
  for (size_t i = 0; i < sources.size() && m_.seq2seq(); ++i) {
    // A free row means a free source slot: every slot in use holds at least one row.
    slots[i] = std::find(src_rows_.begin(), src_rows_.end(), 0) - src_rows_.begin();
    src_rows_[size_t(slots[i])] = static_cast<int32_t>(n_rows[i]);
  }
  if (m_.seq2seq()) {
    encode(sources, slots, true);  // together: each source's rows as they would be alone
  }
  std::vector<std::vector<int32_t>> rows(sources.size());
  for (size_t i = 0; i < sources.size(); ++i)
    for (int64_t k = 0; k < n_rows[i]; ++k) {
      const int32_t r = free_rows_.back();
      free_rows_.pop_back();
      row_used_[size_t(r)] = 1;
      row_source_[size_t(r)] = static_cast<int32_t>(slots[i]);
      len_[size_t(r)] = 0;
      rows[i].push_back(r);
    }
  return rows;
}

void DecodeSession::release(std::span<const int32_t> rows) {
  if (!opened_) fail("DecodeSession::release", "the session was not opened (call open first)");
  for (int32_t r : rows) {
    check_row(r, "DecodeSession::release");
    const int32_t b = row_source_[size_t(r)];
    if (b >= 0 && --src_rows_[size_t(b)] == 0) src_len_[size_t(b)] = 0;
    row_used_[size_t(r)] = 0;
    row_source_[size_t(r)] = -1;
    len_[size_t(r)] = 0;
    free_rows_.push_back(r);
  }
  std::sort(free_rows_.begin(), free_rows_.end(), std::greater<>());
}

BlockScratch DecodeSession::scratch(int64_t N, int64_t scores) {
  BlockScratch s;
  s.in = grow(in_, N * C_);          // [N, C] normed sublayer input (pre)
  s.q = grow(q_, N * C_);            // [N, C]
  s.k = grow(k_, N * C_);            // [N, C]
  s.v = grow(v_, N * C_);            // [N, C]
  s.ctx = grow(ctx_, N * C_);        // [N, C]
  s.out = grow(out_, N * C_);        // [N, C] sublayer output
  s.hid = grow(hid_, N * F_);        // [N, F]
  s.scores = grow(scores_, scores);  // [Nq, Nk] scores of one group and head
  grow(x_, N * C_);                  // [N, C] residual stream
  return s;
}

// ---- encoder ------------------------------------------------------------------------------

// The encoder over several sources at once, concatenated without padding: source i's positions
// are rows [off_i, off_i + S_i) of the residual stream and attend to each other only. On the
// Decode layout the matrix products sum every row alone, so a source encodes to the same bits
// whichever sources share the call. Source i goes to memory_'s slot slots[i]; with `project`,
// its cross K/V too (every source in one matrix product per layer).
void DecodeSession::encode(const std::vector<std::vector<int32_t>>& sources,
                           std::span<const int64_t> slots, bool project) {
  std::vector<int64_t> off(sources.size() + 1, 0);
  int64_t longest = 0;
  for (size_t i = 0; i < sources.size(); ++i) {
    off[i + 1] = off[i] + static_cast<int64_t>(sources[i].size());
    longest = std::max<int64_t>(longest, static_cast<int64_t>(sources[i].size()));
  }
  const int64_t N = off.back();
  cut_parts(off.data(), sources.size(),
            split(N, sources.size(), encoder_flops_ + (project ? cross_flops_ : 0.0)));
  const auto parts = static_cast<int64_t>(cut_.size() - 1);
  const BlockScratch s = scratch(N, parts * longest * longest);
  std::vector<int32_t> ids;
  pos_.clear();
  for (const std::vector<int32_t>& src : sources) {
    ids.insert(ids.end(), src.begin(), src.end());
    for (size_t t = 0; t < src.size(); ++t) pos_.push_back(static_cast<int64_t>(t));
  }
  std::vector<AttentionGroup> groups(sources.size());
  // Part p: sources [cut_[p], cut_[p+1]) on their own rows of every scratch buffer.
  auto part = [&](int64_t p) {
    const size_t i0 = cut_[size_t(p)], i1 = cut_[size_t(p) + 1];
    const int64_t r0 = off[i0], n = off[i1] - r0;
    const BlockScratch ps = part_scratch(s, r0, p, longest * longest);
    float* px = x_.data<float>() + r0 * C_;  // [n, C] residual stream
    embed_tokens(m_, ids.data() + r0, pos_.data() + r0, n, px);
    const std::span<AttentionGroup> g(groups.data() + i0, i1 - i0);
    for (size_t i = i0; i < i1; ++i) {
      AttentionGroup& gi = groups[i];
      gi.first = off[i] - r0;
      gi.count = off[i + 1] - off[i];
      gi.k = ps.k + gi.first * C_;
      gi.v = ps.v + gi.first * C_;
      gi.head_stride = Dh_;
      gi.row_stride = C_;
      gi.n_keys = gi.count;
    }
    int64_t layer = 0;
    for (const LayerParams& P : m_.encoder_layers()) {
      for (size_t i = i0; i < i1; ++i)
        groups[i].event = {AttentionEvent::Kind::EncoderSelf, layer, -1,
                           static_cast<int32_t>(slots[i])};
      // An encoder layer has no cross-attention: every attention sublayer sees its own source.
      for (const SublayerParams& sub : P.sublayers)
        if (sub.kind == SublayerKind::FeedForward)
          feed_forward_block(encoder_shape_, sub.ffn, sub.norm, px, n, ps);
        else
          attention_block(encoder_shape_, sub.attn, sub.norm, px, n, true, g, ps, on_attention_);
      ++layer;
    }
    if (m_.encoder_final_norm().defined())
      layer_norm(px, m_.encoder_final_norm(), px, n, C_, encoder_shape_.eps);
    for (size_t i = i0; i < i1; ++i) {
      const int64_t b = slots[i], S = off[i + 1] - off[i];
      src_len_[size_t(b)] = static_cast<int32_t>(S);
      std::memcpy(memory_.data<float>() + b * S_ * C_, x_.data<float>() + off[i] * C_,
                  size_t(S * C_) * sizeof(float));  // [S, C] of slot b
    }
    if (project)
      project_cross(x_.data<float>(), std::span(off).subspan(i0, i1 - i0 + 1),
                    slots.subspan(i0, i1 - i0));
  };
  kernels::parallel_for(parts, part);  // (one part: on this thread)
}

// Every decoder layer's cross K/V of the sources whose encoder outputs are rows
// [off[i], off[i+1]) of mem, into source slots slots[i], through rows [off[0], off.back()) of the
// k_ and v_ scratch (grown beforehand when parts of a call run this at once).
void DecodeSession::project_cross(const float* mem, std::span<const int64_t> off,
                                  std::span<const int64_t> slots) {
  const int64_t r0 = off.front(), N = off.back() - r0;
  float* kx = grow(k_, off.back() * C_) + r0 * C_;  // [N, C]
  float* vx = grow(v_, off.back() * C_) + r0 * C_;  // [N, C]
  const size_t head_bytes = size_t(Dh_) * sizeof(float);
  for (size_t l = 0; l < size_t(L_); ++l) {
    const AttnParams& A = m_.decoder_layers()[l].sublayer(SublayerKind::CrossAttention).attn;
    project(mem + r0 * C_, N, C_, C_, A.wk, A.qwk, A.bk, kx, decoder_shape_.weights);
    project(mem + r0 * C_, N, C_, C_, A.wv, A.qwv, A.bv, vx, decoder_shape_.weights);
    for (size_t i = 0; i < slots.size(); ++i) {
      const int64_t b = slots[i];
      float* ck = cross_k_[l].data<float>() + b * H_ * S_ * Dh_;  // [H, S, Dh] of source b
      float* cv = cross_v_[l].data<float>() + b * H_ * S_ * Dh_;
      for (int64_t h = 0; h < H_; ++h)
        for (int64_t t = 0; t < off[i + 1] - off[i]; ++t) {
          const int64_t from = (off[i] - r0 + t) * C_ + h * Dh_;
          std::memcpy(ck + (h * S_ + t) * Dh_, kx + from, head_bytes);
          std::memcpy(cv + (h * S_ + t) * Dh_, vx + from, head_bytes);
        }
    }
  }
}

void DecodeSession::project_all_cross() {
  for (int64_t b = 0; b < B_; ++b)
    if (src_len_[size_t(b)] > 0) {
      const int64_t off[2] = {0, src_len_[size_t(b)]};
      project_cross(memory_.data<float>() + b * S_ * C_, off, {&b, 1});
    }
}

// ---- decoder ------------------------------------------------------------------------------

void DecodeSession::check_row(int32_t row, const char* op) const {
  if (row < 0 || row >= R_)
    fail(op, "row " + std::to_string(row) + " outside [0, " + std::to_string(R_) +
                 ") (call begin first)");
  if (!row_used_[size_t(row)]) fail(op, "row " + std::to_string(row) + " is not admitted");
}

void DecodeSession::check_feed(std::span<const int32_t> rows, const int32_t* off,
                               const int32_t* tok) const {
  for (size_t i = 0; i < rows.size(); ++i) {
    const int32_t r = rows[i];
    check_row(r, "DecodeSession::step");
    const int64_t cnt = off[i + 1] - off[i];
    if (cnt < 1) fail("DecodeSession::step", "row " + std::to_string(r) + " is fed no token");
    if (len_[size_t(r)] + cnt > cap_)
      fail("DecodeSession::step", "row " + std::to_string(r) + " would hold " +
                                      std::to_string(len_[size_t(r)] + cnt) +
                                      " positions, more than the capacity " + std::to_string(cap_));
  }
  for (int64_t j = 0; j < off[rows.size()]; ++j)
    if (tok[j] < 0 || tok[j] >= V_)
      fail("DecodeSession::step", "token id " + std::to_string(tok[j]) +
                                      " outside the vocabulary [0, " + std::to_string(V_) + ")");
}

// The attention groups of one decoder layer: row i's queries are rows [off[i], off[i+1]) of x,
// counted from off[0].
// Self-attention reads and extends the row's cache; cross-attention reads its source's K/V.
void DecodeSession::decoder_groups(std::span<const int32_t> rows, const int32_t* off, size_t l,
                                   bool cross, std::vector<AttentionGroup>& groups) {
  groups.resize(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    const int32_t r = rows[i];
    const int64_t start = len_[size_t(r)], b = row_source_[size_t(r)];
    AttentionGroup& g = groups[i];
    g.first = off[i] - off[0];
    g.count = off[i + 1] - off[i];
    g.row_stride = Dh_;
    if (cross) {  // K/V projected once per source, read by index
      g.k = cross_k_[l].data<float>() + b * H_ * S_ * Dh_;  // [H, S, Dh] of source b
      g.v = cross_v_[l].data<float>() + b * H_ * S_ * Dh_;
      g.head_stride = S_ * Dh_;
      g.n_keys = src_len_[size_t(b)];
      g.append = false;
    } else {
      g.k = k_slot(l, slot_[size_t(r)]);  // [H, Tc, Dh] of row r
      g.v = v_slot(l, slot_[size_t(r)]);
      g.head_stride = cap_ * Dh_;
      g.n_keys = start + g.count;
      g.append = true;
    }
    g.event = {cross ? AttentionEvent::Kind::Cross : AttentionEvent::Kind::Self,
               static_cast<int64_t>(l),
               r,
               static_cast<int32_t>(b),
               0,
               start};
  }
}

const float* DecodeSession::extend(std::span<const int32_t> rows, const int32_t* off,
                                   const int32_t* tok, bool all_positions) {
  check_feed(rows, off, tok);
  const size_t n = rows.size();
  const int64_t N = off[n];
  int64_t max_cnt = 0, max_keys = S_;
  pos_.resize(size_t(N));
  for (size_t i = 0; i < n; ++i) {
    const int64_t start = len_[size_t(rows[i])], cnt = off[i + 1] - off[i];
    max_cnt = std::max(max_cnt, cnt);
    max_keys = std::max(max_keys, start + cnt);
    for (int64_t j = 0; j < cnt; ++j) pos_[size_t(off[i] + j)] = start + j;
  }
  cut_parts(off, n, split(N, n, flops_per_position_));
  const auto parts = static_cast<int64_t>(cut_.size() - 1);
  const int64_t part_scores = max_cnt * max_keys;
  const BlockScratch s = scratch(N, parts * part_scores);
  if (!all_positions) grow(sel_, int64_t(n) * C_);
  grow(logits_, (all_positions ? N : int64_t(n)) * V_);
  if (groups_.size() < size_t(parts)) groups_.resize(size_t(parts));
  // Part p: rows [cut_[p], cut_[p+1]) on their own rows of every scratch buffer.
  auto part = [&](int64_t p) {
    const size_t i0 = cut_[size_t(p)], i1 = cut_[size_t(p) + 1];
    const BlockScratch ps = part_scratch(s, off[i0], p, part_scores);
    decode_rows(rows, i0, i1, off, tok, ps, groups_[size_t(p)], all_positions);
  };
  kernels::parallel_for(parts, part);  // (one part: on this thread)
  for (size_t i = 0; i < n; ++i) len_[size_t(rows[i])] += off[i + 1] - off[i];
  return logits_.data<float>();
}

// How many parts a call of N positions over n rows (or sources) runs in, at flops_per_position:
// one; or, for a call of at least g_split_min_flops when the products sum each row alone, one
// per thread, each of at least kSplitMinPositions positions. (More parts than threads, for the
// encoder's uneven sources to balance, made bench_decode's batch-32 encoding 3-10% slower.)
int64_t DecodeSession::split(int64_t N, size_t n, double flops_per_position) const {
  const int64_t parts = std::min<int64_t>(
      {kernels::gemm_nt_rowwise_threads(), N / kSplitMinPositions, static_cast<int64_t>(n)});
  const bool rowwise = decoder_shape_.weights != MatrixLayout::InOut &&
                       m_.out_weight_layout() != MatrixLayout::InOut;
  if (on_attention_ || !rowwise || parts < 2 ||
      double(N) * flops_per_position < g_split_min_flops.load(std::memory_order_relaxed))
    return 1;
  g_split_calls.fetch_add(1, std::memory_order_relaxed);
  return parts;
}

// Cuts rows [0, n), row i of positions [off[i], off[i+1]), into `parts` (into cut_: part p is
// rows [cut_[p], cut_[p+1])) where the positions so far come nearest an equal share: at a
// multiple of 8 rows when every row has one position (the rows the packed kernel takes at once).
template <typename I>
void DecodeSession::cut_parts(const I* off, size_t n, int64_t parts) {
  const auto N = static_cast<int64_t>(off[n]);
  cut_.assign(1, 0);
  for (int64_t p = 1; p < parts; ++p) {
    const int64_t share = N * p / parts;
    size_t i = cut_.back() + 1;
    if (N == static_cast<int64_t>(n)) {
      i = std::max(i, size_t((share + 4) / 8 * 8));
    } else {
      while (i < n && off[i] < share) ++i;
      if (i > cut_.back() + 1 && share - int64_t(off[i - 1]) < int64_t(off[i]) - share) --i;
    }
    if (i < n) cut_.push_back(i);
  }
  cut_.push_back(n);
}

// The scratch rows of a part whose first position is r0 (scores: the part's own).
BlockScratch DecodeSession::part_scratch(const BlockScratch& s, int64_t r0, int64_t part,
                                         int64_t part_scores) const {
  BlockScratch ps = s;
  for (float** b : {&ps.in, &ps.q, &ps.k, &ps.v, &ps.ctx, &ps.out}) *b += r0 * C_;
  ps.hid += r0 * F_;
  ps.scores += part * part_scores;
  return ps;
}

// The decoder over the positions rows[i0, i1) are fed (rows [off[i0], off[i1]) of x_, on their own
// rows of the scratch s) into their logits: the embedding, every layer, the final norm and the
// output projection; the logits of each row's last position (rows [i0, i1) of logits_) or of
// every position (rows [off[i0], off[i1])).
void DecodeSession::decode_rows(std::span<const int32_t> all_rows, size_t i0, size_t i1,
                                const int32_t* off, const int32_t* tok, const BlockScratch& s,
                                std::vector<AttentionGroup>& groups, bool all_positions) {
  const std::span<const int32_t> rows = all_rows.subspan(i0, i1 - i0);
  const int64_t r0 = off[i0], N = off[i1] - r0;
  float* x = x_.data<float>() + r0 * C_;  // [N, C] residual stream
  embed_tokens(m_, tok + r0, pos_.data() + r0, N, x);
  for (size_t l = 0; l < size_t(L_); ++l) {
    for (const SublayerParams& sub : m_.decoder_layers()[l].sublayers) {
      if (sub.kind == SublayerKind::FeedForward) {
        feed_forward_block(decoder_shape_, sub.ffn, sub.norm, x, N, s);
        continue;
      }
      // Self-attention appends the fed positions' K/V to the row's cache; cross-attention reads
      // the source's, projected once.
      const bool self = sub.kind == SublayerKind::SelfAttention;
      decoder_groups(rows, off + i0, l, !self, groups);
      attention_block(decoder_shape_, sub.attn, sub.norm, x, N, self, groups, s, on_attention_);
    }
  }
  // Each row's last position (never a pad column), or every position.
  const int64_t m = all_positions ? N : static_cast<int64_t>(rows.size());
  float* h = all_positions ? x : sel_.data<float>() + int64_t(i0) * C_;  // [m, C]
  if (!all_positions)
    for (size_t i = i0; i < i1; ++i)
      std::memcpy(h + (i - i0) * size_t(C_), x_.data<float>() + (off[i + 1] - 1) * C_,
                  size_t(C_) * sizeof(float));
  if (m_.decoder_final_norm().defined())
    layer_norm(h, m_.decoder_final_norm(), h, m, C_, decoder_shape_.eps);
  float* out = logits_.data<float>() + (all_positions ? r0 : int64_t(i0)) * V_;  // [m, V]
  // logits = h·W + b with W [C, V], or W [V, C] (tied embedding, Decode layout) transposed
  project(h, m, C_, V_, m_.out_weight(), m_.quant_out_weight(), m_.out_bias(), out,
          m_.out_weight_layout());
}

const float* DecodeSession::recompute(std::span<const int32_t> rows) {
  if (m_.seq2seq()) project_all_cross();  // no cache: cross K/V again on every call
  offsets_.assign(1, 0);
  flat_.clear();
  for (int32_t r : rows) {
    check_row(r, "DecodeSession::step");
    const auto& hist = history_[size_t(r)];
    len_[size_t(r)] = 0;
    flat_.insert(flat_.end(), hist.begin(), hist.end());
    offsets_.push_back(static_cast<int32_t>(flat_.size()));
  }
  return extend(rows, offsets_.data(), flat_.data(), false);
}

const float* DecodeSession::prefill(std::span<const int32_t> rows,
                                    const std::vector<std::vector<int32_t>>& tokens,
                                    bool all_positions) {
  if (tokens.size() != rows.size())
    fail("DecodeSession::prefill", std::to_string(rows.size()) + " rows but " +
                                       std::to_string(tokens.size()) + " token lists");
  const bool uncached = mode_ == CacheMode::Uncached;
  for (size_t i = 0; uncached && i < rows.size(); ++i) {
    check_row(rows[i], "DecodeSession::prefill");
    auto& hist = history_[size_t(rows[i])];
    hist.insert(hist.end(), tokens[i].begin(), tokens[i].end());
  }
  if (uncached && !all_positions) return recompute(rows);
  // Cached: the new tokens; uncached with all_positions: every position of the history again.
  offsets_.assign(1, 0);
  flat_.clear();
  for (size_t i = 0; i < rows.size(); ++i) {
    const std::vector<int32_t>& feed = uncached ? history_[size_t(rows[i])] : tokens[i];
    if (uncached) len_[size_t(rows[i])] = 0;
    flat_.insert(flat_.end(), feed.begin(), feed.end());
    offsets_.push_back(static_cast<int32_t>(flat_.size()));
  }
  if (uncached && m_.seq2seq()) project_all_cross();
  return extend(rows, offsets_.data(), flat_.data(), all_positions);
}

const float* DecodeSession::step(std::span<const int32_t> rows, std::span<const int32_t> tokens) {
  if (tokens.size() != rows.size())
    fail("DecodeSession::step",
         std::to_string(rows.size()) + " rows but " + std::to_string(tokens.size()) + " tokens");
  if (mode_ == CacheMode::Uncached) {
    for (size_t i = 0; i < rows.size(); ++i) {
      check_row(rows[i], "DecodeSession::step");
      history_[size_t(rows[i])].push_back(tokens[i]);
    }
    return recompute(rows);
  }
  offsets_.resize(rows.size() + 1);
  for (size_t i = 0; i <= rows.size(); ++i) offsets_[i] = static_cast<int32_t>(i);
  return extend(rows, offsets_.data(), tokens.data(), false);
}

// ---- beams and bookkeeping ----------------------------------------------------------------

void DecodeSession::reorder(std::span<const int32_t> parent) {
  if (static_cast<int64_t>(parent.size()) != R_)
    fail("DecodeSession::reorder", "needs one parent per row: " + std::to_string(parent.size()) +
                                       " given for " + std::to_string(R_) + " rows");
  reorder(all_rows_, parent);
}

void DecodeSession::reorder(std::span<const int32_t> rows, std::span<const int32_t> parents) {
  if (rows.size() != parents.size())
    fail("DecodeSession::reorder",
         std::to_string(rows.size()) + " rows but " + std::to_string(parents.size()) + " parents");
  new_len_.resize(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    check_row(rows[i], "DecodeSession::reorder");
    if (parents[i] >= R_)
      fail("DecodeSession::reorder", "parent " + std::to_string(parents[i]) + " of row " +
                                         std::to_string(rows[i]) + " is not a row");
    new_len_[i] = parents[i] < 0 ? 0 : len_[size_t(parents[i])];
  }
  if (mode_ == CacheMode::Uncached) {
    std::vector<std::vector<int32_t>> h(rows.size());
    for (size_t i = 0; i < rows.size(); ++i)
      if (parents[i] >= 0) h[i] = history_[size_t(parents[i])];
    for (size_t i = 0; i < rows.size(); ++i) history_[size_t(rows[i])].swap(h[i]);
  } else {
    move_rows(rows, parents);
  }
  for (size_t i = 0; i < rows.size(); ++i) len_[size_t(rows[i])] = new_len_[i];
}

float* DecodeSession::k_slot(size_t l, int64_t slot) {
  Tensor& t = slot < R_ ? k_cache_[l] : k_spare_[l];
  return t.data<float>() + (slot % R_) * H_ * cap_ * Dh_;
}

float* DecodeSession::v_slot(size_t l, int64_t slot) {
  Tensor& t = slot < R_ ? v_cache_[l] : v_spare_[l];
  return t.data<float>() + (slot % R_) * H_ * cap_ * Dh_;
}

// Cached reorder: a row that takes another row's history gets a free slot holding a copy of the
// parent's first new_len_ positions (copies read the old slots, so parents may move too); the
// slots it leaves become free. Rows that keep their own history are not touched.
void DecodeSession::move_rows(std::span<const int32_t> rows, std::span<const int32_t> parents) {
  new_slot_.assign(rows.size(), -1);
  size_t free = 0;  // the next slot to try
  for (size_t i = 0; i < rows.size(); ++i) {
    const int32_t p = parents[i];
    if (p < 0 || p == rows[i] || new_len_[i] == 0) continue;
    if (k_spare_.empty())
      for (int64_t l = 0; l < L_; ++l) {
        k_spare_.push_back(Tensor::empty({R_, H_, cap_, Dh_}, DType::F32));  // [R, H, Tc, Dh]
        v_spare_.push_back(Tensor::empty({R_, H_, cap_, Dh_}, DType::F32));  // [R, H, Tc, Dh]
      }
    while (slot_used_[free]) ++free;  // R rows use R of the 2R slots: one is always free
    slot_used_[free] = 1;
    new_slot_[i] = static_cast<int64_t>(free);
    const size_t bytes = size_t(new_len_[i] * Dh_) * sizeof(float);
    for (size_t l = 0; l < size_t(L_); ++l)
      for (int64_t h = 0; h < H_; ++h) {
        const int64_t at = h * cap_ * Dh_;
        std::memcpy(k_slot(l, new_slot_[i]) + at, k_slot(l, slot_[size_t(p)]) + at, bytes);
        std::memcpy(v_slot(l, new_slot_[i]) + at, v_slot(l, slot_[size_t(p)]) + at, bytes);
      }
  }
  for (size_t i = 0; i < rows.size(); ++i) {
    if (new_slot_[i] < 0) continue;
    slot_used_[size_t(slot_[size_t(rows[i])])] = 0;
    slot_[size_t(rows[i])] = new_slot_[i];
  }
}

void DecodeSession::rewind(int32_t row, int64_t length) {
  check_row(row, "DecodeSession::rewind");
  if (length < 0 || length > len_[size_t(row)])
    fail("DecodeSession::rewind", "length " + std::to_string(length) + " outside [0, " +
                                      std::to_string(len_[size_t(row)]) + "]");
  len_[size_t(row)] = length;
  if (mode_ == CacheMode::Uncached) history_[size_t(row)].resize(size_t(length));
}

int64_t DecodeSession::length(int32_t row) const {
  check_row(row, "DecodeSession::length");
  return len_[size_t(row)];
}

size_t DecodeSession::kv_bytes_per_position() const {
  if (k_cache_.empty() || R_ == 0) return 0;
  size_t per_layer = k_cache_[0].nbytes() + v_cache_[0].nbytes();
  return per_layer * k_cache_.size() / size_t(R_ * cap_);
}

size_t DecodeSession::kv_bytes_allocated() const {
  size_t total = 0;
  for (const auto* list : {&k_cache_, &v_cache_, &k_spare_, &v_spare_})
    for (const Tensor& t : *list) total += t.nbytes();
  return total;
}

size_t DecodeSession::cross_kv_bytes() const {
  size_t total = 0;
  for (const auto* list : {&cross_k_, &cross_v_})
    for (const Tensor& t : *list) total += t.nbytes();
  return total;
}

}  // namespace seqtape
