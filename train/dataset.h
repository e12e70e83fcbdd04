#pragma once
// Parallel text (TSV) -> encoded examples -> right-padded batches, for the two model kinds.
//
// Dimension key: B batch size, S longest encoder input in the batch, T longest decoder input
// (encoder-decoder) or longest sequence (decoder-only) in the batch.

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/config.h"  // Arch
#include "nn/batch.h"      // Batch, kIgnoreIndex
#include "tensor/rng.h"
#include "text/text_codec.h"
#include "text/tokenizer.h"

namespace seqtape {

// ---- text ---------------------------------------------------------------------------------

struct TextPair {
  std::string source;
  std::string target;
  int64_t line = 0;  // 1-based line in the file it came from, for error messages
};

// Each non-blank line is `source<TAB>target`. "\r\n" is accepted, a leading UTF-8 byte-order
// mark is skipped, lines that are empty or only spaces are skipped. Errors name "name:line":
// a missing tab, more than one tab, an empty source or target, invalid UTF-8, a stray '\r'.
// A file without any example is an error.
std::vector<TextPair> read_tsv(const std::string& path);
std::vector<TextPair> parse_tsv(std::string_view text, const std::string& name);
// The inverse of read_tsv: `source<TAB>target\n` per pair. A field with a tab or line break, or
// an empty field, is an Error (it would not read back).
void write_tsv(const std::string& path, const std::vector<TextPair>& pairs);

// Several references: consecutive lines with the same source are one source, each line one of
// its references (a G2P word with two pronunciations, a sentence with two translations). Eval
// and periodic evaluation score each source once, against all its lines; training still takes
// every line as an example.
struct SourceGroup {
  size_t first = 0, count = 0;  // pairs[first, first + count)
};
// The runs of equal sources, in order. With `strict` (an evaluation file: eval --data, train
// --valid) a source that comes back after another source is an Error naming name:line of both
// places, since its references would be split in two; without, the runs are taken as they are
// (a part held out of the training data, whose file may repeat a source anywhere).
std::vector<SourceGroup> group_sources(const std::vector<TextPair>& pairs, std::string_view name,
                                       bool strict);
// The targets of a group's lines: its references.
std::vector<std::string> references_of(const std::vector<TextPair>& pairs, const SourceGroup& g);

// A vocabulary with every character of every source and target (see Vocab::build).
Vocab build_vocab(const std::vector<TextPair>& pairs);

// Deterministic split: a seeded shuffle picks which pairs are held out; both parts keep the
// file order. n_valid must leave at least one training pair.
struct TextSplit {
  std::vector<TextPair> train;
  std::vector<TextPair> valid;
};
TextSplit split_validation_count(const std::vector<TextPair>& pairs, size_t n_valid, uint64_t seed);
// n_valid = round(fraction * size); fraction in [0, 1).
TextSplit split_validation_fraction(const std::vector<TextPair>& pairs, double fraction,
                                    uint64_t seed);

// ---- encoded examples -----------------------------------------------------------------------

// Encoder-decoder with teacher forcing, exactly as the reference:
//   enc    = src + <eos>
//   dec_in = <bos> + tgt
//   labels = tgt + <eos>        (dec_in shifted left by one)
// 今天天气很好 -> 今天天气很好 with the reference vocabulary:
//   enc [3,4,4,5,6,7,2]   dec_in [1,3,4,4,5,6,7]   labels [3,4,4,5,6,7,2]
struct Example {
  std::vector<int32_t> enc;
  std::vector<int32_t> dec_in;
  std::vector<int32_t> labels;
};

// Decoder-only (causal LM) on the sequence  src <sep> tgt <eos>:
//   tokens = src <sep> tgt            (the sequence without its last token)
//   labels[i] = the token after tokens[i], or kIgnoreIndex when that next token is part of the
//               prompt (a src token or the <sep>), so the loss covers exactly the tgt tokens and
//               the final <eos>.
// Example, src 今天 = [3,4], tgt 好 = [7], <sep> = 10, <eos> = 2:
//   full sequence [3, 4, 10, 7, 2]
//   tokens        [3, 4, 10, 7]
//   labels        [-100, -100, 7, 2]
// (position 0 would predict 天, position 1 would predict <sep>: both are prompt, ignored;
//  position 2, the <sep>, predicts 好; position 3 predicts <eos>.)
struct LmExample {
  std::vector<int32_t> tokens;
  std::vector<int32_t> labels;
};

// `context` names the pair in errors (e.g. "train.tsv:12"); the column part comes from encode.
// Each takes the character Tokenizer or any TextCodec (a SentencePiece model, text/subword.h).
Example encode_example(const Tokenizer& tok, const TextPair& pair, std::string_view context);
Example encode_example(const TextCodec& tok, const TextPair& pair, std::string_view context);
LmExample encode_lm_example(const Tokenizer& tok, const TextPair& pair, std::string_view context);
LmExample encode_lm_example(const TextCodec& tok, const TextPair& pair, std::string_view context);
// Context of pair i is "name:line" (the pair's file line).
std::vector<Example> encode_examples(const Tokenizer& tok, const std::vector<TextPair>& pairs,
                                     std::string_view name);
std::vector<Example> encode_examples(const TextCodec& tok, const std::vector<TextPair>& pairs,
                                     std::string_view name);
std::vector<LmExample> encode_lm_examples(const Tokenizer& tok, const std::vector<TextPair>& pairs,
                                          std::string_view name);
std::vector<LmExample> encode_lm_examples(const TextCodec& tok, const std::vector<TextPair>& pairs,
                                          std::string_view name);

// Pairs encoded the way an architecture trains on them: Examples (seq2seq) or LmExamples
// (decoder-only). The one place the data side chooses by architecture; the loader and the
// evaluator take it as it is.
struct EncodedPairs {
  bool decoder_only = false;
  std::vector<Example> enc_dec;  // seq2seq
  std::vector<LmExample> lm;     // decoder-only

