#pragma once
// DecodeSession: the one `step` interface that greedy, beam and sampling drive. It owns the
// encoder output, the cross-attention K/V, the self-attention KV cache and the scratch of a
// decoding run; the Transformer blocks it runs over them are infer/layers (the training model's
// forward on the same kernels).
//
// Dimension key: B sources, S longest source (rows right-padded), R decoding rows (sources ×
// beams), N tokens fed in one call, C d_model, H heads, Dh = C / H, F d_ff, V vocabulary,
// L decoder layers, Tc cache capacity (positions per row).
//
// The cache (CacheMode::Cached):
//   - Seq2Seq: begin() runs the encoder once over all sources and projects each decoder layer's
//     cross-attention K/V once per source, [B, H, S, Dh]. A row reads its source's block by
//     index (row_source); beams of one source never copy it.
//   - Self-attention K/V per decoder layer live in [R, H, Tc, Dh], allocated once in begin();
//     a call writes the new positions at length(row) onward. reorder() re-gathers rows by
//     beam parent into a second buffer and swaps.
//   - Processed vs selected: length(row) counts processed positions. A token chosen from the
//     returned logits is selected but not processed; the next step() feeds exactly that token,
//     writes its K/V at position length(row), and returns the logits that select the next one.
//     After a prefill of n prompt tokens the cache holds n positions and the first new token is
//     pending (DecoderOnly); a Seq2Seq row starts with <bos> pending.
//
// CacheMode::Uncached keeps only each row's token history and recomputes the whole prefix on
// every call (self and cross K/V included) with the same code: the reference that the cached
// path is checked against, and the baseline of the decode benchmark.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "infer/layers.h"
#include "infer/model.h"

namespace seqtape {

enum class CacheMode { Cached, Uncached };

class DecodeSession {
 public:
  explicit DecodeSession(const InferenceModel& model, CacheMode mode = CacheMode::Cached);

  // Starts R = row_source.size() empty rows; row r belongs to source row_source[r].
  // Seq2Seq: `sources` are the encoder inputs (ids, each 1..max_positions long; a source is
  // usually text + <eos>). DecoderOnly: `sources` must be empty (the prompt is prefilled).
  // capacity: positions a row may process, 1..max_positions.
  void begin(const std::vector<std::vector<int32_t>>& sources, std::vector<int32_t> row_source,
             int64_t capacity);

  // Feeds tokens[i] (>= 1 token, e.g. a prompt) to row rows[i] at positions length(row)...;
  // returns the logits of each row's last fed position → [rows.size(), V], or of every fed
  // position → [Σ tokens[i].size(), V] in row order when all_positions. Valid until the next
  // call.
  const float* prefill(std::span<const int32_t> rows,
                       const std::vector<std::vector<int32_t>>& tokens, bool all_positions = false);
  // One selected token per listed row → logits [rows.size(), V]. Allocates nothing once the
  // scratch has grown to the row count.
  const float* step(std::span<const int32_t> rows, std::span<const int32_t> tokens);

  // Beam re-gather: afterwards row r holds what row parent[r] held (cache and length);
  // parent[r] < 0 empties row r. parent has R entries.
  void reorder(std::span<const int32_t> parent);
  // Forgets the positions of `row` from `length` on (the earlier ones stay valid).
  void rewind(int32_t row, int64_t length);

  int64_t length(int32_t row) const;  // processed positions
  int64_t rows() const { return R_; }
  int64_t capacity() const { return cap_; }
  CacheMode mode() const { return mode_; }
  const InferenceModel& model() const { return m_; }
  int32_t source_of(int32_t row) const { return row_source_[size_t(row)]; }

  // Called with every attention call's weights while set (tracing); unset costs one test per
  // attention call.
  void set_attention_observer(AttentionObserver f) { on_attention_ = std::move(f); }

  // Self-attention K and V of one position of one row, as allocated: 2·L·C·sizeof(float).
  size_t kv_bytes_per_position() const;
  size_t kv_bytes_allocated() const;  // every self-attention cache buffer (spares included)
  size_t cross_kv_bytes() const;      // cross-attention K/V, once per source

 private:
  void check_begin(const std::vector<std::vector<int32_t>>& sources,
                   const std::vector<int32_t>& row_source, int64_t capacity) const;
  void check_sources(const std::vector<std::vector<int32_t>>& sources);  // sets B_, S_, src_len_
  void encode(const std::vector<std::vector<int32_t>>& sources);
  void project_cross();  // every decoder layer's cross K/V from memory_
  // Feeds tokens[offsets[i] .. offsets[i+1]) to rows[i] (the decoder over all of them at once).
  const float* extend(std::span<const int32_t> rows, const int32_t* offsets, const int32_t* tokens,
                      bool all_positions);
  void check_feed(std::span<const int32_t> rows, const int32_t* offsets,
                  const int32_t* tokens) const;
  void decoder_groups(std::span<const int32_t> rows, const int32_t* offsets, size_t layer,
                      bool cross);  // into groups_
  const float* logits(const int32_t* offsets, size_t n, bool all_positions);
  const float* recompute(std::span<const int32_t> rows);  // Uncached: whole histories
  void gather_cache(std::span<const int32_t> parent);     // reorder, Cached
  BlockScratch scratch(int64_t N, int64_t scores);        // grows the scratch to N rows
  void check_row(int32_t row, const char* op) const;

  const InferenceModel& m_;
  CacheMode mode_;
  int64_t C_, H_, Dh_, F_, V_, L_;
  BlockShape encoder_shape_, decoder_shape_;  // the encoder keeps the training layout
  int64_t R_ = 0, cap_ = 0, B_ = 0, S_ = 0;
  std::vector<int32_t> row_source_, src_len_;
  std::vector<int64_t> len_;                   // processed positions per row
  std::vector<Tensor> k_cache_, v_cache_;      // L × [R, H, Tc, Dh]
  std::vector<Tensor> k_spare_, v_spare_;      // L × [R, H, Tc, Dh], for reorder
  Tensor memory_;                              // [B, S, C] encoder output
  std::vector<Tensor> cross_k_, cross_v_;      // L × [B, H, S, Dh]
  std::vector<std::vector<int32_t>> history_;  // Uncached: every token fed to each row
  std::vector<int64_t> new_len_;
  // Scratch, grown on demand and then reused: no allocation per step.
  Tensor x_, in_, q_, k_, v_, ctx_, out_, hid_, sel_, logits_, scores_;
  std::vector<int32_t> offsets_, flat_;
  std::vector<int64_t> pos_;            // [N] position of each fed token
  std::vector<AttentionGroup> groups_;  // one per row of a call
  AttentionObserver on_attention_;
};

}  // namespace seqtape
