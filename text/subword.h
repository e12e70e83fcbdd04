#pragma once
// Subword vocabularies with SentencePiece (Debian libsentencepiece-dev): trained, encoded and
// decoded by the library, never re-implemented here.
//
// Special tokens keep seqtape's ids and names (Vocab::build's order): <pad> 0, <bos> 1,
// <eos> 2, <unk> 3, <sep> 4. <pad>/<bos>/<eos>/<sep> are SentencePiece control symbols, so
// text never produces them ("<sep>" typed in the text is five characters, as with the
// character tokenizer); <unk> is what a character outside the model becomes, and decodes as
// "<unk>". Normalization is "identity" with whitespace kept as it is, so decode(encode(t)) == t
// for any text made of characters the model knows.
//
// A SubwordTokenizer is fully described by its model bytes (the serialized ModelProto):
// a checkpoint can carry them and rebuild the tokenizer with from_model_bytes().
//
// A vocabulary directory, as `seqtape vocab` writes it, holds either one joint model
//   spm.model, spm.vocab.tsv
// or a source and a target model (--separate)
//   source.model, source.vocab.tsv, target.model, target.vocab.tsv
// The .vocab.tsv files are for people (id, piece, score, kind); only .model files are read.

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "text/text_codec.h"
#include "text/tokenizer.h"  // Vocab, the special token names

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace seqtape {

enum class SubwordType { kUnigram, kBpe, kChar };
SubwordType parse_subword_type(std::string_view name);  // "unigram" | "bpe" | "char"
const char* subword_type_name(SubwordType t);

// The longest sentence SentencePiece learns from, in bytes (its max_sentence_length, given
// explicitly). The library skips longer ones silently, and stops on an internal assertion when
// none is left: check_subword_sentence refuses one first.
inline constexpr size_t kMaxSubwordSentenceBytes = 4192;
// An Error naming `where` ("train.tsv:3 (source)") when `text` is longer than that.
void check_subword_sentence(std::string_view text, const std::string& where);

struct SubwordTrainOptions {
  SubwordType type = SubwordType::kUnigram;
  int32_t vocab_size = 8000;  // an upper bound: a small corpus may give fewer pieces
  int32_t threads = 2;
};

class SubwordTokenizer final : public TextCodec {
 public:
  // Trains on `texts` (one sentence each) in memory. An Error names `where` and carries the
  // library's message (e.g. too few distinct characters for the requested size).
  static SubwordTokenizer train(const std::vector<std::string>& texts,
                                const SubwordTrainOptions& opt, std::string_view where = "texts");
  // From serialized model bytes (a .model file's content, or a checkpoint's copy). Malformed
  // bytes, or a model without seqtape's special tokens at their ids, are an Error naming `where`.
  static SubwordTokenizer from_model_bytes(std::string bytes, std::string_view where = "model");
  static SubwordTokenizer load(const std::string& path);  // a .model file

  SubwordTokenizer(SubwordTokenizer&&) noexcept;
  SubwordTokenizer& operator=(SubwordTokenizer&&) noexcept;
  ~SubwordTokenizer() override;

  // The same contract as Tokenizer: ids without <bos>/<eos> (the caller adds them); `context`
  // names the text in errors ("data.tsv:12").
  std::vector<int32_t> encode(std::string_view text,
                              std::string_view context = "text") const override;
  // <pad>, <bos>, <eos> are skipped unless keep_specials; <unk> and <sep> are written by name.
  // An id outside the vocabulary is an Error.
  // The dummy-prefix space of the first ordinary piece is dropped (specials before it do not
  // count), as the library does for a whole text.
  std::string decode(std::span<const int32_t> ids, bool keep_specials = false) const override;
  // The text one token adds when streamed: the piece with U+2581 as a space, without that
  // leading space when `first` (no ordinary piece before it); "" for <pad>/<bos>/<eos>.
  std::string token_text(int32_t id, bool first) const override;

  // Pieces in id order as a seqtape Vocab (special tokens by their seqtape names), so code
  // that needs only ids, sizes and special ids works unchanged.
  const Vocab& vocab() const override { return vocab_; }
  int32_t size() const { return vocab_.size(); }
  std::string_view kind() const override { return kSentencePieceCodec; }
  const std::string& model_bytes() const override { return model_bytes_; }
  size_t max_token_chars() const override { return max_piece_chars_; }
  float score(int32_t id) const;
  // "normal", "unknown", "control" (pad/bos/eos/sep), "byte", "unused".
  const char* piece_kind(int32_t id) const;
  // id, piece, score, kind, tab-separated, one line per piece, with a header line.
  std::string listing() const;

 private:
  size_t max_piece_chars_ = 1;  // the longest piece, in characters (▁ counts as one)
  SubwordTokenizer();
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  std::string model_bytes_;
  Vocab vocab_;
};

// ---- vocabulary directories ----------------------------------------------------------------

inline constexpr std::string_view kJointModelFile = "spm.model";
inline constexpr std::string_view kSourceModelFile = "source.model";
inline constexpr std::string_view kTargetModelFile = "target.model";

struct SubwordVocabs {
  std::shared_ptr<const SubwordTokenizer> source, target;  // the same object when joint
  bool joint() const { return source == target; }
};

// Reads a directory written by write_subword_dir. A missing directory, a directory with
// neither layout, or with only one of source.model/target.model is an Error that names what
// was expected.
SubwordVocabs load_subword_dir(const std::string& dir);
// Creates `dir` if needed and throws the Error write_subword_dir would before writing (a file
// in the way, a directory that cannot be made, or model files there and no `overwrite`):
// called before a minute of learning, not after.
void prepare_subword_dir(const std::string& dir, bool overwrite);
// Writes the model(s) and the human-readable listings into `dir` (created if needed). With
// `target` null the model is joint. Existing model files are an Error unless `overwrite`.
// Returns the paths written.
std::vector<std::string> write_subword_dir(const std::string& dir, const SubwordTokenizer& source,
                                           const SubwordTokenizer* target, bool overwrite);

}  // namespace seqtape