  size_t size() const { return decoder_only ? lm.size() : enc_dec.size(); }
  // What greedy decoding of pair i starts from: the encoder input src + <eos> (seq2seq) or the
  // prompt src + <sep> (decoder-only).
  std::vector<int32_t> prompt(size_t i) const;
  // What it should produce: the target ids, without <eos>.
  std::vector<int32_t> target(size_t i) const;
};
// Context of pair i is "name:line", as for encode_examples. tok: the model's codec (a
// SentencePiece model reads text its own way; CharCodec for a character vocabulary).
EncodedPairs encode_pairs(Arch arch, const TextCodec& tok, const std::vector<TextPair>& pairs,
                          std::string_view name);

// ---- batches ------------------------------------------------------------------------------

// Batch (nn/batch.h): right-padded, labels kIgnoreIndex where there is no target.
Batch make_batch(const std::vector<Example>& examples, std::span<const uint32_t> index,
                 int32_t pad_id);
Batch make_lm_batch(const std::vector<LmExample>& examples, std::span<const uint32_t> index,
                    int32_t pad_id);
// Rows [begin, end) of a batch, with the batch's padded lengths S and T kept (a data-parallel
// rank's shard of a global batch, train/dist.h); n_label_tokens counts the shard's own labels.
Batch slice_rows(const Batch& b, int64_t begin, int64_t end);
// Every example once, in order, batch_size at a time (the last batch may be smaller):
// for evaluation, where no shuffle and no loader state are wanted.
std::vector<Batch> batches_in_order(const std::vector<Example>& examples, int64_t batch_size,
                                    int32_t pad_id);
std::vector<Batch> lm_batches_in_order(const std::vector<LmExample>& examples, int64_t batch_size,
                                       int32_t pad_id);
std::vector<Batch> batches_in_order(const EncodedPairs& data, int64_t batch_size, int32_t pad_id);

// Everything needed to continue the exact batch sequence after a restart.
struct LoaderState {
  uint64_t epoch = 0;           // index of the current epoch, from 0
  uint64_t cursor = 0;          // examples of `order` already handed out in this epoch
  std::vector<uint32_t> order;  // this epoch's permutation of example positions
  std::string rng_state;        // the generator after drawing `order`
  // Token-budget batching only: where each batch of this epoch ends in `order` (increasing,
  // the last = order.size()); empty with example-count batches.
  std::vector<uint32_t> bounds;
};

struct LoaderOptions {
  int64_t batch_size = 32;
  uint64_t seed = 0;
  bool shuffle = true;  // false: every epoch in example order
  // > 0: token-budget batches instead of batch_size examples. Each epoch shuffles the
  // examples, sorts each pool of `pool` consecutive ones by length (stable; by max(source,
  // target), then source, then target, so that a batch pads neither side), cuts them into
  // batches of at most batch_tokens padded tokens (examples × the longest example's
  // max(source, target) length, as fairseq's --max-tokens; a longer example is a batch alone),
  // and shuffles the batches. The bigger the pool, the less padding: 20,000 holds about a
  // hundred of CMUdict's 2,048-position batches (Marian's maxi-batch is a hundred batches), and
  // padded 3 % of their positions where a pool of 1,000 padded 17 %.
  int64_t batch_tokens = 0;
  int64_t pool = 20000;
};

// Real and padded token positions of the batches handed out (encoder + decoder inputs).
struct PaddingStats {
  int64_t real = 0, padded = 0;
  double fraction() const {
    return padded ? 1.0 - static_cast<double>(real) / static_cast<double>(padded) : 0.0;
  }
};

// Epochs of batches over a fixed example list. Each epoch is a fresh seeded permutation; the
// last batch of an epoch may be smaller. The first epoch's order is drawn at construction.
class DataLoader {
 public:
  DataLoader(std::vector<Example> examples, int32_t pad_id, LoaderOptions opt);
  DataLoader(std::vector<LmExample> examples, int32_t pad_id, LoaderOptions opt);
  DataLoader(EncodedPairs data, int32_t pad_id, LoaderOptions opt);

