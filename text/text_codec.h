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

#include "text/tokenizer.h"

namespace seqtape {

class TextCodec {
 public:
  virtual ~TextCodec() = default;
  // A source (an input); encode_target: a target. They differ only when the sides have their
  // own tokenizers (SidedCodec); decode() and token_text() write targets (the outputs).
  virtual std::vector<int32_t> encode(std::string_view text,
                                      std::string_view context = "text") const = 0;
  virtual std::vector<int32_t> encode_target(std::string_view text,
                                             std::string_view context = "text") const {
    return encode(text, context);
  }
  virtual std::string decode(std::span<const int32_t> ids, bool keep_specials = false) const = 0;
  // The text one generated token adds when streamed; `first` says no text token came before
  // it (see is_control_token; SentencePiece drops the space its first piece starts with, as
  // decode() does). Concatenating token_text over any ids gives decode(ids).
  virtual std::string token_text(int32_t id, bool first) const = 0;
  virtual const Vocab& vocab() const = 0;
  // "chars", "words", "sentencepiece", or "<source>/<target>" (SidedCodec)
  virtual std::string_view kind() const = 0;
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
inline constexpr std::string_view kWordsCodec = "words";

// seqtape's character (longest-match) Tokenizer as a TextCodec, behaviour unchanged.
class CharCodec final : public TextCodec {
 public:
  // single_characters: see Tokenizer (the character side of a SidedCodec).
  explicit CharCodec(Vocab vocab, bool single_characters = false)
      : tok_(std::move(vocab), single_characters) {}
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

// Whitespace-separated symbols (phonemes, say), each one token of the vocabulary: encode splits
// at runs of spaces and tabs and looks each word up (a word that is no token, or that spells a
// special name, is <unk> if the vocabulary has one, else an Error naming the context and the
// word); decode joins the words with one space.
class WordCodec final : public TextCodec {
 public:
  explicit WordCodec(Vocab vocab);
  std::vector<int32_t> encode(std::string_view text, std::string_view context) const override;
  std::string decode(std::span<const int32_t> ids, bool keep_specials) const override;
  std::string token_text(int32_t id, bool first) const override;
  const Vocab& vocab() const override { return vocab_; }
  std::string_view kind() const override { return kWordsCodec; }
  const std::string& model_bytes() const override { return no_bytes_; }
  // The longest word and the space after it: a text of N characters holds at least
  // N / (longest + 1) words, unless it is mostly runs of spaces (refused as too long then).
  size_t max_token_chars() const override { return max_chars_ + 1; }

 private:
  Vocab vocab_;
  size_t max_chars_ = 1;
  std::string no_bytes_;
};

// A tokenizer per side over one vocabulary (the model shares its embedding between the sides):
// the source's encodes inputs, the target's encodes targets and writes outputs. Its kind is
// "<source>/<target>", e.g. "chars/words" for grapheme-to-phoneme; a checkpoint stores it so.
class SidedCodec final : public TextCodec {
 public:
  SidedCodec(std::shared_ptr<const TextCodec> source, std::shared_ptr<const TextCodec> target);
  std::vector<int32_t> encode(std::string_view text, std::string_view context) const override {
    return source_->encode(text, context);
  }
  std::vector<int32_t> encode_target(std::string_view text,
                                     std::string_view context) const override {
    return target_->encode(text, context);
  }
  std::string decode(std::span<const int32_t> ids, bool keep_specials) const override {
    return target_->decode(ids, keep_specials);
  }
  std::string token_text(int32_t id, bool first) const override {
    return target_->token_text(id, first);
  }
  const Vocab& vocab() const override { return source_->vocab(); }
  std::string_view kind() const override { return kind_; }
  const std::string& model_bytes() const override { return no_bytes_; }
  size_t max_token_chars() const override { return source_->max_token_chars(); }

 private:
  std::shared_ptr<const TextCodec> source_, target_;
  std::string kind_, no_bytes_;
};

// The kind a checkpoint stores for a tokenizer per side: "chars", "words" when both sides are
// the same, else "<source>/<target>". Each side is chars or words (SentencePiece is one joint
// model for both sides); an Error naming the choice otherwise.
std::string sided_kind(std::string_view source, std::string_view target);
// A vocabulary learned from data for the sides' tokenizers: <pad> <bos> <eos> <unk> <sep>, then
// the characters of the chars sides and the words of the words sides, in byte order (code point
// order for characters, as Vocab::build).
Vocab build_sided_vocab(std::string_view source_kind, const std::vector<std::string>& sources,
                        std::string_view target_kind, const std::vector<std::string>& targets);

// From what a checkpoint stores: the kind, the vocabulary and the model bytes. For
// "sentencepiece" the model's pieces must equal `vocab` (an Error naming `where` otherwise);
// "words" and "<source>/<target>" (SidedCodec) have no model bytes; an unknown kind is an Error.
std::shared_ptr<const TextCodec> codec_from_parts(std::string_view kind, const Vocab& vocab,
                                                  std::string model_bytes, std::string_view where);

}  // namespace seqtape
