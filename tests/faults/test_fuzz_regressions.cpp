// Every input under fuzz/regressions/<target>/ (each once crashed a fuzz target or broke one of
// its round trips) and every seed under fuzz/corpus/<target>/ goes through the same code as
// the fuzz target: it must be accepted or rejected with the documented exception, nothing else.

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>

#include "fault_util.h"
#include "fuzz/fuzz_targets.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "text/subword.h"
#include "text/tokenizer.h"
#include "train/dataset.h"

namespace seqtape::faults {
namespace {

using Target = std::function<void(std::string_view)>;

const std::vector<std::pair<std::string, Target>>& targets() {
  static const std::vector<std::pair<std::string, Target>> t = {
      {"checkpoint", fuzz::checkpoint_input},
      {"safetensors", fuzz::safetensors_input},
      {"vocab", fuzz::vocab_input},
      {"subword", fuzz::subword_input},
      {"tsv", fuzz::tsv_input},
      {"config", fuzz::config_input}};
  return t;
}

std::vector<fs::path> files_under(const fs::path& dir) {
  std::vector<fs::path> out;
  if (!fs::exists(dir)) return out;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.is_regular_file()) out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

int replay(const std::string& folder, const std::string& target, const Target& fn) {
  int n = 0;
  for (const fs::path& p : files_under(fs::path(SEQTAPE_SOURCE_DIR) / "fuzz" / folder / target)) {
    SCOPED_TRACE(p.string());
    const std::string bytes = read_file(p.string());
    EXPECT_NO_THROW(fn(bytes));
    ++n;
  }
  return n;
}

TEST(FuzzRegressions, EveryCommittedCrashInputIsHandled) {
  int n = 0;
  for (const auto& [name, fn] : targets()) n += replay("regressions", name, fn);
  EXPECT_GE(n, 4) << "fuzz/regressions/ holds fewer inputs than were committed";
}

TEST(FuzzRegressions, EverySeedIsHandled) {
  for (const auto& [name, fn] : targets())
    EXPECT_GT(replay("corpus", name, fn), 0) << "no seeds for fuzz target " << name;
}

// The specific findings, asserted on their own so a failure says which one came back.

// A zero dimension made the loaders skip the size check, and Tensor::empty then multiplied
// the other, huge, dimensions: signed overflow (UBSan) on a crafted file with a valid checksum.
TEST(FuzzRegressions, EmptyTensorWithOverflowingShapeIsAnError) {
  const fs::path dir = fs::path(SEQTAPE_SOURCE_DIR) / "fuzz" / "regressions";
  const std::string ckpt =
      read_file((dir / "checkpoint" / "empty_tensor_overflowing_shape.ckpt").string());
  EXPECT_THROW(load_checkpoint_from_memory(ckpt, "regression.ckpt"), Error);
  const std::string st =
      read_file((dir / "safetensors" / "empty_tensor_overflowing_shape.safetensors").string());
  try {
    read_safetensors_from_memory(st, "regression.safetensors");
    FAIL() << "accepted a [2^62, 2^62, 0] tensor";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("too many elements"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Tensor::empty({int64_t{1} << 62, int64_t{1} << 62, 0}, DType::F32), Error);
  EXPECT_THROW(Tensor::empty({int64_t{1} << 61}, DType::F64), Error);  // nbytes would wrap
  EXPECT_EQ(Tensor::empty({5, 0, 7}, DType::F32).numel(), 0);
}

// write_tsv and Vocab::save lost a U+FEFF at the start of the first field/token: the reader
// drops one byte-order mark, so the writer must add one in front of such a field.
TEST(FuzzRegressions, LeadingByteOrderMarkSurvivesWriteAndRead) {
  TempDir dir("fuzzreg");
  const std::string bom = "\xEF\xBB\xBF";
  const std::vector<TextPair> pairs = {{bom + "a", "b", 1}, {"c", bom, 2}};
  write_tsv(dir.file("t.tsv"), pairs);
  const auto back = read_tsv(dir.file("t.tsv"));
  ASSERT_EQ(back.size(), 2u);
  EXPECT_EQ(back[0].source, bom + "a");
  EXPECT_EQ(back[1].target, bom);

  const Vocab v = Vocab::from_tokens({bom + "x", "<pad>", "<bos>", "<eos>"});
  v.save(dir.file("v.txt"));
  EXPECT_EQ(Vocab::load(dir.file("v.txt")).tokens(), v.tokens());
}

// SentencePiece's trie builder threw its own exception (not a Status) on a model with a
// zero-length piece; it escaped as an internal error (exit 4). Found by fuzz_subword.
TEST(FuzzRegressions, SentencePieceModelWithAZeroLengthPieceIsAnError) {
  const fs::path dir = fs::path(SEQTAPE_SOURCE_DIR) / "fuzz" / "regressions";
  const std::string bytes = read_file((dir / "subword" / "zero_length_piece.model").string());
  try {
    SubwordTokenizer::from_model_bytes(bytes, "regression.model");
    FAIL() << "accepted a model with a zero-length piece";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a valid SentencePiece model"), std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("regression.model"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace seqtape::faults
