// DecodeSession: encoder, cross-attention K/V, self-attention KV cache, and the decoder forward
// over any number of new positions per row (prefill and one-token steps are the same code).
//
// Dimension key: B sources, S longest source, R rows, N tokens fed in one call, n rows in one
// call, C d_model, H heads, Dh = C / H, F d_ff, V vocabulary, L decoder layers, Tc capacity.
//
// The arithmetic mirrors nn/ (attention.cpp, layers.cpp, transformer.cpp) on the same kernels:
// y = x·W + b through gemm (gemv for a single row) then add_row_bias, with W [in, out] or, in
// the Decode layout, the decoder's W [out, in] used transposed; scores = q·kᵀ then
// ·(1/√Dh); masked keys are excluded (softmax weight exactly 0, as with −∞); LayerNorm with the
// configured placement; embedding + PE without scaling.
#include "infer/session.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>

#include "autograd/kernels.h"

namespace seqtape {

namespace {

// A float32 scratch buffer of at least n elements; reallocated only when it must grow.
float* grow(Tensor& t, int64_t n) {
  if (!t.defined() || t.numel() < n) t = Tensor::empty({std::max<int64_t>(n, 1)}, DType::F32);
  return t.data<float>();
}

const float* ptr(const Tensor& t) {
  return t.defined() ? t.data<float>() : nullptr;
}

// y [n, out] = x [n, in]·W + b with W [in, out], or W [out, in] used transposed when
// `out_in` (the Decode layout). One row goes through gemv, more through one gemm with M = n.
void linear(const float* x, int64_t n, int64_t in, int64_t out, const Tensor& w, const Tensor& b,
            float* y, bool out_in = false) {
  if (n == 1 && out_in)
    kernels::mat_vec<float>(out, in, 1.f, w.data<float>(), in, x, 0.f, y);
  else if (n == 1)
    kernels::vec_mat<float>(in, out, 1.f, x, w.data<float>(), 0.f, y);
  else
    kernels::gemm<float>(false, out_in, n, out, in, 1.f, x, in, w.data<float>(), out_in ? in : out,
                         0.f, y, out);
  if (b.defined()) kernels::add_row_bias<float>(y, b.data<float>(), n, out);
}

void layer_norm(const float* x, const NormParams& p, float* y, int64_t n, int64_t c, double eps) {
  kernels::layer_norm_rows<float>(x, p.gamma.data<float>(), p.beta.data<float>(), y, nullptr,
                                  nullptr, n, c, eps);
}

kernels::Act act_of(Activation a) {
  switch (a) {
    case Activation::Relu:
      return kernels::Act::Relu;
    case Activation::Gelu:
      return kernels::Act::Gelu;
    case Activation::Tanh:
      return kernels::Act::Tanh;
  }
  return kernels::Act::Relu;
}

// Keys and values of one attention call: head h, position j starts at base + h·head_stride +
// j·row_stride (row_stride = Dh for the head-major caches, C for row-major projections).
struct KvView {
  const float* k;
  const float* v;
  int64_t head_stride, row_stride;
};

// Scaled dot-product attention of n queries over nk keys, every head. q: n rows of stride ldq,
// head h at column h·Dh. causal: query t is the (nk − n + t)-th position and sees keys
// [0, nk − n + t]; otherwise it sees all nk keys. ctx: n rows of stride ldc. s: n·nk scratch.
// tap (tracing) sees each head's weights [n, nk] right after the softmax.
using HeadTap = std::function<void(int64_t head, const float* weights)>;

void attend(const float* q, int64_t ldq, int64_t n, const KvView& kv, int64_t nk, bool causal,
            int64_t H, int64_t Dh, float* ctx, int64_t ldc, float* s,
            const HeadTap* tap = nullptr) {
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(Dh)));
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (int64_t h = 0; h < H; ++h) {
    const float* qh = q + h * Dh;
    const float* kh = kv.k + h * kv.head_stride;
    const float* vh = kv.v + h * kv.head_stride;
    // scores [n, nk] = q_h·k_hᵀ, then ·scale as the training op does. Also for one query: a
    // gemm with M = 1 sums each dot product in the order the recompute's gemm does, so cached
    // and uncached scores agree to the bit (sgemv would be ~4% faster at 256 positions, but
    // differs by an ulp, which large logits amplify past 1e-5).
    kernels::gemm<float>(false, true, n, nk, Dh, 1.f, qh, ldq, kh, kv.row_stride, 0.f, s, nk);
    for (int64_t i = 0; i < n * nk; ++i) s[i] *= scale;
    if (causal)
      for (int64_t t = 0; t < n; ++t)
        for (int64_t j = nk - n + t + 1; j < nk; ++j) s[t * nk + j] = neg_inf;
    kernels::softmax_rows<float>(s, s, n, nk);
    if (tap) (*tap)(h, s);
    // ctx_h [n, Dh] = weights [n, nk]·v_h [nk, Dh]
    if (n == 1 && kv.row_stride == Dh)
      kernels::vec_mat<float>(nk, Dh, 1.f, s, vh, 0.f, ctx + h * Dh);
    else
      kernels::gemm<float>(false, false, n, Dh, nk, 1.f, s, nk, vh, kv.row_stride, 0.f,
                           ctx + h * Dh, ldc);
  }
}

