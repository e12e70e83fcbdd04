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
//   - Self-attention K/V per decoder layer live in slots of [H, Tc, Dh], R of them allocated
//     once in begin(); a call writes the new positions at length(row) onward. A row reads its
//     slot by index (slot_of). reorder() copies a moved row's parent into a free slot (R more
//     are allocated the first time) and points the row at it; rows that stay are not copied.
//   - Sources are encoded together without padding, each attending to itself only; with
//     infer/layers' row-independent matrix products on the Decode layout, a source encodes and a
//     row decodes to the same bits in any batch.
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
#include <string>
#include <vector>

#include "infer/layers.h"
#include "infer/model.h"

namespace seqtape {

enum class CacheMode { Cached, Uncached };

// A call of at least this many FLOPs of matrix products, with at least 8 positions per thread
// (the decoder over several rows, or the encoder over several sources), runs as one part per
// thread of kernels::gemm_nt_rowwise_threads(): each thread runs the whole decoder (encoder) over
// its own rows (sources), with one hand-off per call instead of one per op. The products sum
// each row alone, so a row's bits are the same either way. Set returns the previous value
// (tests lower it to split small models).
double decode_split_min_flops();
double set_decode_split_min_flops(double flops);
int64_t decode_split_calls();  // calls run in parts so far, in this process (for tests)

class DecodeSession {
 public:
  explicit DecodeSession(const InferenceModel& model, CacheMode mode = CacheMode::Cached);

  // Starts R = row_source.size() empty rows; row r belongs to source row_source[r].
  // Seq2Seq: `sources` are the encoder inputs (ids, each 1..max_positions long; a source is
  // usually text + <eos>). DecoderOnly: `sources` must be empty (the prompt is prefilled).
  // capacity: positions a row may process, 1..max_positions.
  void begin(const std::vector<std::vector<int32_t>>& sources, std::vector<int32_t> row_source,
             int64_t capacity);

  // Continuous batching: open() starts an empty session of max_rows rows of up to `capacity`
  // positions each (sources up to max_positions). admit() takes n_rows free rows for one new
  // input — Seq2Seq: encodes `source` alone and projects its cross K/V into a free source slot
  // the rows share; DecoderOnly: `source` must be empty — and returns them, empty (length 0),
  // lowest first. release() gives rows back (the source slot with its last row). Rows that are
  // not admitted cannot be fed. Cached mode only.
  void open(int64_t max_rows, int64_t capacity);
  std::vector<int32_t> admit(const std::vector<int32_t>& source, int64_t n_rows = 1);
  // Several inputs at once (their sources encoded in one pass): input i gets n_rows[i] rows.
  std::vector<std::vector<int32_t>> admit(const std::vector<std::vector<int32_t>>& sources,
                                          std::span<const int64_t> n_rows);
  void release(std::span<const int32_t> rows);
  int64_t free_rows() const { return static_cast<int64_t>(free_rows_.size()); }

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
  // The same for some rows only: rows[i] takes what parents[i] held (< 0: empties it); the
  // other rows keep theirs.
  void reorder(std::span<const int32_t> rows, std::span<const int32_t> parents);
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
  void check_source(const std::vector<int32_t>& s, const std::string& what, const char* op) const;
  void allocate(int64_t rows, int64_t capacity, int64_t sources, int64_t source_positions);
  void encode(const std::vector<std::vector<int32_t>>& sources, std::span<const int64_t> slots,
              bool project);  // into memory_'s slots (and their cross K/V when `project`)
  // Every decoder layer's cross K/V of the sources whose encoder outputs are rows
  // [off[i], off[i+1]) of mem, into source slots slots[i]: one product per matrix.
  void project_cross(const float* mem, std::span<const int64_t> off,
                     std::span<const int64_t> slots);
  void project_all_cross();                   // of every source slot in use
  float* k_slot(size_t layer, int64_t slot);  // [H, Tc, Dh] of a cache slot
  float* v_slot(size_t layer, int64_t slot);
  // Feeds tokens[offsets[i] .. offsets[i+1]) to rows[i] (the decoder over all of them at once).
  const float* extend(std::span<const int32_t> rows, const int32_t* offsets, const int32_t* tokens,
                      bool all_positions);
  void check_feed(std::span<const int32_t> rows, const int32_t* offsets,
                  const int32_t* tokens) const;
  void decoder_groups(std::span<const int32_t> rows, const int32_t* offsets, size_t layer,
                      bool cross, std::vector<AttentionGroup>& groups);
  int64_t split(int64_t N, size_t n, double flops_per_position) const;
  template <typename I>
  void cut_parts(const I* offsets, size_t n, int64_t parts);  // into cut_
  BlockScratch part_scratch(const BlockScratch& s, int64_t r0, int64_t part,
                            int64_t part_scores) const;
  void decode_rows(std::span<const int32_t> rows, size_t i0, size_t i1, const int32_t* offsets,
                   const int32_t* tokens, const BlockScratch& s,
                   std::vector<AttentionGroup>& groups, bool all_positions);
  const float* recompute(std::span<const int32_t> rows);  // Uncached: whole histories
  void move_rows(std::span<const int32_t> rows, std::span<const int32_t> parents);  // Cached
  BlockScratch scratch(int64_t N, int64_t scores);  // grows the scratch to N rows
  void check_row(int32_t row, const char* op) const;

  const InferenceModel& m_;
  CacheMode mode_;
  int64_t C_, H_, Dh_, F_, V_, L_;
  BlockShape encoder_shape_, decoder_shape_;
  int64_t R_ = 0, cap_ = 0, B_ = 0, S_ = 0;  // B_ source slots of S_ positions
  std::vector<int32_t> row_source_, src_len_;
  std::vector<int64_t> len_;                   // processed positions per row
  std::vector<int64_t> slot_;                  // cache slot of each row, in [0, 2R)
  std::vector<Tensor> k_cache_, v_cache_;      // L × [R, H, Tc, Dh]: slots [0, R)
  std::vector<Tensor> k_spare_, v_spare_;      // L × [R, H, Tc, Dh]: slots [R, 2R), for reorder
  Tensor memory_;                              // [B, S, C] encoder output
  std::vector<Tensor> cross_k_, cross_v_;      // L × [B, H, S, Dh]
  std::vector<std::vector<int32_t>> history_;  // Uncached: every token fed to each row
  std::vector<int64_t> new_len_, new_slot_;
  std::vector<uint8_t> slot_used_, row_used_;  // [2R], [R]
  std::vector<int32_t> free_rows_, src_rows_;  // free rows (highest first); rows per source slot
  std::vector<int32_t> all_rows_;              // 0 .. R-1
  bool opened_ = false;                        // open() (admit/release) rather than begin()
  // Scratch, grown on demand and then reused: no allocation per step.
  Tensor x_, in_, q_, k_, v_, ctx_, out_, hid_, sel_, logits_, scores_;
  std::vector<int32_t> offsets_, flat_;
  std::vector<int64_t> pos_;                         // [N] position of each fed token
  std::vector<std::vector<AttentionGroup>> groups_;  // per part of a call: one per row
  std::vector<size_t> cut_;                          // a call's parts: rows [cut_[p], cut_[p+1])
  // FLOPs of the matrix products per position: decoder (fed), encoder, cross K/V projection
  double flops_per_position_ = 0, encoder_flops_ = 0, cross_flops_ = 0;
  AttentionObserver on_attention_;
};

}  // namespace seqtape
