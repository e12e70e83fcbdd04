// SentencePiece subword vocabularies: training through the library on a small generated
// corpus, round trips, seqtape's special ids, model bytes, and vocabulary directories.
#include <gtest/gtest.h>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "tests/test_util.h"
#include "text/subword.h"
#include "text/text_codec.h"

namespace seqtape {
namespace {

using test_util::TempDir;

// A deterministic corpus of German compounds with their English words and a Chinese phrase:
// 10 stems give 100 compounds (Haus, Hausgarten, Gartentür, ...), so pieces are shared across
// many distinct words, as in real text (a corpus of a few repeated words gives SentencePiece's
// unigram trainer too few seed pieces to fill a vocabulary).
std::vector<std::string> corpus() {
  const std::vector<std::string> det{"das", "ein", "kein", "mein", "the", "a", "no", "my"};
  const std::vector<std::string> stem{"Haus",   "Garten", "Tür",    "Fenster", "Straße",
                                      "Wasser", "Licht",  "Schule", "Stadt",   "Berg"};
  const std::vector<std::string> lower{"haus",   "garten", "tür",    "fenster", "straße",
                                       "wasser", "licht",  "schule", "stadt",   "berg"};
  const std::vector<std::string> en{"house", "garden", "door",   "window", "street",
                                    "water", "light",  "school", "town",   "mountain"};
  const std::vector<std::string> zh{"今天", "天气很好", "学习"};
  std::vector<std::string> out;
  for (size_t i = 0; i < stem.size(); ++i)
    for (size_t j = 0; j < stem.size(); ++j)
      for (size_t k = 0; k < det.size(); ++k)
        out.push_back(det[k] + " " + stem[i] + (i == j ? "" : lower[j]) + ", " + en[i] + " " +
                      en[j] + "; " + zh[(i + j + k) % zh.size()] + ".");
  return out;
}

const SubwordTokenizer& unigram() {
  static const SubwordTokenizer t = [] {
    SubwordTrainOptions o;
    o.type = SubwordType::kUnigram;
    o.vocab_size = 100;
    return SubwordTokenizer::train(corpus(), o);
  }();
  return t;
}

TEST(Subword, SpecialTokensKeepSeqtapeIds) {
  const Vocab& v = unigram().vocab();
  EXPECT_EQ(v.token(0), "<pad>");
  EXPECT_EQ(v.token(1), "<bos>");
  EXPECT_EQ(v.token(2), "<eos>");
  EXPECT_EQ(v.token(3), "<unk>");
  EXPECT_EQ(v.token(4), "<sep>");
  EXPECT_EQ(v.pad_id(), 0);
  EXPECT_EQ(v.bos_id(), 1);
  EXPECT_EQ(v.eos_id(), 2);
  EXPECT_EQ(v.unk_id(), 3);
  EXPECT_EQ(v.sep_id(), 4);
  EXPECT_EQ(unigram().size(), 100);
  EXPECT_STREQ(unigram().piece_kind(0), "control");
  EXPECT_STREQ(unigram().piece_kind(3), "unknown");
  EXPECT_STREQ(unigram().piece_kind(5), "normal");
}

TEST(Subword, RoundTripsTrainingAndNewText) {
  const SubwordTokenizer& t = unigram();
  for (const std::string& s : corpus()) {
    const std::vector<int32_t> ids = t.encode(s);
    ASSERT_FALSE(ids.empty());
    for (int32_t id : ids) EXPECT_GE(id, 5) << s;  // never a special from ordinary text
    EXPECT_EQ(t.decode(ids), s);
  }
  // Unseen combinations of known characters, with doubled and leading spaces kept.
  for (const std::string s : {"Berghaus, 今天天气很好", "  a  house ", "Lichtlichtlicht"}) {
    EXPECT_EQ(t.decode(t.encode(s)), s);
  }
  // Subwords: a phrase takes fewer pieces than characters.
  const std::string phrase = "das Gartenhaus, garden house";  // 28 characters
  EXPECT_LT(t.encode(phrase).size(), 10u);
}

TEST(Subword, UnknownCharactersAndSpecialsByName) {
  const SubwordTokenizer& t = unigram();
  const std::vector<int32_t> ids = t.encode("Haus 🙂");
  EXPECT_NE(std::find(ids.begin(), ids.end(), 3), ids.end());  // <unk>
  EXPECT_EQ(t.decode(ids), "Haus <unk>");
  // "<sep>" typed in the text is characters, never the control token.
  for (int32_t id : t.encode("a <sep> b")) EXPECT_NE(id, 4);
  // pad/bos/eos are skipped unless kept; <sep> is always written; a run after a special keeps
  // its leading space.
  std::vector<int32_t> seq{1};
  const auto a = t.encode("das Haus"), b = t.encode("the house");
  seq.insert(seq.end(), a.begin(), a.end());
  seq.push_back(4);
  seq.insert(seq.end(), b.begin(), b.end());
  seq.push_back(2);
  seq.push_back(0);
  EXPECT_EQ(t.decode(seq), "das Haus<sep> the house");
  EXPECT_EQ(t.decode(seq, /*keep_specials=*/true), "<bos>das Haus<sep> the house<eos><pad>");
  EXPECT_ERROR_HAS(t.decode(std::vector<int32_t>{5, 100}), "token id 100 outside the vocabulary");
  EXPECT_ERROR_HAS(t.decode(std::vector<int32_t>{-1}), "token id -1");
}

// What a streaming caller shows: token_text of each id, `first` until a text token is shown.
std::string streamed(const TextCodec& c, const std::vector<int32_t>& ids) {
  std::string out;
  bool first = true;
  for (int32_t id : ids) {
    out += c.token_text(id, first);
    first = first && is_control_token(c.vocab(), id);
  }
  return out;
}

TEST(TextCodec, StreamedTokenTextConcatenatesToDecode) {
  const SubwordTokenizer& t = unigram();
  const CharCodec chars(Vocab::build(corpus()));
  for (const TextCodec* c :
       {static_cast<const TextCodec*>(&t), static_cast<const TextCodec*>(&chars)}) {
    const auto a = c->encode("kein Straßenlicht"), b = c->encode("the house 🙂");
    std::vector<std::vector<int32_t>> cases{a, b};
    std::vector<int32_t> mixed{1};  // <bos> a <sep> b <eos>
    mixed.insert(mixed.end(), a.begin(), a.end());
    mixed.push_back(4);
    mixed.insert(mixed.end(), b.begin(), b.end());
    mixed.push_back(2);
    cases.push_back(mixed);
    std::vector<int32_t> sep_first{4};
    sep_first.insert(sep_first.end(), b.begin(), b.end());
    cases.push_back(sep_first);
    for (const auto& ids : cases) EXPECT_EQ(streamed(*c, ids), c->decode(ids)) << c->kind();
  }
  EXPECT_EQ(streamed(t, t.encode("kein Straßenlicht")), "kein Straßenlicht");
  EXPECT_EQ(t.token_text(t.encode("kein")[0], false).front(), ' ');  // the piece is "▁kein"
}

TEST(TextCodec, RebuiltFromCheckpointParts) {
  const auto sp =
      codec_from_parts("sentencepiece", unigram().vocab(), unigram().model_bytes(), "ckpt");
  EXPECT_EQ(sp->kind(), "sentencepiece");
  EXPECT_EQ(sp->encode("das Haus"), unigram().encode("das Haus"));
  const Vocab v = Vocab::build(corpus());
  const auto ch = codec_from_parts("chars", v, "", "ckpt");
  EXPECT_EQ(ch->encode("das Haus"), Tokenizer(v).encode("das Haus"));
  EXPECT_TRUE(ch->model_bytes().empty());
  EXPECT_ERROR_HAS(codec_from_parts("sentencepiece", v, unigram().model_bytes(), "ckpt"),
                   "ckpt: the SentencePiece model's 100 pieces do not match the stored vocabulary");
  EXPECT_ERROR_HAS(codec_from_parts("chars", v, "x", "ckpt"), "a character tokenizer has no model");
  EXPECT_ERROR_HAS(codec_from_parts("wordpiece", v, "", "ckpt"),
                   "unknown tokenizer kind 'wordpiece'");
}

TEST(Subword, BpeAndCharModels) {
  SubwordTrainOptions o;
  o.type = SubwordType::kBpe;
  o.vocab_size = 70;
  const SubwordTokenizer bpe = SubwordTokenizer::train(corpus(), o);
  EXPECT_EQ(bpe.size(), 70);
  o.type = SubwordType::kChar;
  o.vocab_size = 500;  // an upper bound: a character model has as many pieces as characters
  const SubwordTokenizer chr = SubwordTokenizer::train(corpus(), o);
  EXPECT_LT(chr.size(), 500);
  for (const SubwordTokenizer* t : {&bpe, &chr}) {
    for (const std::string& s : corpus()) EXPECT_EQ(t->decode(t->encode(s)), s);
  }
  // Every character piece is one character (or the space mark U+2581 alone).
  for (int32_t id = 5; id < chr.size(); ++id)
    EXPECT_EQ(utf8_decode(chr.vocab().token(id), "piece").size(), 1u) << chr.vocab().token(id);
  EXPECT_EQ(chr.encode("Haus").size(), 5u);  // ▁ H a u s
}

TEST(Subword, TrainingErrorsNameTheData) {
  SubwordTrainOptions o;
  o.vocab_size = 4;
  EXPECT_ERROR_HAS(SubwordTokenizer::train(corpus(), o, "train.tsv"), "train.tsv");
  o.vocab_size = 100;
  EXPECT_ERROR_HAS(SubwordTokenizer::train({}, o, "empty.tsv"), "empty.tsv: no text");
  EXPECT_ERROR_HAS(parse_subword_type("wordpiece"), "'wordpiece' is not one of unigram, bpe, char");
}

TEST(Subword, ModelBytesRebuildTheSameTokenizer) {
  const SubwordTokenizer again = SubwordTokenizer::from_model_bytes(unigram().model_bytes());
  EXPECT_EQ(again.vocab().tokens(), unigram().vocab().tokens());
  for (const std::string& s : corpus()) EXPECT_EQ(again.encode(s), unigram().encode(s));
}

TEST(Subword, MalformedModelBytesAreAClearError) {
  EXPECT_ERROR_HAS(SubwordTokenizer::from_model_bytes("", "ckpt"),
                   "ckpt: SentencePiece model is empty");
  EXPECT_ERROR_HAS(SubwordTokenizer::from_model_bytes("not a model at all", "m.model"),
                   "m.model: not a valid SentencePiece model (18 bytes)");
  const std::string& good = unigram().model_bytes();
  EXPECT_ERROR_HAS(SubwordTokenizer::from_model_bytes(good.substr(0, good.size() / 2), "half"),
                   "half: not a valid SentencePiece model");
  // Every truncation is refused or loads a usable tokenizer; none crashes.
  for (size_t n = 1; n < good.size(); n += 7) {
    try {
      const SubwordTokenizer t = SubwordTokenizer::from_model_bytes(good.substr(0, n), "cut");
      (void)t.decode(t.encode("das Haus"));
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("cut: "), std::string::npos) << e.what();
    }
  }
}

// A model trained by the library directly, with `extra` on top of a tiny default set-up.
std::string foreign_model(std::unordered_map<std::string, std::string> extra) {
  std::unordered_map<std::string, std::string> kw{
      {"model_type", "unigram"}, {"vocab_size", "60"}, {"minloglevel", "2"}};
  kw.insert(extra.begin(), extra.end());
  const std::vector<std::string> texts = corpus();
  struct It : sentencepiece::SentenceIterator {
    const std::vector<std::string>* v;
    size_t i = 0;
    bool done() const override { return i >= v->size(); }
    void Next() override { ++i; }
    const std::string& value() const override { return (*v)[i]; }
    sentencepiece::util::Status status() const override { return {}; }
  } it;
  it.v = &texts;
  std::string bytes;
  EXPECT_TRUE(sentencepiece::SentencePieceTrainer::Train(kw, &it, &bytes).ok());
  return bytes;
}

TEST(Subword, ModelsWithoutSeqtapeSpecialsAreRefused) {
  // The library's defaults: <unk> 0, <s> 1, </s> 2, no padding.
  EXPECT_ERROR_HAS(SubwordTokenizer::from_model_bytes(foreign_model({}), "t5.model"),
                   "t5.model: SentencePiece model lacks seqtape's special token <pad> at id 0");
  // <sep> as a user-defined symbol would let the text "<sep>" produce it.
  EXPECT_ERROR_HAS(
      SubwordTokenizer::from_model_bytes(foreign_model({{"pad_id", "0"},
                                                        {"bos_id", "1"},
                                                        {"eos_id", "2"},
                                                        {"unk_id", "3"},
                                                        {"pad_piece", "<pad>"},
                                                        {"bos_piece", "<bos>"},
                                                        {"eos_piece", "<eos>"},
                                                        {"unk_piece", "<unk>"},
                                                        {"user_defined_symbols", "<sep>"}}),
                                         "user.model"),
      "<sep> is not a control symbol");
}

TEST(SubwordDir, JointAndSeparateLayoutsRoundTrip) {
  TempDir dir("subword");
  const std::string joint = dir.file("joint");
  const auto files = write_subword_dir(joint, unigram(), nullptr, false);
  EXPECT_EQ(files.size(), 2u);
  const SubwordVocabs v = load_subword_dir(joint);
  EXPECT_TRUE(v.joint());
  EXPECT_EQ(v.source->vocab().tokens(), unigram().vocab().tokens());
  const std::string listing = test_util::read_bytes(joint + "/spm.vocab.tsv");
  EXPECT_HAS(listing, "id\tpiece\tscore\tkind\n0\t<pad>\t0\tcontrol\n");
  EXPECT_ERROR_HAS(write_subword_dir(joint, unigram(), nullptr, false),
                   "spm.model: already exists (give --overwrite");

  SubwordTrainOptions o;
  o.type = SubwordType::kBpe;
  o.vocab_size = 60;
  const SubwordTokenizer other = SubwordTokenizer::train(corpus(), o);
  const std::string sep = dir.file("sep");
  write_subword_dir(sep, unigram(), &other, false);
  const SubwordVocabs s = load_subword_dir(sep);
  EXPECT_FALSE(s.joint());
  EXPECT_EQ(s.target->size(), 60);
  // --overwrite switches the layout without leaving the old one behind.
  write_subword_dir(sep, other, nullptr, true);
  EXPECT_EQ(dir.entries().size(), 2u);
  EXPECT_FALSE(std::filesystem::exists(sep + "/source.model"));
  EXPECT_TRUE(load_subword_dir(sep).joint());
}

TEST(SubwordDir, MissingFilesAreAClearError) {
  TempDir dir("subword_bad");
  EXPECT_ERROR_HAS(load_subword_dir(dir.file("nope")), "vocabulary directory does not exist");
  EXPECT_ERROR_HAS(load_subword_dir(dir.file("")),
                   "has no SentencePiece model: expected spm.model");
  test_util::write_bytes(dir.file("source.model"), unigram().model_bytes());
  EXPECT_ERROR_HAS(load_subword_dir(dir.path().string()), "has source.model but not target.model");
  test_util::write_bytes(dir.file("target.model"), "garbage");
  EXPECT_ERROR_HAS(load_subword_dir(dir.path().string()),
                   "target.model: not a valid SentencePiece model");
  test_util::write_bytes(dir.file("spm.model"), unigram().model_bytes());
  EXPECT_ERROR_HAS(load_subword_dir(dir.path().string()), "keep one layout");
  test_util::write_bytes(dir.file("plain"), "x");
  EXPECT_ERROR_HAS(load_subword_dir(dir.file("plain")), "is not a directory");
  EXPECT_ERROR_HAS(SubwordTokenizer::load(dir.file("absent.model")), "cannot open");
}

}  // namespace
}  // namespace seqtape