// The residual around a sublayer whose output is `o` (x and o [n, C]):
//   post: x = LN(x + o)   pre, none: x = x + o
void residual(float* x, float* o, NormPlacement placement, const NormParams& norm, int64_t n,
              int64_t c, double eps) {
  const int64_t total = n * c;
  if (placement == NormPlacement::Post) {
    for (int64_t i = 0; i < total; ++i) o[i] = x[i] + o[i];
    layer_norm(o, norm, x, n, c, eps);
  } else {
    for (int64_t i = 0; i < total; ++i) x[i] = x[i] + o[i];
  }
}

}  // namespace

DecodeSession::DecodeSession(const InferenceModel& model, CacheMode mode)
    : m_(model),
      mode_(mode),
      C_(model.config().d_model),
      H_(model.config().n_heads),
      Dh_(model.config().d_model / model.config().n_heads),
      F_(model.config().d_ff),
      V_(model.config().vocab_size),
      L_(model.config().n_decoder_layers) {}

void DecodeSession::begin(const std::vector<std::vector<int32_t>>& sources,
                          std::vector<int32_t> row_source, int64_t capacity) {
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
  row_source_ = std::move(row_source);
  R_ = static_cast<int64_t>(row_source_.size());
  cap_ = capacity;
  len_.assign(static_cast<size_t>(R_), 0);
  history_.assign(mode_ == CacheMode::Uncached ? static_cast<size_t>(R_) : 0, {});
  k_cache_.clear();
  v_cache_.clear();
  k_spare_.clear();
  v_spare_.clear();
  for (int64_t l = 0; l < L_; ++l) {
    k_cache_.push_back(Tensor::empty({R_, H_, cap_, Dh_}, DType::F32));  // [R, H, Tc, Dh]
    v_cache_.push_back(Tensor::empty({R_, H_, cap_, Dh_}, DType::F32));  // [R, H, Tc, Dh]
  }
  if (m_.seq2seq()) {
    encode(sources);
    if (mode_ == CacheMode::Cached) project_cross();
  } else {
    B_ = S_ = 0;
    memory_ = Tensor();
    cross_k_.clear();
    cross_v_.clear();
  }
  // Decode steps need n = R rows of scratch; grow once here, not inside the first step.
  const int64_t n = mode_ == CacheMode::Cached ? R_ : R_ * cap_;
  for (Tensor* t : {&x_, &in_, &q_, &k_, &v_, &ctx_, &out_, &sel_}) grow(*t, n * C_);
  grow(hid_, n * F_);
  grow(logits_, R_ * V_);
  grow(scores_, mode_ == CacheMode::Cached ? std::max(cap_, S_) : cap_ * std::max(cap_, S_));
  offsets_.reserve(static_cast<size_t>(R_ + 1));
  flat_.reserve(static_cast<size_t>(mode_ == CacheMode::Cached ? R_ : R_ * cap_));
}

// ---- encoder ------------------------------------------------------------------------------

