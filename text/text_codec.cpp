#include "text/text_codec.h"

#include <set>

#include "tensor/tensor.h"  // fail
#include "text/subword.h"

namespace seqtape {

std::string CharCodec::token_text(int32_t id, bool /*first*/) const {
  const Vocab& v = tok_.vocab();
  const std::string& t = v.token(id);  // Error when out of range
  if (id == v.pad_id() || id == v.bos_id() || id == v.eos_id()) return {};
  return t;
}

namespace {

constexpr std::string_view kBlanks = " \t\r\n\v\f";

std::vector<std::string_view> split_words(std::string_view text) {
  std::vector<std::string_view> words;
  for (size_t pos = text.find_first_not_of(kBlanks); pos != std::string_view::npos;) {
    const size_t end = std::min(text.find_first_of(kBlanks, pos), text.size());
    words.push_back(text.substr(pos, end - pos));
    pos = text.find_first_not_of(kBlanks, end);
  }
  return words;
}

bool is_special_name(std::string_view w) {
  return w == kPadToken || w == kBosToken || w == kEosToken || w == kUnkToken || w == kSepToken;
}

// The codec of one side: "chars" (in a SidedCodec, one character per token) or "words".
std::shared_ptr<const TextCodec> side_codec(std::string_view kind, const Vocab& vocab, bool sided,
                                            const std::string& where) {
  if (kind == kCharsCodec) return std::make_shared<const CharCodec>(vocab, sided);
  if (kind == kWordsCodec) return std::make_shared<const WordCodec>(vocab);
  fail(where, "unknown tokenizer '" + std::string(kind) + "' for a side (expected chars or words)");
}

}  // namespace

WordCodec::WordCodec(Vocab vocab) : vocab_(std::move(vocab)) {
  for (int32_t id = 0; id < vocab_.size(); ++id)
    if (!vocab_.is_special(id))
      max_chars_ = std::max(max_chars_, utf8_decode(vocab_.token(id), "token").size());
}

std::vector<int32_t> WordCodec::encode(std::string_view text, std::string_view context) const {
  utf8_decode(text, context);  // an Error naming the first invalid byte
  std::vector<int32_t> ids;
  for (std::string_view w : split_words(text)) {
    std::optional<int32_t> id = is_special_name(w) ? std::nullopt : vocab_.find(w);
    if (!id) id = vocab_.unk_id();
    if (!id)
      fail(std::string(context), "word " + std::to_string(ids.size() + 1) + " '" + std::string(w) +
                                     "' is not in the vocabulary, which has no <unk> (the words "
                                     "tokenizer takes whitespace-separated symbols)");
    ids.push_back(*id);
  }
  return ids;
}

std::string WordCodec::token_text(int32_t id, bool first) const {
  const std::string& t = vocab_.token(id);  // Error when out of range
  if (id == vocab_.pad_id() || id == vocab_.bos_id() || id == vocab_.eos_id()) return {};
  return first ? t : " " + t;
}

std::string WordCodec::decode(std::span<const int32_t> ids, bool keep_specials) const {
  std::string out;
  bool first = true;  // as token_text's: no text token yet, so no space before this one
  for (int32_t id : ids) {
    const std::string& t = vocab_.token(id);
    const bool hidden = id == vocab_.pad_id() || id == vocab_.bos_id() || id == vocab_.eos_id();
    if (hidden && !keep_specials) continue;
    out += first || hidden ? t : " " + t;
    if (!is_control_token(vocab_, id)) first = false;
  }
  return out;
}

SidedCodec::SidedCodec(std::shared_ptr<const TextCodec> source,
                       std::shared_ptr<const TextCodec> target)
    : source_(std::move(source)), target_(std::move(target)) {
  if (source_->vocab().tokens() != target_->vocab().tokens())
    fail("tokenizer", "the source and target tokenizers have different vocabularies");
  kind_ = std::string(source_->kind()) + "/" + std::string(target_->kind());
}

std::string sided_kind(std::string_view source, std::string_view target) {
  for (std::string_view k : {source, target})
    if (k != kCharsCodec && k != kWordsCodec)
      fail("tokenizer", "'" + std::string(k) +
                            "' cannot be chosen for one side: a side reads chars or words "
                            "(SentencePiece, --vocab DIR, is one model for both sides)");
  return source == target ? std::string(source) : std::string(source) + "/" + std::string(target);
}

Vocab build_sided_vocab(std::string_view source_kind, const std::vector<std::string>& sources,
                        std::string_view target_kind, const std::vector<std::string>& targets) {
  std::set<std::string> found;  // byte order: code point order for characters
  auto add = [&](std::string_view kind, const std::vector<std::string>& texts) {
    for (size_t i = 0; i < texts.size(); ++i) {
      if (kind == kWordsCodec) {
        for (std::string_view w : split_words(texts[i]))
          if (!is_special_name(w)) found.emplace(w);  // such a word reads as <unk>
        continue;
      }
      for (char32_t c : utf8_decode(texts[i], "text #" + std::to_string(i + 1)))
        if (c != U'\n' && c != U'\r') found.insert(utf8_encode(c));
    }
  };
  add(source_kind, sources);
  add(target_kind, targets);
  std::vector<std::string> tokens = {std::string(kPadToken), std::string(kBosToken),
                                     std::string(kEosToken), std::string(kUnkToken),
                                     std::string(kSepToken)};
  tokens.insert(tokens.end(), found.begin(), found.end());
  return Vocab::from_tokens(std::move(tokens), "the data's vocabulary");
}

std::shared_ptr<const TextCodec> codec_from_parts(std::string_view kind, const Vocab& vocab,
                                                  std::string model_bytes, std::string_view where) {
  const std::string w(where);
  if (kind == kCharsCodec) {
    if (!model_bytes.empty())
      fail(w, "a character tokenizer has no model, but " + std::to_string(model_bytes.size()) +
                  " model bytes were stored");
    return std::make_shared<const CharCodec>(vocab);
  }
  if (kind == kSentencePieceCodec) {
    auto sp = std::make_shared<const SubwordTokenizer>(
        SubwordTokenizer::from_model_bytes(std::move(model_bytes), w));
    if (sp->vocab().tokens() != vocab.tokens())
      fail(w, "the SentencePiece model's " + std::to_string(sp->size()) +
                  " pieces do not match the stored vocabulary of " + std::to_string(vocab.size()) +
                  " tokens");
    return sp;
  }
  if (kind == kWordsCodec || kind.find('/') != std::string_view::npos) {
    if (!model_bytes.empty())
      fail(w, "a '" + std::string(kind) + "' tokenizer has no model, but " +
                  std::to_string(model_bytes.size()) + " model bytes were stored");
    const size_t slash = kind.find('/');
    if (slash == std::string_view::npos) return side_codec(kind, vocab, false, w);
    return std::make_shared<const SidedCodec>(side_codec(kind.substr(0, slash), vocab, true, w),
                                              side_codec(kind.substr(slash + 1), vocab, true, w));
  }
  fail(w, "unknown tokenizer kind '" + std::string(kind) +
              "' (expected chars, words, sentencepiece or <source>/<target> of chars and words)");
}

}  // namespace seqtape
