#include "train/text_codec.h"

#include "autograd/tensor.h"  // fail
#include "train/subword.h"

namespace seqtape {

std::string CharCodec::token_text(int32_t id, bool /*first*/) const {
  const Vocab& v = tok_.vocab();
  const std::string& t = v.token(id);  // Error when out of range
  if (id == v.pad_id() || id == v.bos_id() || id == v.eos_id()) return {};
  return t;
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
  fail(w, "unknown tokenizer kind '" + std::string(kind) + "' (expected chars or sentencepiece)");
}

}  // namespace seqtape