void DecodeSession::encode(const std::vector<std::vector<int32_t>>& sources) {
  const ModelConfig& cfg = m_.config();
  const double eps = cfg.layer_norm_eps;
  B_ = static_cast<int64_t>(sources.size());
  S_ = 0;
  src_len_.assign(static_cast<size_t>(B_), 0);
  for (int64_t b = 0; b < B_; ++b) {
    const auto& s = sources[static_cast<size_t>(b)];
    const std::string what = "source " + std::to_string(b);
    if (s.empty()) fail("DecodeSession::begin", what + " is empty");
    if (static_cast<int64_t>(s.size()) > cfg.max_positions)
      fail("DecodeSession::begin", what + " has " + std::to_string(s.size()) +
                                       " tokens, more than max_positions " +
                                       std::to_string(cfg.max_positions));
    for (int32_t id : s)
      if (id < 0 || id >= V_)
        fail("DecodeSession::begin", what + " holds id " + std::to_string(id) +
                                         " outside the vocabulary [0, " + std::to_string(V_) + ")");
    src_len_[static_cast<size_t>(b)] = static_cast<int32_t>(s.size());
    S_ = std::max<int64_t>(S_, static_cast<int64_t>(s.size()));
  }
  const int64_t N = B_ * S_;
  Tensor x = Tensor::empty({B_, S_, C_}, DType::F32);    // [B, S, C] residual stream
  Tensor in = Tensor::empty({B_, S_, C_}, DType::F32);   // [B, S, C] normed input (pre)
  Tensor q = Tensor::empty({B_, S_, C_}, DType::F32);    // [B, S, C]
  Tensor k = Tensor::empty({B_, S_, C_}, DType::F32);    // [B, S, C]
  Tensor v = Tensor::empty({B_, S_, C_}, DType::F32);    // [B, S, C]
  Tensor ctx = Tensor::empty({B_, S_, C_}, DType::F32);  // [B, S, C]
  Tensor o = Tensor::empty({B_, S_, C_}, DType::F32);    // [B, S, C] sublayer output
  Tensor hid = Tensor::empty({B_, S_, F_}, DType::F32);  // [B, S, F]
  Tensor s = Tensor::empty({S_, S_}, DType::F32);        // [S, S] scores of one head
  float* px = x.data<float>();
  const float* E = m_.embed().data<float>();
  const float* pe = ptr(m_.positions());
  for (int64_t b = 0; b < B_; ++b)
    for (int64_t t = 0; t < S_; ++t) {
      const auto& src = sources[static_cast<size_t>(b)];
      // Pad positions hold the first id: masked as keys, their outputs never read.
      const int32_t id =
          t < static_cast<int64_t>(src.size()) ? src[static_cast<size_t>(t)] : src[0];
      float* row = px + (b * S_ + t) * C_;
      for (int64_t c = 0; c < C_; ++c) row[c] = E[id * C_ + c] + (pe ? pe[t * C_ + c] : 0.f);
    }
  const NormPlacement placement = cfg.norm;
  const bool pre = placement == NormPlacement::Pre;
  int64_t layer = -1;
  for (const EncoderLayerParams& P : m_.encoder_layers()) {
    ++layer;
    // self-attention, keys masked past each source's length
    const float* a_in = px;
    if (pre) {
      layer_norm(px, P.self_norm, in.data<float>(), N, C_, eps);
      a_in = in.data<float>();
    }
    linear(a_in, N, C_, C_, P.self_attn.wq, P.self_attn.bq, q.data<float>());
    linear(a_in, N, C_, C_, P.self_attn.wk, P.self_attn.bk, k.data<float>());
    linear(a_in, N, C_, C_, P.self_attn.wv, P.self_attn.bv, v.data<float>());
    for (int64_t b = 0; b < B_; ++b) {
      const int64_t off = b * S_ * C_;
      KvView kv{k.data<float>() + off, v.data<float>() + off, Dh_, C_};
      const int64_t nk = src_len_[static_cast<size_t>(b)];
      HeadTap tap;
      if (on_attention_)
        tap = [&](int64_t h, const float* w) {
          on_attention_({AttentionEvent::Kind::EncoderSelf, layer, -1, static_cast<int32_t>(b), h,
                         0, S_, nk, w});
        };
      attend(q.data<float>() + off, C_, S_, kv, nk, false, H_, Dh_, ctx.data<float>() + off, C_,
             s.data<float>(), on_attention_ ? &tap : nullptr);
    }
    linear(ctx.data<float>(), N, C_, C_, P.self_attn.wo, P.self_attn.bo, o.data<float>());
    residual(px, o.data<float>(), placement, P.self_norm, N, C_, eps);
    // feed-forward
    a_in = px;
    if (pre) {
      layer_norm(px, P.ffn_norm, in.data<float>(), N, C_, eps);
      a_in = in.data<float>();
    }
    linear(a_in, N, C_, F_, P.ffn.w1, P.ffn.b1, hid.data<float>());
    kernels::activate<float>(hid.data<float>(), hid.data<float>(), N * F_, act_of(cfg.activation));
    linear(hid.data<float>(), N, F_, C_, P.ffn.w2, P.ffn.b2, o.data<float>());
    residual(px, o.data<float>(), placement, P.ffn_norm, N, C_, eps);
  }
  if (pre) layer_norm(px, m_.encoder_final_norm(), px, N, C_, eps);
  memory_ = x;  // [B, S, C]
}