  // The next batch; when the current epoch is used up, starts the next (reshuffled) one.
  Batch next_batch();

  LoaderState state() const;
  // Error unless order is a permutation of 0..size()-1, cursor <= size() and rng_state parses.
  void set_state(const LoaderState& s);

  size_t size() const { return decoder_only_ ? lm_.size() : enc_dec_.size(); }
  int64_t batches_per_epoch() const;
  uint64_t epoch() const { return epoch_; }
  bool decoder_only() const { return decoder_only_; }
  const PaddingStats& padding() const { return padding_; }

 private:
  void check_options() const;
  void new_order();
  int64_t cost(uint32_t i) const;  // positions example i needs: max(source, target) length
  // The length order of a pool: the cost, then the source and the target length.
  std::array<int64_t, 3> sort_key(uint32_t i) const;

  std::vector<Example> enc_dec_;
  std::vector<LmExample> lm_;
  bool decoder_only_ = false;
  int32_t pad_id_ = 0;
  LoaderOptions opt_;
  Rng rng_;
  uint64_t epoch_ = 0;
  uint64_t cursor_ = 0;
  std::vector<uint32_t> order_;
  std::vector<uint32_t> bounds_;  // token-budget batching: batch ends in order_
  size_t next_bound_ = 0;         // bounds_ index of the next batch
  PaddingStats padding_;
};

// Uniform in [0, n) by rejection on 64-bit draws, so a seed gives the same numbers with any
// standard library (std::uniform_int_distribution is implementation-defined). n > 0.
uint64_t uniform_below(Rng& rng, uint64_t n);
// Fisher-Yates with uniform_below.
void shuffle_in_place(std::vector<uint32_t>& v, Rng& rng);

}  // namespace seqtape
