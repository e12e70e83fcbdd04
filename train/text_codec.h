#pragma once
// TextCodec: text <-> token ids behind one interface, so that training, `eval`, `generate` and
// checkpoints can take either seqtape's character tokenizer or a SentencePiece model.
//
// Both keep the same special ids contract (Vocab's <pad>/<bos>/<eos>/<unk>/<sep>), the same
// encode contract (ids without <bos>/<eos>; `context` names the text in errors) and the same
// decode contract (<pad>/<bos>/<eos> skipped unless keep_specials; <unk>, <sep> by name).
//
// A checkpoint that stores kind() and model_bytes() next to the vocabulary can rebuild its
// codec with codec_from_parts(); the character codec has no model bytes (its vocabulary is all).

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "train/tokenizer.h"

namespace seqtape {

class TextCodec {
 public:
  virtual ~TextCodec() = default;
  virtual std::vector<int32_t> encode(std::string_view text,
                                      std::string_view context = "text") const = 0;
  virtual std::string decode(std::span<const int32_t> ids, bool keep_specials = false) const = 0;
  // The text one generated token adds when streamed; `first` says no text token came before
  // it (see is_control_token; SentencePiece drops the space its first piece starts with, as
  // decode() does). Concatenating token_text over any ids gives decode(ids).
  virtual std::string token_text(int32_t id, bool first) const = 0;
  virtual const Vocab& vocab() const = 0;
  virtual std::string_view kind() const = 0;  // "chars" or "sentencepiece"
  // What a checkpoint must carry besides the vocabulary to rebuild the codec ("" for chars).
  virtual const std::string& model_bytes() const = 0;
  // The longest token, in characters: N characters of text cannot encode to fewer than
  // N / max_token_chars() tokens, so an input can be refused as too long before it is encoded.
  // For a SentencePiece model this is the longest piece; a run of unknown characters, which it
  // encodes as one <unk>, is the exception, and is refused as too long instead of encoded.
  virtual size_t max_token_chars() const = 0;
};

// <pad>, <bos>, <eos>, <sep>: tokens that are never text. When streaming, `first` of
// token_text is true until a token that is not one of these has been shown.
inline bool is_control_token(const Vocab& v, int32_t id) {
  return id == v.pad_id() || id == v.bos_id() || id == v.eos_id() || v.maybe_sep_id() == id;
}

inline constexpr std::string_view kCharsCodec = "chars";
inline constexpr std::string_view kSentencePieceCodec = "sentencepiece";

// seqtape's character (longest-match) Tokenizer as a TextCodec, behaviour unchanged.
class CharCodec final : public TextCodec {
 public:
  explicit CharCodec(Vocab vocab) : tok_(std::move(vocab)) {}
  std::vector<int32_t> encode(std::string_view text, std::string_view context) const override {
    return tok_.encode(text, context);
  }
  std::string decode(std::span<const int32_t> ids, bool keep_specials) const override {
    return tok_.decode(ids, keep_specials);
  }
  std::string token_text(int32_t id, bool first) const override;
  const Vocab& vocab() const override { return tok_.vocab(); }
  std::string_view kind() const override { return kCharsCodec; }
  const std::string& model_bytes() const override { return no_bytes_; }
  size_t max_token_chars() const override { return tok_.max_token_chars(); }
  const Tokenizer& tokenizer() const { return tok_; }

 private:
  Tokenizer tok_;
  std::string no_bytes_;
};

// From what a checkpoint stores: the kind, the vocabulary and the model bytes. For
// "sentencepiece" the model's pieces must equal `vocab` (an Error naming `where` otherwise);
// an unknown kind is an Error.
std::shared_ptr<const TextCodec> codec_from_parts(std::string_view kind, const Vocab& vocab,
                                                  std::string model_bytes, std::string_view where);

}  // namespace seqtape