void DecodeSession::project_cross() {
  const int64_t N = B_ * S_;
  if (cross_k_.size() != static_cast<size_t>(L_)) {
    cross_k_.clear();
    cross_v_.clear();
    for (int64_t l = 0; l < L_; ++l) {
      cross_k_.push_back(Tensor::empty({B_, H_, S_, Dh_}, DType::F32));  // [B, H, S, Dh]
      cross_v_.push_back(Tensor::empty({B_, H_, S_, Dh_}, DType::F32));  // [B, H, S, Dh]
    }
  }
  const bool dec_t = m_.layout() == WeightLayout::Decode;  // decoder matrices [out, in]
  float* kx = grow(k_, N * C_);                            // [B·S, C]
  float* vx = grow(v_, N * C_);                            // [B·S, C]
  for (int64_t l = 0; l < L_; ++l) {
    const AttnParams& A = m_.decoder_layers()[static_cast<size_t>(l)].cross_attn;
    linear(memory_.data<float>(), N, C_, C_, A.wk, A.bk, kx, dec_t);
    linear(memory_.data<float>(), N, C_, C_, A.wv, A.bv, vx, dec_t);
    float* ck = cross_k_[static_cast<size_t>(l)].data<float>();
    float* cv = cross_v_[static_cast<size_t>(l)].data<float>();
    for (int64_t b = 0; b < B_; ++b)
      for (int64_t h = 0; h < H_; ++h)
        for (int64_t t = 0; t < S_; ++t) {
          const int64_t src = (b * S_ + t) * C_ + h * Dh_, dst = ((b * H_ + h) * S_ + t) * Dh_;
          std::memcpy(ck + dst, kx + src, static_cast<size_t>(Dh_) * sizeof(float));
          std::memcpy(cv + dst, vx + src, static_cast<size_t>(Dh_) * sizeof(float));
        }
  }
}

// ---- decoder ------------------------------------------------------------------------------

void DecodeSession::check_row(int32_t row, const char* op) const {
  if (row < 0 || row >= R_)
    fail(op, "row " + std::to_string(row) + " outside [0, " + std::to_string(R_) +
                 ") (call begin first)");
}

