// A SentencePiece vocabulary end to end: `train --vocab DIR` trains through the subword codec,
// the checkpoint carries the model bytes, and decoding needs nothing but the checkpoint.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "infer/export.h"
#include "infer/load.h"
#include "infer/model.h"
#include "infer/search.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "tests/test_util.h"
#include "text/subword.h"
#include "train/dataset.h"
#include "train/trainer.h"

namespace seqtape {
namespace {

namespace fs = std::filesystem;
using test_util::TempDir;

// German-English phrase pairs with shared stems, so that a unigram model finds subwords.
std::vector<TextPair> phrase_pairs() {
  const std::vector<std::string> de{"Haus",   "Garten", "Tür",    "Fenster", "Straße",
                                    "Wasser", "Licht",  "Schule", "Stadt",   "Berg"};
  const std::vector<std::string> en{"house", "garden", "door",   "window", "street",
                                    "water", "light",  "school", "town",   "mountain"};
  const std::vector<std::string> det_de{"das", "ein", "kein", "mein"};
  const std::vector<std::string> det_en{"the", "a", "no", "my"};
  std::vector<TextPair> out;
  int64_t line = 1;
  for (size_t i = 0; i < de.size(); ++i)
    for (size_t k = 0; k < det_de.size(); ++k)
      out.push_back({det_de[k] + " " + de[i], det_en[k] + " " + en[i], line++});
  return out;
}

// Writes data.tsv and a joint unigram vocabulary directory `vocab` into `dir`.
SubwordTokenizer write_data_and_vocab(const TempDir& dir) {
  const std::vector<TextPair> pairs = phrase_pairs();
  write_tsv(dir.file("data.tsv"), pairs);
  std::vector<std::string> texts;
  for (const TextPair& p : pairs) {
    texts.push_back(p.source);
    texts.push_back(p.target);
  }
  SubwordTrainOptions so;
  so.type = SubwordType::kUnigram;
  so.vocab_size = 60;
  SubwordTokenizer sp = SubwordTokenizer::train(texts, so, "data.tsv");
  write_subword_dir(dir.file("vocab"), sp, nullptr, false);
  return sp;
}

TrainOptions tiny_options(const TempDir& dir) {
  TrainOptions o;
  o.data = dir.file("data.tsv");
  o.vocab = dir.file("vocab");
  o.out_dir = dir.file("run");
  o.model = preset("seed", 10);  // vocab_size comes from the vocabulary
  o.model.max_positions = 64;
  o.steps = 4;
  o.batch = 8;
  o.schedule.lr = 0.01;
  o.progress = 0;
  o.log_every = 1000;
  o.eval_max = 4;
  return o;
}

TEST(SubwordTraining, CheckpointCarriesTheModelAndGenerateNeedsNothingElse) {
  TempDir dir("subword_train");
  const SubwordTokenizer sp = write_data_and_vocab(dir);
  std::ostringstream log;
  const TrainReport r = train(tiny_options(dir), log);
  ASSERT_EQ(r.losses.size(), 4u);
  EXPECT_NE(log.str().find("tokens (SentencePiece)"), std::string::npos) << log.str();
  EXPECT_TRUE(fs::exists(dir.file("run/spm.model")));
  EXPECT_EQ(test_util::read_bytes(dir.file("run/spm.model")), sp.model_bytes());

  const std::string ckpt_path = dir.file("run/checkpoint.bin");
  const Checkpoint c = load_checkpoint(ckpt_path);
  EXPECT_EQ(c.tokenizer_kind, "sentencepiece");
  EXPECT_EQ(c.tokenizer_model, sp.model_bytes());
  EXPECT_EQ(c.vocab, sp.vocab().tokens());

  // The checkpoint alone: the vocabulary directory and the run's spm.model are gone.
  fs::remove_all(dir.file("vocab"));
  fs::remove(dir.file("run/spm.model"));
  const InferenceModel m = InferenceModel::load(ckpt_path);
  EXPECT_EQ(m.codec().kind(), "sentencepiece");
  const std::vector<int32_t> ids = encode_input(m, m.codec(), "das Haus", "input");
  std::vector<int32_t> want = sp.encode("das Haus");
  want.push_back(sp.vocab().eos_id());
  EXPECT_EQ(ids, want);
  EXPECT_LT(ids.size(), std::string("das Haus").size() + 1);  // subwords, not characters

  GenerateOptions o;
  o.max_new = 12;
  o.suppress_ids = {sp.vocab().eos_id()};  // an undertrained model: make it write 12 tokens
  std::string streamed;
  o.on_stream = [&](const StreamEvent& e) { streamed += e.text; };
  const GenerateResult g = generate(m, {ids}, o).at(0);
  ASSERT_EQ(g.tokens.size(), 12u);
  // The text is the codec's decode of the tokens (no leading space from the first piece), and
  // streaming released exactly that text.
  EXPECT_EQ(g.text, sp.decode(g.tokens));
  EXPECT_EQ(streamed, g.text);

  // Export writes the model next to vocab.txt.
  export_checkpoint(ckpt_path, dir.file("export"));
  EXPECT_EQ(test_util::read_bytes(dir.file("export/spm.model")), sp.model_bytes());

  // --resume rebuilds the codec from the checkpoint (the directory is gone) and continues.
  TrainOptions more = tiny_options(dir);
  more.vocab.clear();
  more.resume = true;
  more.steps = 6;
  const TrainReport r2 = train(more, log);
  EXPECT_EQ(r2.first_step, 5);
  EXPECT_EQ(load_checkpoint(ckpt_path).tokenizer_model, sp.model_bytes());
}

// The checkpoint, its run directory and its export are one model: each reads text through the
// run's SentencePiece model and decodes the same tokens. An export whose spm.model is gone, or
// that holds one its metadata does not name, is an Error, never pieces read as characters.
TEST(SubwordTraining, CheckpointRunDirectoryAndExportReadTextTheSameWay) {
  TempDir dir("subword_load");
  const SubwordTokenizer sp = write_data_and_vocab(dir);
  std::ostringstream log;
  train(tiny_options(dir), log);
  export_checkpoint(dir.file("run/checkpoint.bin"), dir.file("export"));
  const std::string text = "kein Haus";
  std::vector<int32_t> want_ids = sp.encode(text);
  want_ids.push_back(sp.vocab().eos_id());
  ASSERT_NE(want_ids, encode_input(InferenceModel::load(dir.file("run/checkpoint.bin")),
                                   CharCodec(sp.vocab()), text))
      << "the test needs a text the character tokenizer reads differently";
  GenerateOptions o;
  o.max_new = o.min_new = 8;
  std::vector<int32_t> want_tokens;
  for (const std::string path : {"run/checkpoint.bin", "run", "export"}) {
    const InferenceModel m = load_model(dir.file(path));
    EXPECT_EQ(m.codec().kind(), "sentencepiece") << path;
    const std::vector<int32_t> ids = encode_input(m, m.codec(), text);
    EXPECT_EQ(ids, want_ids) << path;
    const GenerateResult r = generate(m, {ids}, o).at(0);
    EXPECT_EQ(r.text, sp.decode(r.tokens)) << path;
    if (want_tokens.empty()) want_tokens = r.tokens;
    EXPECT_EQ(r.tokens, want_tokens) << path;
  }
  const SafetensorsFile st = read_safetensors(dir.file("export/model.safetensors"));
  EXPECT_EQ(st.metadata.at("tokenizer"), "sentencepiece");

  // An export written before the metadata named the tokenizer goes by its spm.model.
  std::map<std::string, std::string> old_meta = st.metadata;
  old_meta.erase("tokenizer");
  write_safetensors(dir.file("export/model.safetensors"), st.tensors, old_meta);
  EXPECT_EQ(load_model(dir.file("export")).codec().kind(), "sentencepiece");
  // Without its spm.model, an export that says it needs one is refused.
  write_safetensors(dir.file("export/model.safetensors"), st.tensors, st.metadata);
  fs::rename(dir.file("export/spm.model"), dir.file("spm.model.away"));
  EXPECT_ERROR_HAS(load_model(dir.file("export")), "spm.model is missing");
  // A character model's export next to a stray spm.model is refused too.
  TrainOptions chars = tiny_options(dir);
  chars.vocab.clear();
  chars.out_dir = dir.file("chars");
  chars.steps = 1;
  train(chars, log);
  export_checkpoint(dir.file("chars/checkpoint.bin"), dir.file("chars_export"));
  EXPECT_EQ(load_model(dir.file("chars_export")).codec().kind(), "chars");
  fs::rename(dir.file("spm.model.away"), dir.file("chars_export/spm.model"));
  EXPECT_ERROR_HAS(load_model(dir.file("chars_export")), "says the model reads characters");
}

TEST(SubwordTraining, CharacterRunsStayCharacterCheckpoints) {
  TempDir dir("subword_chars");
  write_data_and_vocab(dir);
  TrainOptions o = tiny_options(dir);
  o.vocab.clear();  // characters of the data
  o.steps = 2;
  std::ostringstream log;
  train(o, log);
  const Checkpoint c = load_checkpoint(dir.file("run/checkpoint.bin"));
  EXPECT_EQ(c.tokenizer_kind, "chars");
  EXPECT_EQ(c.tokenizer_model, "");
  EXPECT_FALSE(fs::exists(dir.file("run/spm.model")));
  EXPECT_EQ(InferenceModel::load(dir.file("run/checkpoint.bin")).codec().kind(), "chars");
}

TEST(SubwordTraining, SeparateVocabulariesAreRefused) {
  TempDir dir("subword_separate");
  const SubwordTokenizer sp = write_data_and_vocab(dir);
  write_subword_dir(dir.file("sep"), sp, &sp, false);  // source.model + target.model
  TrainOptions o = tiny_options(dir);
  o.vocab = dir.file("sep");
  std::ostringstream log;
  EXPECT_ERROR_HAS(train(o, log), "separate source and target vocabularies");
  EXPECT_FALSE(fs::exists(dir.file("run/checkpoint.bin")));
}

TEST(SubwordTraining, MalformedEmbeddedModelNamesTheCheckpoint) {
  TempDir dir("subword_bad");
  write_data_and_vocab(dir);
  TrainOptions o = tiny_options(dir);
  o.steps = 1;
  std::ostringstream log;
  train(o, log);
  const std::string path = dir.file("run/checkpoint.bin");
  Checkpoint c = load_checkpoint(path);
  c.tokenizer_model = "not a sentencepiece model";
  save_checkpoint(dir.file("bad.bin"), c);
  EXPECT_ERROR_HAS(InferenceModel::load(dir.file("bad.bin")), dir.file("bad.bin"));
  EXPECT_ERROR_HAS(export_checkpoint(dir.file("bad.bin"), dir.file("exp")), dir.file("bad.bin"));
  EXPECT_FALSE(fs::exists(dir.file("exp/model.safetensors")));
  c = load_checkpoint(path);
  c.tokenizer_kind = "wordpiece";
  save_checkpoint(dir.file("kind.bin"), c);
  EXPECT_ERROR_HAS(InferenceModel::load(dir.file("kind.bin")),
                   "unknown tokenizer kind 'wordpiece'");
}

}  // namespace
}  // namespace seqtape
