// A tokenizer per side through the real CLI: `train --tgt-tokenizer words` on a small
// grapheme-to-phoneme set, then generate and eval read the choice back from the checkpoint,
// its run directory and its export, reading sources as characters and writing phonemes
// joined by one space.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "fault_util.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "text/tokenizer.h"

namespace seqtape::faults {
namespace {

// Three-letter words over eight letters, each letter one phoneme (upper case, as in CMUdict).
std::string g2p_tsv() {
  const std::vector<std::pair<char, std::string>> sound = {{'a', "AE"}, {'b', "B"}, {'c', "K"},
                                                           {'d', "D"},  {'g', "G"}, {'o', "AA"},
                                                           {'s', "S"},  {'t', "T"}};
  std::string tsv;
  for (size_t i = 0; i < sound.size(); ++i)
    for (size_t j = 0; j < sound.size(); j += 3)
      for (size_t k = 1; k < sound.size(); k += 2) {
        const auto& a = sound[i];
        const auto& b = sound[j];
        const auto& c = sound[k];
        tsv += std::string{a.first, b.first, c.first} + "\t" + a.second + " " + b.second + " " +
               c.second + "\n";
      }
  return tsv;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// Writes g2p.tsv into `dir` and trains the seed model on it with phonemes as words, `steps`
// steps, into run/.
CliResult train_g2p(const TempDir& dir, const std::string& steps) {
  write_file(dir.file("g2p.tsv"), g2p_tsv());
  return run_cli(
      {"train", "--data", "g2p.tsv", "--out", "run", "--preset", "seed", "--steps", steps, "--lr",
       "0.01", "--tgt-tokenizer", "words", "--eval-max", "4", "--no-progress"},
      dir.path().string());
}

TEST(TokenizerSides, WordsOnTheTargetSurviveCheckpointRunDirectoryAndExport) {
  TempDir dir("tokenizer_sides");
  const CliResult tr = train_g2p(dir, "20");
  ASSERT_EQ(tr.exit_code, 0) << tr.out << tr.err;
  EXPECT_HAS(tr.out, "(chars/words)");
  EXPECT_EQ(load_checkpoint(dir.file("run/checkpoint.bin")).tokenizer_kind, "chars/words");
  const Vocab v = Vocab::load(dir.file("run/vocab.txt"));
  EXPECT_TRUE(v.find("AE") && v.find("AA") && v.find("a") && v.find("o"));
  EXPECT_FALSE(v.find("A"));  // no character of a phoneme: the targets are read as words

  const CliResult ex = run_cli({"export", "--model", "run", "--out", "exp"}, dir.path().string());
  ASSERT_EQ(ex.exit_code, 0) << ex.err;
  EXPECT_EQ(read_safetensors(dir.file("exp/model.safetensors")).metadata.at("tokenizer"),
            "chars/words");

  std::string first_text;
  for (const std::string model : {"run/checkpoint.bin", "run", "exp"}) {
    const CliResult g = run_cli({"generate", "--model", model, "--input", "cab", "--json",
                                 "--min-new", "5", "--max-new", "5"},
                                dir.path().string());
    ASSERT_EQ(g.exit_code, 0) << model << ": " << g.err;
    const nlohmann::json j = nlohmann::json::parse(g.out);
    EXPECT_EQ(j.at("unk").get<int64_t>(), 0) << model;  // the source read as characters
    std::string joined;
    for (int32_t id : j.at("tokens").get<std::vector<int32_t>>())
      if (id != v.eos_id()) joined += (joined.empty() ? "" : " ") + v.token(id);
    EXPECT_EQ(j.at("text").get<std::string>(), joined) << model;  // words, one space apart
    if (first_text.empty()) first_text = joined;
    EXPECT_EQ(joined, first_text) << model;
  }

  std::vector<std::string> hyps;
  for (const std::string model : {"run", "exp"}) {
    const std::string out = "hyp_" + std::string(model == "run" ? "run" : "exp") + ".txt";
    const CliResult e =
        run_cli({"eval", "--model", model, "--data", "g2p.tsv", "--out", out}, dir.path().string());
    ASSERT_EQ(e.exit_code, 0) << model << ": " << e.err;
    const std::string text = read_file(dir.file(out));
    if (hyps.empty()) {
      hyps = lines_of(text);
    } else {
      EXPECT_EQ(lines_of(text), hyps);  // the export decodes as the checkpoint does
    }
  }
  ASSERT_FALSE(hyps.empty());
  for (const std::string& h : hyps) {  // every hypothesis: vocabulary tokens, one space apart
    std::istringstream words(h);
    std::string rebuilt;
    for (std::string w; words >> w;) {
      EXPECT_TRUE(v.find(w)) << "'" << w << "' in '" << h << "'";
      rebuilt += (rebuilt.empty() ? "" : " ") + w;
    }
    EXPECT_EQ(rebuilt, h);
  }
}

// eval's --length-penalty reaches its beam search: its hypotheses are generate's with the same
// beam and penalty, source by source, and two penalties rank the beams of this half-trained
// model (120 steps: it spells every source in three phonemes, with errors) differently for
// some sources.
TEST(TokenizerSides, EvalRanksItsBeamsWithTheLengthPenaltyGenerateUses) {
  TempDir dir("eval_length_penalty");
  const CliResult tr = train_g2p(dir, "120");
  ASSERT_EQ(tr.exit_code, 0) << tr.out << tr.err;
  std::vector<std::string> sources;
  for (const std::string& line : lines_of(g2p_tsv())) sources.push_back(line.substr(0, 3));
  std::string stdin_text;
  for (const std::string& s : sources) stdin_text += s + "\n";
  std::vector<std::vector<std::string>> by_penalty;
  for (const std::string alpha : {"0", "2"}) {
    const std::string out = "hyp_" + alpha + ".txt";
    const CliResult e = run_cli({"eval", "--model", "run", "--data", "g2p.tsv", "--beam", "4",
                                 "--length-penalty", alpha, "--out", out, "--json"},
                                dir.path().string());
    ASSERT_EQ(e.exit_code, 0) << e.err;
    EXPECT_EQ(nlohmann::json::parse(e.out).at("length_penalty").get<double>(), std::stod(alpha));
    const CliResult g = run_cli(
        {"generate", "--model", "run", "--beam", "4", "--length-penalty", alpha, "--max-new", "64"},
        dir.path().string(), stdin_text);
    ASSERT_EQ(g.exit_code, 0) << g.err;
    const std::vector<std::string> hyps = lines_of(read_file(dir.file(out)));
    EXPECT_EQ(hyps, lines_of(g.out)) << "--length-penalty " << alpha;
    by_penalty.push_back(hyps);
  }
  EXPECT_NE(by_penalty[0], by_penalty[1]);
}

}  // namespace
}  // namespace seqtape::faults