const float* DecodeSession::extend(std::span<const int32_t> rows, const int32_t* off,
                                   const int32_t* tok, bool all_positions) {
  const ModelConfig& cfg = m_.config();
  const double eps = cfg.layer_norm_eps;
  const auto n = static_cast<int64_t>(rows.size());
  const int64_t N = off[n];
  for (int64_t i = 0; i < n; ++i) {
    const int32_t r = rows[static_cast<size_t>(i)];
    check_row(r, "DecodeSession::step");
    const int64_t cnt = off[i + 1] - off[i];
    if (cnt < 1) fail("DecodeSession::step", "row " + std::to_string(r) + " is fed no token");
    if (len_[static_cast<size_t>(r)] + cnt > cap_)
      fail("DecodeSession::step", "row " + std::to_string(r) + " would hold " +
                                      std::to_string(len_[static_cast<size_t>(r)] + cnt) +
                                      " positions, more than the capacity " + std::to_string(cap_));
  }
  for (int64_t j = 0; j < N; ++j)
    if (tok[j] < 0 || tok[j] >= V_)
      fail("DecodeSession::step", "token id " + std::to_string(tok[j]) +
                                      " outside the vocabulary [0, " + std::to_string(V_) + ")");

  float* x = grow(x_, N * C_);      // [N, C] residual stream
  float* in = grow(in_, N * C_);    // [N, C] normed sublayer input (pre)
  float* q = grow(q_, N * C_);      // [N, C]
  float* k = grow(k_, N * C_);      // [N, C]
  float* v = grow(v_, N * C_);      // [N, C]
  float* ctx = grow(ctx_, N * C_);  // [N, C]
  float* o = grow(out_, N * C_);    // [N, C] sublayer output
  float* hid = grow(hid_, N * F_);  // [N, F]
  int64_t max_cnt = 0, max_keys = S_;
  for (int64_t i = 0; i < n; ++i) {
    max_cnt = std::max<int64_t>(max_cnt, off[i + 1] - off[i]);
    max_keys = std::max<int64_t>(
        max_keys, len_[static_cast<size_t>(rows[static_cast<size_t>(i)])] + off[i + 1] - off[i]);
  }
  float* s = grow(scores_, max_cnt * max_keys);  // [n_i, keys] scores of one row and head

  // embedding + positional encoding at each row's next positions
  const float* E = m_.embed().data<float>();
  const float* pe = ptr(m_.positions());
  for (int64_t i = 0; i < n; ++i) {
    const int64_t start = len_[static_cast<size_t>(rows[static_cast<size_t>(i)])];
    for (int64_t j = off[i]; j < off[i + 1]; ++j) {
      const int64_t p = start + (j - off[i]);
      float* xr = x + j * C_;
      const float* er = E + static_cast<int64_t>(tok[j]) * C_;
      if (pe)
        for (int64_t c = 0; c < C_; ++c) xr[c] = er[c] + pe[p * C_ + c];
      else
        std::memcpy(xr, er, static_cast<size_t>(C_) * sizeof(float));
    }
  }

  const NormPlacement placement = cfg.norm;
  const bool pre = placement == NormPlacement::Pre;
  const bool dec_t = m_.layout() == WeightLayout::Decode;  // decoder matrices [out, in]
  const size_t head_bytes = static_cast<size_t>(Dh_) * sizeof(float);
  for (int64_t l = 0; l < L_; ++l) {
    const DecoderLayerParams& P = m_.decoder_layers()[static_cast<size_t>(l)];
    float* kc = k_cache_[static_cast<size_t>(l)].data<float>();  // [R, H, Tc, Dh]
    float* vc = v_cache_[static_cast<size_t>(l)].data<float>();  // [R, H, Tc, Dh]

    // masked self-attention: project the new positions, write their K/V, attend over the cache
    const float* a_in = x;
    if (pre) {
      layer_norm(x, P.self_norm, in, N, C_, eps);
      a_in = in;
    }
    linear(a_in, N, C_, C_, P.self_attn.wq, P.self_attn.bq, q, dec_t);
    linear(a_in, N, C_, C_, P.self_attn.wk, P.self_attn.bk, k, dec_t);
    linear(a_in, N, C_, C_, P.self_attn.wv, P.self_attn.bv, v, dec_t);
    for (int64_t i = 0; i < n; ++i) {
      const int64_t r = rows[static_cast<size_t>(i)];
      const int64_t start = len_[static_cast<size_t>(r)], cnt = off[i + 1] - off[i];
      for (int64_t j = off[i]; j < off[i + 1]; ++j)
        for (int64_t h = 0; h < H_; ++h) {
          const int64_t dst = ((r * H_ + h) * cap_ + start + (j - off[i])) * Dh_;
          std::memcpy(kc + dst, k + j * C_ + h * Dh_, head_bytes);
          std::memcpy(vc + dst, v + j * C_ + h * Dh_, head_bytes);
        }
      KvView kv{kc + r * H_ * cap_ * Dh_, vc + r * H_ * cap_ * Dh_, cap_ * Dh_, Dh_};
      HeadTap tap;
      if (on_attention_)
        tap = [&](int64_t h, const float* w) {
          on_attention_({AttentionEvent::Kind::Self, l, static_cast<int32_t>(r),
                         row_source_[static_cast<size_t>(r)], h, start, cnt, start + cnt, w});
        };
      attend(q + off[i] * C_, C_, cnt, kv, start + cnt, true, H_, Dh_, ctx + off[i] * C_, C_, s,
             on_attention_ ? &tap : nullptr);
    }
    linear(ctx, N, C_, C_, P.self_attn.wo, P.self_attn.bo, o, dec_t);
    residual(x, o, placement, P.self_norm, N, C_, eps);

    // cross-attention over the row's source: K/V projected once per source, read by index
    if (m_.seq2seq()) {
      a_in = x;
      if (pre) {
        layer_norm(x, P.cross_norm, in, N, C_, eps);
        a_in = in;
      }
      linear(a_in, N, C_, C_, P.cross_attn.wq, P.cross_attn.bq, q, dec_t);
      const float* ck = cross_k_[static_cast<size_t>(l)].data<float>();  // [B, H, S, Dh]
      const float* cv = cross_v_[static_cast<size_t>(l)].data<float>();  // [B, H, S, Dh]
      for (int64_t i = 0; i < n; ++i) {
        const int64_t b = row_source_[static_cast<size_t>(rows[static_cast<size_t>(i)])];
        KvView kv{ck + b * H_ * S_ * Dh_, cv + b * H_ * S_ * Dh_, S_ * Dh_, Dh_};
        const int32_t r = rows[static_cast<size_t>(i)];
        const int64_t cnt = off[i + 1] - off[i], nk = src_len_[static_cast<size_t>(b)];
        HeadTap tap;
        if (on_attention_)
          tap = [&](int64_t h, const float* w) {
            on_attention_({AttentionEvent::Kind::Cross, l, r, static_cast<int32_t>(b), h,
                           len_[static_cast<size_t>(r)], cnt, nk, w});
          };
        attend(q + off[i] * C_, C_, cnt, kv, nk, false, H_, Dh_, ctx + off[i] * C_, C_, s,
               on_attention_ ? &tap : nullptr);
      }
      linear(ctx, N, C_, C_, P.cross_attn.wo, P.cross_attn.bo, o, dec_t);
      residual(x, o, placement, P.cross_norm, N, C_, eps);
    }

    // feed-forward
    a_in = x;
    if (pre) {
      layer_norm(x, P.ffn_norm, in, N, C_, eps);
      a_in = in;
    }
    linear(a_in, N, C_, F_, P.ffn.w1, P.ffn.b1, hid, dec_t);
    kernels::activate<float>(hid, hid, N * F_, act_of(cfg.activation));
    linear(hid, N, F_, C_, P.ffn.w2, P.ffn.b2, o, dec_t);
    residual(x, o, placement, P.ffn_norm, N, C_, eps);
  }
  for (int64_t i = 0; i < n; ++i)
    len_[static_cast<size_t>(rows[static_cast<size_t>(i)])] += off[i + 1] - off[i];

  // Logits of the last fed position of each row (never a pad column), or of every position.
  const int64_t m = all_positions ? N : n;
  float* h = all_positions ? x : grow(sel_, n * C_);  // [m, C]
  if (!all_positions)
    for (int64_t i = 0; i < n; ++i)
      std::memcpy(h + i * C_, x + (off[i + 1] - 1) * C_, static_cast<size_t>(C_) * sizeof(float));
  if (pre) layer_norm(h, m_.decoder_final_norm(), h, m, C_, eps);
  float* logits = grow(logits_, m * V_);  // [m, V]
  // logits = h·W + b with W [C, V], or W [V, C] (tied embedding, Decode layout) transposed
  linear(h, m, C_, V_, m_.out_weight(), m_.out_bias(), logits, m_.out_weight_transposed());
  return logits;
}

