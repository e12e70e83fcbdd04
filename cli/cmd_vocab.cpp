// `seqtape vocab`: learn a SentencePiece subword vocabulary from a TSV's two columns.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/output_paths.h"
#include "text/subword.h"
#include "train/dataset.h"

namespace seqtape::cli {

namespace {

struct VocabArgs {
  std::string data, out, type = "unigram";
  int64_t size = 8000;
  int64_t threads = 2;
  bool separate = false, overwrite = false;
};

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Tokens per line, <unk> share and encoding speed of one column: the numbers a user needs to
// judge a vocabulary (and to pick max_positions).
void report_encoding(const char* side, const SubwordTokenizer& tok,
                     const std::vector<std::string>& texts) {
  const auto t0 = std::chrono::steady_clock::now();
  int64_t tokens = 0, unks = 0, longest = 0;
  const int32_t unk = *tok.vocab().unk_id();
  for (const std::string& t : texts) {
    const std::vector<int32_t> ids = tok.encode(t);
    tokens += static_cast<int64_t>(ids.size());
    longest = std::max<int64_t>(longest, static_cast<int64_t>(ids.size()));
    for (int32_t id : ids) unks += id == unk ? 1 : 0;
  }
  const double s = seconds_since(t0);
  std::printf(
      "  %-6s %zu lines, %.2f tokens/line (longest %lld), <unk> %.3f%%, encoded in %.3f s\n", side,
      texts.size(), texts.empty() ? 0.0 : static_cast<double>(tokens) / texts.size(),
      static_cast<long long>(longest), tokens ? 100.0 * unks / tokens : 0.0, s);
}

int run_vocab(const VocabArgs& a) {
  SubwordTrainOptions opt;
  try {
    opt.type = parse_subword_type(a.type);
  } catch (const Error& e) {
    throw UsageError(std::string("--type: ") + e.what());
  }
  if (a.size < 8 || a.size > 1'000'000)
    throw UsageError("--size must be between 8 and 1000000 (got " + std::to_string(a.size) + ")");
  if (a.threads < 1 || a.threads > 256)
    throw UsageError("--threads must be between 1 and 256 (got " + std::to_string(a.threads) + ")");
  opt.vocab_size = static_cast<int32_t>(a.size);
  opt.threads = static_cast<int32_t>(a.threads);

  // Every file a vocabulary directory may hold: --overwrite removes them all.
  for (const char* name : {"spm", "source", "target"})
    for (const char* ext : {".model", ".vocab.tsv"})
      check_not_an_input(
          {"--out", (std::filesystem::path(a.out) / (std::string(name) + ext)).string()},
          {{"--data", a.data}});
  const std::vector<TextPair> pairs = read_tsv(a.data);
  std::vector<std::string> src, tgt;
  src.reserve(pairs.size());
  tgt.reserve(pairs.size());
  for (const TextPair& p : pairs) {
    const std::string line = a.data + ":" + std::to_string(p.line);
    check_subword_sentence(p.source, line + " (source)");
    check_subword_sentence(p.target, line + " (target)");
    src.push_back(p.source);
    tgt.push_back(p.target);
  }
  prepare_subword_dir(a.out, a.overwrite);
  // Learning takes about a minute on 400k pairs: say what is being done before it starts.
  std::printf(
      "learning %s %s vocabular%s of at most %lld pieces from %zu pairs (%s) on %lld "
      "thread(s)...\n",
      a.separate ? "separate" : "a joint", a.type.c_str(), a.separate ? "ies" : "y",
      static_cast<long long>(a.size), pairs.size(), a.data.c_str(),
      static_cast<long long>(a.threads));
  std::fflush(stdout);
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<SubwordTokenizer> source, target;
  if (a.separate) {
    source = std::make_unique<SubwordTokenizer>(
        SubwordTokenizer::train(src, opt, a.data + " (source column)"));
    target = std::make_unique<SubwordTokenizer>(
        SubwordTokenizer::train(tgt, opt, a.data + " (target column)"));
  } else {
    std::vector<std::string> both = src;
    both.insert(both.end(), tgt.begin(), tgt.end());
    source = std::make_unique<SubwordTokenizer>(SubwordTokenizer::train(both, opt, a.data));
  }
  const double train_s = seconds_since(t0);
  const std::vector<std::string> files =
      write_subword_dir(a.out, *source, target.get(), a.overwrite);

  if (a.separate)
    std::printf(
        "learned %s vocabularies: source %d, target %d pieces (asked for at most %lld) "
        "from %zu pairs in %.2f s\n",
        a.type.c_str(), source->size(), target->size(), static_cast<long long>(a.size),
        pairs.size(), train_s);
  else
    std::printf(
        "learned a joint %s vocabulary of %d pieces (asked for at most %lld) from %zu "
        "pairs in %.2f s\n",
        a.type.c_str(), source->size(), static_cast<long long>(a.size), pairs.size(), train_s);
  report_encoding("source", *source, src);
  report_encoding("target", target ? *target : *source, tgt);
  std::printf("wrote");
  for (const std::string& f : files) std::printf(" %s", f.c_str());
  std::printf("\n");
  return kOk;
}

}  // namespace

void register_vocab(CLI::App& app, Runner& run) {
  auto a = std::make_shared<VocabArgs>();
  CLI::App* sub = app.add_subcommand(
      "vocab",
      "Learn a SentencePiece subword vocabulary (unigram, BPE or characters) from both columns "
      "of a TSV, or separate source and target vocabularies");
  sub->footer(
      "Writes into --out: spm.model and spm.vocab.tsv (joint), or source.model, target.model\n"
      "and their .vocab.tsv listings (--separate). The .model files are SentencePiece models;\n"
      "the .vocab.tsv files list id, piece, score and kind for people to read. Special tokens\n"
      "keep seqtape's ids: <pad> 0, <bos> 1, <eos> 2, <unk> 3, <sep> 4.\n"
      "\n"
      "Examples:\n"
      "  seqtape vocab --data datasets/de-en/train.tsv --type unigram --size 8000 --out runs/spm\n"
      "  seqtape vocab --data train.tsv --type bpe --size 4000 --out runs/bpe --separate\n"
      "  seqtape vocab --data train.tsv --type char --size 500 --out runs/chars --overwrite");
  sub->add_option("--data", a->data, "training TSV (source<TAB>target per line)")->required();
  sub->add_option("--out", a->out, "directory for the model(s) and listings")->required();
  sub->add_option("--type", a->type, "unigram, bpe or char")->capture_default_str();
  sub->add_option("--size", a->size,
                  "vocabulary size, special tokens included (an upper bound: a small corpus "
                  "may give fewer pieces)")
      ->capture_default_str();
  sub->add_option("--threads", a->threads,
                  "compute threads SentencePiece learns the vocabulary on (as train's --threads)")
      ->capture_default_str();
  sub->add_flag("--separate", a->separate,
                "learn one vocabulary per column (source.model, target.model)");
  sub->add_flag("--overwrite", a->overwrite, "replace a vocabulary already in --out");
  sub->callback([&run, a] { run = [a] { return run_vocab(*a); }; });
}

}  // namespace seqtape::cli