const float* DecodeSession::recompute(std::span<const int32_t> rows) {
  if (m_.seq2seq()) project_cross();  // no cache: cross K/V again on every call
  offsets_.assign(1, 0);
  flat_.clear();
  for (int32_t r : rows) {
    check_row(r, "DecodeSession::step");
    const auto& hist = history_[static_cast<size_t>(r)];
    len_[static_cast<size_t>(r)] = 0;
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
  if (mode_ == CacheMode::Uncached && !all_positions) {
    for (size_t i = 0; i < rows.size(); ++i) {
      check_row(rows[i], "DecodeSession::prefill");
      auto& hist = history_[static_cast<size_t>(rows[i])];
      hist.insert(hist.end(), tokens[i].begin(), tokens[i].end());
    }
    return recompute(rows);
  }
  if (mode_ == CacheMode::Uncached)
    for (int32_t r : rows) {
      check_row(r, "DecodeSession::prefill");
      len_[static_cast<size_t>(r)] = 0;  // no cache: every position of the history again
    }
  offsets_.assign(1, 0);
  flat_.clear();
  for (size_t i = 0; i < rows.size(); ++i) {
    if (mode_ == CacheMode::Uncached) {
      auto& hist = history_[static_cast<size_t>(rows[i])];
      hist.insert(hist.end(), tokens[i].begin(), tokens[i].end());
      flat_.insert(flat_.end(), hist.begin(), hist.end());
    } else {
      flat_.insert(flat_.end(), tokens[i].begin(), tokens[i].end());
    }
    offsets_.push_back(static_cast<int32_t>(flat_.size()));
  }
  if (mode_ == CacheMode::Uncached && m_.seq2seq()) project_cross();
  return extend(rows, offsets_.data(), flat_.data(), all_positions);
}

const float* DecodeSession::step(std::span<const int32_t> rows, std::span<const int32_t> tokens) {
  if (tokens.size() != rows.size())
    fail("DecodeSession::step",
         std::to_string(rows.size()) + " rows but " + std::to_string(tokens.size()) + " tokens");
  if (mode_ == CacheMode::Uncached) {
    for (size_t i = 0; i < rows.size(); ++i) {
      check_row(rows[i], "DecodeSession::step");
      history_[static_cast<size_t>(rows[i])].push_back(tokens[i]);
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
  bool identity = true;
  for (int64_t r = 0; r < R_; ++r) {
    const int32_t p = parent[static_cast<size_t>(r)];
    if (p >= R_)
      fail("DecodeSession::reorder",
           "parent " + std::to_string(p) + " of row " + std::to_string(r) + " is not a row");
    identity = identity && p == r;
  }
  if (identity) return;
  new_len_.resize(static_cast<size_t>(R_));
  for (int64_t r = 0; r < R_; ++r) {
    const int32_t p = parent[static_cast<size_t>(r)];
    new_len_[static_cast<size_t>(r)] = p < 0 ? 0 : len_[static_cast<size_t>(p)];
  }
  if (mode_ == CacheMode::Uncached) {
    std::vector<std::vector<int32_t>> h(static_cast<size_t>(R_));
    for (int64_t r = 0; r < R_; ++r)
      if (parent[static_cast<size_t>(r)] >= 0)
        h[static_cast<size_t>(r)] = history_[static_cast<size_t>(parent[static_cast<size_t>(r)])];
    history_.swap(h);
  } else {
    if (k_spare_.empty())
      for (int64_t l = 0; l < L_; ++l) {
        k_spare_.push_back(Tensor::empty({R_, H_, cap_, Dh_}, DType::F32));  // [R, H, Tc, Dh]
        v_spare_.push_back(Tensor::empty({R_, H_, cap_, Dh_}, DType::F32));  // [R, H, Tc, Dh]
      }
    for (int64_t l = 0; l < L_; ++l) {
      const auto li = static_cast<size_t>(l);
      for (int64_t r = 0; r < R_; ++r) {
        const int32_t p = parent[static_cast<size_t>(r)];
        const int64_t len = new_len_[static_cast<size_t>(r)];
        if (p < 0 || len == 0) continue;
        for (int64_t h = 0; h < H_; ++h) {
          const int64_t src = (p * H_ + h) * cap_ * Dh_, dst = (r * H_ + h) * cap_ * Dh_;
          const size_t bytes = static_cast<size_t>(len * Dh_) * sizeof(float);
          std::memcpy(k_spare_[li].data<float>() + dst, k_cache_[li].data<float>() + src, bytes);
          std::memcpy(v_spare_[li].data<float>() + dst, v_cache_[li].data<float>() + src, bytes);
        }
      }
    }
    k_cache_.swap(k_spare_);
    v_cache_.swap(v_spare_);
  }
  len_.swap(new_len_);
}

void DecodeSession::rewind(int32_t row, int64_t length) {
  check_row(row, "DecodeSession::rewind");
  if (length < 0 || length > len_[static_cast<size_t>(row)])
    fail("DecodeSession::rewind", "length " + std::to_string(length) + " outside [0, " +
                                      std::to_string(len_[static_cast<size_t>(row)]) + "]");
  len_[static_cast<size_t>(row)] = length;
  if (mode_ == CacheMode::Uncached)
    history_[static_cast<size_t>(row)].resize(static_cast<size_t>(length));
}

int64_t DecodeSession::length(int32_t row) const {
  check_row(row, "DecodeSession::length");
  return len_[static_cast<size_t>(row)];
}

size_t DecodeSession::kv_bytes_per_position() const {
  if (k_cache_.empty() || R_ == 0) return 0;
  size_t per_layer = k_cache_[0].nbytes() + v_cache_[0].nbytes();
  return per_layer * k_cache_.size() / static_cast<size_t>(R_ * cap_);
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
