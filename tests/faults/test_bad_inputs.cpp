// Bad input across the CLI: every row of docs/bad_inputs.md is one test here. Each runs the real
// `seqtape` binary in a directory of prepared bad files and checks the exit-code class (2 usage,
// 3 data, never 4 internal or a crash) and that the message names what is wrong.
//
// Regenerate the table after changing a message (from the repository root):
//   SEQTAPE_BAD_INPUTS_DOC=docs/bad_inputs.md build/tests/faults/test_faults
//   --gtest_filter=BadInputsDoc.*

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <sstream>

#include "fault_util.h"
#include "train/checkpoint.h"
#include "train/copy_task.h"
#include "train/tokenizer.h"
#include "train/trainer.h"

namespace seqtape::faults {
namespace {

// One directory per test process with good data, a good checkpoint, and the bad files.
class Workspace {
 public:
  static const Workspace& get() {
    static const Workspace w;
    return w;
  }
  std::string dir() const { return dir_.path().string(); }

 private:
  Workspace() {
    write_small_copy_task(dir_, 40, 1);
    TrainOptions o = seed_training(dir_, "run", 2);
    o.eval_max = 1;
    std::ostringstream log;
    train(o, log);
    const std::string good = read_file(dir_.file("run/checkpoint.bin"));

    auto put = [&](const std::string& name, std::string_view bytes) {
      write_file(dir_.file(name), bytes);
    };
    // TSV data.
    put("bad/empty.tsv", "");
    put("bad/blank_lines.tsv", "\n   \n\r\n");
    put("bad/invalid_utf8.tsv", "今天\t今天\n\xff好\t好\n");
    put("bad/overlong_utf8.tsv", "\xc0\xaf\ta\n");
    put("bad/no_tab.tsv", "今天\t今天\n今天今天\n");
    put("bad/two_tabs.tsv", "今\t天\t气\n");
    put("bad/empty_source.tsv", "\t今\n");
    put("bad/empty_target.tsv", "今\t\n");
    put("bad/stray_cr.tsv", "今\r天\t今天\n");
    put("bad/unknown_char.tsv", "今天好\t今天\n");
    put("bad/binary.tsv", std::string("\x7f"
                                      "ELF\x02\x01\x01\0\0\0",
                                      10));
    // Vocabularies.
    put("bad/vocab_no_unk.txt", "<pad>\n<bos>\n<eos>\n今\n天\n");
    put("bad/vocab_no_eos.txt", "<pad>\n<bos>\n今\n天\n");
    put("bad/vocab_duplicate.txt", "<pad>\n<bos>\n<eos>\n今\n今\n");
    put("bad/vocab_empty.txt", "");
    put("bad/vocab_blank_line.txt", "<pad>\n\n<bos>\n<eos>\n");
    put("bad/vocab_invalid_utf8.txt", "<pad>\n<bos>\n<eos>\n\xed\xa0\x80\n");
    // Model configurations.
    put("bad/config_not_json.json", "{\"d_model\": 8,");
    put("bad/config_unknown_key.json", R"({"vocab_size": 10, "colour": "red"})");
    put("bad/config_wrong_type.json", R"({"vocab_size": 10, "d_model": "wide"})");
    put("bad/config_bad_heads.json", R"({"vocab_size": 10, "d_model": 6, "n_heads": 4})");
    put("bad/config_array.json", "[1, 2]");
    put("bad/config_huge_number.json", R"({"vocab_size": 10, "d_model": 1e999})");

    // Checkpoints, each in its own run directory so `train --resume --out` finds it.
    auto ckpt = [&](const std::string& name, std::string_view bytes) {
      put("ck_" + name + "/checkpoint.bin", bytes);
    };
    ckpt("truncated", good.substr(0, good.size() / 2));
    ckpt("header_only", good.substr(0, 20));
    ckpt("empty", "");
    std::string flipped = good;
    flipped[flipped.size() / 2] ^= 0x01;
    ckpt("bit_flip", flipped);
    std::string future = good;
    future[8] = 2;  // format version 2
    ckpt("future_version", future);
    std::string kind = good;
    kind[12] = 9;  // envelope kind 9
    ckpt("other_kind", kind);
    ckpt("not_a_checkpoint", read_file(dir_.file("data/train.tsv")));
    ckpt("trailing_bytes", good + "junk");
    ckpt("good", good);

    const Checkpoint c = load_checkpoint(dir_.file("run/checkpoint.bin"));
    auto save_as = [&](const std::string& name, const Checkpoint& x) {
      fs::create_directories(dir_.path() / ("ck_" + name));
      save_checkpoint(dir_.file("ck_" + name + "/checkpoint.bin"), x);
    };
    Checkpoint other = c;  // a checkpoint of a wider model than its weights
    auto cfg = nlohmann::json::parse(other.config_json);
    cfg["d_model"] = 8;
    cfg["n_heads"] = 2;
    other.config_json = cfg.dump();
    save_as("other_model", other);
    Checkpoint missing = c;
    missing.params.pop_back();
    save_as("missing_param", missing);
    Checkpoint nan = c;
    nan.params[1].value = nan.params[1].value.clone();
    nan.params[1].value.set(0, std::nan(""));
    save_as("nan_weight", nan);
    Checkpoint badcfg = c;
    badcfg.config_json = "{\"d_model\": ";
    save_as("bad_config", badcfg);
    Checkpoint vocab = c;
    vocab.vocab.pop_back();
    save_as("vocab_mismatch", vocab);

    put("a_file", "not a directory\n");
  }

  TempDir dir_{"badinput"};
};

struct Row {
  const char* id;
  const char* what;  // the bad input, for the table
  std::vector<std::string> args;
  int exit_code;
  std::vector<std::string> words;  // each must appear in stderr
};

// Shorthands for the commands most rows start from.
std::vector<std::string> train_with(std::vector<std::string> extra) {
  std::vector<std::string> a = {"train",    "--data",       "data/train.tsv", "--out", "out",
                                "--preset", "seed",         "--steps",        "2",     "--eval-max",
                                "1",        "--no-progress"};
  // A later --data/--out replaces the default one.
  for (size_t i = 0; i + 1 < extra.size(); ++i) {
    for (const char* f : {"--data", "--out", "--preset", "--steps", "--eval-max"}) {
      if (extra[i] != f) continue;
      for (size_t j = 1; j + 1 < a.size(); ++j)
        if (a[j] == f) {
          a.erase(a.begin() + static_cast<long>(j), a.begin() + static_cast<long>(j) + 2);
          break;
        }
    }
  }
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}
std::vector<std::string> resume_from(const std::string& ck) {
  return {"train",      "--data", "data/train.tsv", "--out",   "ck_" + ck, "--steps", "4",
          "--eval-max", "1",      "--no-progress",  "--resume"};
}
std::vector<std::string> export_from(const std::string& ck) {
  return {"export", "--model", "ck_" + ck + "/checkpoint.bin", "--out", "exported"};
}
std::vector<std::string> generate_from(const std::string& ck) {
  return {"generate", "--model", "ck_" + ck + "/checkpoint.bin", "--input", "今天"};
}

constexpr int kUsage = 2, kData = 3;

const std::vector<Row>& rows() {
  static const std::vector<Row> r = {
      // ---- general ---------------------------------------------------------------------------
      {"no_subcommand", "no subcommand", {}, kUsage, {"subcommand"}},
      {"unknown_subcommand",
       "unknown subcommand",
       {"fly"},
       kUsage,
       {"unknown subcommand 'fly'", "generate"}},
      {"unknown_flag", "unknown flag", train_with({"--speed", "9"}), kUsage, {"--speed"}},
      // ---- train: data files -----------------------------------------------------------------
      {"train_missing_data",
       "--data file does not exist",
       train_with({"--data", "nope.tsv"}),
       kData,
       {"nope.tsv", "does not exist"}},
      {"train_data_is_dir",
       "--data is a directory",
       train_with({"--data", "data"}),
       kData,
       {"data", "directory"}},
      {"train_empty_data",
       "empty TSV",
       train_with({"--data", "bad/empty.tsv"}),
       kData,
       {"bad/empty.tsv", "no examples"}},
      {"train_blank_data",
       "TSV of blank lines only",
       train_with({"--data", "bad/blank_lines.tsv"}),
       kData,
       {"bad/blank_lines.tsv", "no examples"}},
      {"train_invalid_utf8",
       "invalid UTF-8 byte",
       train_with({"--data", "bad/invalid_utf8.tsv"}),
       kData,
       {"bad/invalid_utf8.tsv:2", "invalid UTF-8"}},
      {"train_overlong_utf8",
       "overlong UTF-8 encoding",
       train_with({"--data", "bad/overlong_utf8.tsv"}),
       kData,
       {"bad/overlong_utf8.tsv:1", "invalid UTF-8", "overlong"}},
      {"train_binary_data",
       "a binary file as --data",
       train_with({"--data", "bad/binary.tsv"}),
       kData,
       {"bad/binary.tsv:1"}},
      {"train_no_tab",
       "line without a tab",
       train_with({"--data", "bad/no_tab.tsv"}),
       kData,
       {"bad/no_tab.tsv:2", "no tab"}},
      {"train_two_tabs",
       "line with two tabs",
       train_with({"--data", "bad/two_tabs.tsv"}),
       kData,
       {"bad/two_tabs.tsv:1", "more than one tab"}},
      {"train_empty_source",
       "empty source field",
       train_with({"--data", "bad/empty_source.tsv"}),
       kData,
       {"bad/empty_source.tsv:1", "empty source"}},
      {"train_empty_target",
       "empty target field",
       train_with({"--data", "bad/empty_target.tsv"}),
       kData,
       {"bad/empty_target.tsv:1", "empty target"}},
      {"train_stray_cr",
       "carriage return inside a line",
       train_with({"--data", "bad/stray_cr.tsv"}),
       kData,
       {"bad/stray_cr.tsv:1", "carriage return"}},
      {"train_unknown_char",
       "character missing from a vocabulary without <unk>",
       train_with({"--data", "bad/unknown_char.tsv", "--vocab", "bad/vocab_no_unk.txt"}),
       kData,
       {"bad/unknown_char.tsv:1", "U+597D"}},
      {"train_missing_valid",
       "--valid file does not exist",
       train_with({"--valid", "nope.tsv"}),
       kData,
       {"nope.tsv", "does not exist"}},
      {"train_bad_valid",
       "invalid --valid TSV",
       train_with({"--valid", "bad/no_tab.tsv"}),
       kData,
       {"bad/no_tab.tsv:2", "no tab"}},
      // ---- train: vocabulary -----------------------------------------------------------------
      {"train_missing_vocab",
       "--vocab file does not exist",
       train_with({"--vocab", "nope.txt"}),
       kData,
       {"nope.txt", "does not exist"}},
      {"train_vocab_is_dir",
       "--vocab is a directory",
       train_with({"--vocab", "data"}),
       kData,
       {"data", "directory"}},
      {"train_vocab_no_eos",
       "vocabulary without <eos>",
       train_with({"--vocab", "bad/vocab_no_eos.txt"}),
       kData,
       {"<eos>"}},
      {"train_vocab_duplicate",
       "duplicate token in the vocabulary",
       train_with({"--vocab", "bad/vocab_duplicate.txt"}),
       kData,
       {"bad/vocab_duplicate.txt:5", "duplicate"}},
      {"train_vocab_empty",
       "empty vocabulary file",
       train_with({"--vocab", "bad/vocab_empty.txt"}),
       kData,
       {"bad/vocab_empty.txt", "empty"}},
      {"train_vocab_blank_line",
       "blank line in the vocabulary",
       train_with({"--vocab", "bad/vocab_blank_line.txt"}),
       kData,
       {"bad/vocab_blank_line.txt:2", "empty line"}},
      {"train_vocab_invalid_utf8",
       "surrogate code point (invalid UTF-8) in the vocabulary",
       train_with({"--vocab", "bad/vocab_invalid_utf8.txt"}),
       kData,
       {"bad/vocab_invalid_utf8.txt:4", "invalid UTF-8"}},
      // ---- train: out-of-range and malformed flags ---------------------------------------------
      {"train_no_steps",
       "neither --steps nor --epochs",
       {"train", "--data", "data/train.tsv", "--out", "out"},
       kUsage,
       {"--steps", "--epochs"}},
      {"train_negative_steps", "--steps -1", train_with({"--steps", "-1"}), kUsage, {"--steps"}},
      {"train_steps_not_a_number",
       "--steps abc",
       train_with({"--steps", "abc"}),
       kUsage,
       {"--steps", "abc"}},
      {"train_steps_overflow",
       "--steps beyond 64 bits",
       train_with({"--steps", "99999999999999999999"}),
       kUsage,
       {"--steps"}},
      {"train_epochs_huge",
       "--epochs 1e300",
       train_with({"--steps", "0", "--epochs", "1e300"}),
       kUsage,
       {"--epochs"}},
      {"train_zero_lr", "--lr 0", train_with({"--lr", "0"}), kUsage, {"--lr"}},
      {"train_inf_lr", "--lr inf", train_with({"--lr", "inf"}), kUsage, {"--lr"}},
      {"train_zero_batch", "--batch 0", train_with({"--batch", "0"}), kUsage, {"--batch"}},
      {"train_negative_clip", "--clip -1", train_with({"--clip", "-1"}), kUsage, {"--clip"}},
      {"train_zero_log_every",
       "--log-every 0",
       train_with({"--log-every", "0"}),
       kUsage,
       {"--log-every"}},
      {"train_negative_threads",
       "--threads -1",
       train_with({"--threads", "-1"}),
       kUsage,
       {"--threads"}},
      {"train_dropout_above_one",
       "--dropout 1.5",
       train_with({"--dropout", "1.5"}),
       kUsage,
       {"dropout", "1.5"}},
      {"train_heads_not_dividing",
       "--heads 3 with --d-model 4",
       train_with({"--heads", "3"}),
       kUsage,
       {"d_model", "n_heads"}},
      {"train_zero_d_model", "--d-model 0", train_with({"--d-model", "0"}), kUsage, {"d_model"}},
      {"train_zero_max_positions",
       "--max-positions 0",
       train_with({"--max-positions", "0"}),
       kUsage,
       {"max_positions"}},
      {"train_pe_base_one", "--pe-base 1", train_with({"--pe-base", "1"}), kUsage, {"pe_base"}},
      {"train_unknown_arch",
       "--arch transformer",
       train_with({"--arch", "transformer"}),
       kUsage,
       {"transformer", "seq2seq"}},
      {"train_unknown_activation",
       "--activation swish",
       train_with({"--activation", "swish"}),
       kUsage,
       {"swish", "relu"}},
      {"train_unknown_optimizer",
       "--optimizer adagrad",
       train_with({"--optimizer", "adagrad"}),
       kUsage,
       {"adagrad"}},
      {"train_unknown_preset",
       "--preset huge",
       train_with({"--preset", "huge"}),
       kUsage,
       {"huge", "seed"}},
      {"train_label_smoothing_one",
       "--label-smoothing 1",
       train_with({"--label-smoothing", "1"}),
       kUsage,
       {"--label-smoothing"}},
      {"train_valid_fraction_above_one",
       "--valid-fraction 1.5",
       train_with({"--valid-fraction", "1.5"}),
       kUsage,
       {"--valid-fraction"}},
      {"train_negative_warmup",
       "--warmup -5",
       train_with({"--warmup", "-5"}),
       kUsage,
       {"--warmup"}},
      {"train_model_too_large",
       "--d-model 2^40 (more memory than exists)",
       train_with({"--d-model", "1099511627776", "--heads", "1"}),
       kData,
       {"too large"}},
      {"train_out_is_a_file",
       "--out names an existing file",
       train_with({"--out", "a_file"}),
       kData,
       {"a_file"}},
      // ---- train: configuration file -----------------------------------------------------------
      {"train_missing_config",
       "--config file does not exist",
       {"train", "--data", "data/train.tsv", "--out", "out", "--steps", "1", "--config",
        "nope.json"},
       kData,
       {"nope.json", "cannot open"}},
      {"train_config_is_dir",
       "--config is a directory",
       {"train", "--data", "data/train.tsv", "--out", "out", "--steps", "1", "--config", "data"},
       kData,
       {"data", "directory"}},
      {"train_config_and_preset",
       "--config together with --preset",
       {"train", "--data", "data/train.tsv", "--out", "out", "--steps", "1", "--config",
        "bad/config_array.json", "--preset", "seed"},
       kUsage,
       {"--config", "--preset"}},
      {"train_config_not_json",
       "--config is not JSON",
       {"train", "--data", "data/train.tsv", "--out", "out", "--steps", "1", "--config",
        "bad/config_not_json.json"},
       kData,
       {"bad/config_not_json.json", "invalid JSON"}},
      {"train_config_array",
       "--config is a JSON array",
       {"train", "--data", "data/train.tsv", "--out", "out", "--steps", "1", "--config",
        "bad/config_array.json"},
       kData,
       {"JSON object"}},
      {"train_config_unknown_key",
       "unknown key in --config",
       {"train", "--data", "data/train.tsv", "--out", "out", "--steps", "1", "--config",
        "bad/config_unknown_key.json"},
       kData,
       {"colour"}},
      {"train_config_wrong_type",
       "wrong value type in --config",
       {"train", "--data", "data/train.tsv", "--out", "out", "--steps", "1", "--config",
        "bad/config_wrong_type.json"},
       kData,
       {"d_model", "integer"}},
      {"train_config_bad_value",
       "inconsistent values in --config",
       {"train", "--data", "data/train.tsv", "--out", "out", "--steps", "1", "--config",
        "bad/config_bad_heads.json"},
       kData,
       {"d_model", "n_heads"}},
      {"train_config_huge_number",
       "number out of range in --config",
       {"train", "--data", "data/train.tsv", "--out", "out", "--steps", "1", "--config",
        "bad/config_huge_number.json"},
       kData,
       {"bad/config_huge_number.json"}},
      // ---- train --resume: checkpoints
      // -----------------------------------------------------------
      {"resume_no_checkpoint",
       "--resume with no checkpoint in --out",
       train_with({"--out", "nothing_here", "--resume"}),
       kData,
       {"--resume", "no checkpoint"}},
      {"resume_truncated",
       "truncated checkpoint",
       resume_from("truncated"),
       kData,
       {"ck_truncated/checkpoint.bin", "truncated"}},
      {"resume_header_only",
       "checkpoint cut inside its header",
       resume_from("header_only"),
       kData,
       {"truncated", "header"}},
      {"resume_empty", "empty checkpoint file", resume_from("empty"), kData, {"empty"}},
      {"resume_bit_flip",
       "one flipped bit in a checkpoint",
       resume_from("bit_flip"),
       kData,
       {"corrupted", "checksum"}},
      {"resume_future_version",
       "checkpoint from a future format version",
       resume_from("future_version"),
       kData,
       {"newer seqtape", "version 2"}},
      {"resume_other_kind",
       "seqtape file of another kind",
       resume_from("other_kind"),
       kData,
       {"kind 9", "not a checkpoint"}},
      {"resume_not_a_checkpoint",
       "a TSV file as checkpoint",
       resume_from("not_a_checkpoint"),
       kData,
       {"not a seqtape checkpoint", "magic"}},
      {"resume_trailing_bytes",
       "bytes appended to a checkpoint",
       resume_from("trailing_bytes"),
       kData,
       {"trailing bytes"}},
      {"resume_other_model",
       "checkpoint whose weights belong to another model",
       resume_from("other_model"),
       kData,
       {"does not match"}},
      {"resume_missing_param",
       "checkpoint missing a parameter",
       resume_from("missing_param"),
       kData,
       {"parameters"}},
      {"resume_nan_weight",
       "checkpoint holding a NaN weight",
       resume_from("nan_weight"),
       kData,
       {"non-finite", "nan"}},
      {"resume_bad_config",
       "checkpoint with an unparsable config",
       resume_from("bad_config"),
       kData,
       {"invalid configuration"}},
      {"resume_vocab_mismatch",
       "checkpoint whose vocabulary and config disagree",
       resume_from("vocab_mismatch"),
       kData,
       {"vocab_size"}},
      {"resume_other_data",
       "--resume on different data",
       {"train", "--data", "bad/unknown_char.tsv", "--out", "ck_good", "--steps", "4", "--eval-max",
        "1", "--no-progress", "--resume"},
       kData,
       {"different options or data", "data.data was"}},
      {"resume_other_batch",
       "--resume with another batch size, model and vocabulary than the run's",
       {"train", "--data", "data/train.tsv", "--out", "ck_good", "--steps", "4", "--eval-max", "1",
        "--no-progress", "--resume", "--batch", "16"},
       kData,
       {"ck_good/checkpoint.bin", "optimizer.batch was 8, now 16", "model.d_model", "data.valid"}},
      {"train_out_holds_a_run",
       "--out already holds a run (no --resume or --overwrite)",
       train_with({"--out", "ck_good"}),
       kData,
       {"ck_good", "already holds a run", "--overwrite"}},
      {"train_resume_and_overwrite",
       "--resume and --overwrite together",
       train_with({"--resume", "--overwrite"}),
       kUsage,
       {"--resume or --overwrite"}},
      {"train_best_metric_unknown",
       "--best-metric that does not exist",
       train_with({"--best-metric", "wer", "--eval-every", "1"}),
       kUsage,
       {"--best-metric", "wer"}},
      {"train_best_metric_no_eval",
       "--best-metric without periodic evaluation (--eval-every 0)",
       train_with({"--best-metric", "chrf"}),
       kUsage,
       {"--best-metric chrf", "--eval-every"}},
      {"train_best_metric_no_decodes",
       "--best-metric bleu with --eval-max 0 (nothing decoded)",
       train_with({"--best-metric", "bleu", "--eval-every", "1", "--eval-max", "0"}),
       kUsage,
       {"--eval-max 0"}},
      {"train_patience_no_metric",
       "--patience without --best-metric",
       train_with({"--patience", "3"}),
       kUsage,
       {"--patience needs --best-metric"}},
      {"train_time_limit_bad",
       "--time-limit that is not a duration",
       train_with({"--time-limit", "20 minutes"}),
       kUsage,
       {"--time-limit", "20 minutes"}},
      // ---- eval and average
      // ----------------------------------------------------------------------
      {"eval_missing_model",
       "eval --model file does not exist",
       {"eval", "--model", "nope.bin", "--data", "data/valid.tsv"},
       kData,
       {"nope.bin"}},
      {"eval_bad_beam",
       "eval --beam 0",
       {"eval", "--model", "ck_good/checkpoint.bin", "--data", "data/valid.tsv", "--beam", "0"},
       kUsage,
       {"--beam"}},
      {"average_other_config",
       "average checkpoints of different models",
       {"average", "ck_good/checkpoint.bin", "ck_other_model/checkpoint.bin", "--out", "avg.bin"},
       kData,
       {"ck_other_model/checkpoint.bin", "another model configuration"}},
      {"average_other_vocab",
       "average checkpoints with different vocabularies",
       {"average", "ck_good/checkpoint.bin", "ck_vocab_mismatch/checkpoint.bin", "--out",
        "avg.bin"},
       kData,
       {"ck_vocab_mismatch/checkpoint.bin"}},
      {"average_one",
       "average of a single checkpoint",
       {"average", "ck_good/checkpoint.bin", "--out", "avg.bin"},
       kUsage,
       {"at least two"}},
      // ---- export
      // --------------------------------------------------------------------------------
      {"export_missing_model",
       "--model file does not exist",
       {"export", "--model", "nope.bin", "--out", "exported"},
       kData,
       {"nope.bin", "cannot open"}},
      {"export_model_is_dir",
       "--model is a directory",
       {"export", "--model", "data", "--out", "exported"},
       kData,
       {"not a regular file"}},
      {"export_missing_out",
       "no --out",
       {"export", "--model", "run/checkpoint.bin"},
       kUsage,
       {"--out"}},
      {"export_truncated", "truncated checkpoint", export_from("truncated"), kData, {"truncated"}},
      {"export_bit_flip", "one flipped bit", export_from("bit_flip"), kData, {"checksum"}},
      {"export_future_version",
       "future format version",
       export_from("future_version"),
       kData,
       {"newer seqtape"}},
      {"export_not_a_checkpoint",
       "a TSV file as checkpoint",
       export_from("not_a_checkpoint"),
       kData,
       {"magic"}},
      {"export_bad_config",
       "checkpoint with an unparsable config",
       export_from("bad_config"),
       kData,
       {"invalid configuration"}},
      {"export_out_is_a_file",
       "--out names an existing file",
       {"export", "--model", "run/checkpoint.bin", "--out", "a_file"},
       kData,
       {"a_file"}},
      // ---- gradcheck
      // -----------------------------------------------------------------------------
      {"gradcheck_unknown_op",
       "--op that does not exist",
       {"gradcheck", "--op", "conv3d"},
       kUsage,
       {"conv3d"}},
      {"gradcheck_bad_seed", "--seed abc", {"gradcheck", "--seed", "abc"}, kUsage, {"--seed"}},
      // ---- generate
      // ------------------------------------------------------------------------------
      {"generate_missing_model",
       "--model file does not exist",
       {"generate", "--model", "nope.bin", "--input", "今天"},
       kData,
       {"nope.bin", "cannot open"}},
      {"generate_truncated",
       "truncated checkpoint",
       generate_from("truncated"),
       kData,
       {"truncated"}},
      {"generate_future_version",
       "future format version",
       generate_from("future_version"),
       kData,
       {"newer seqtape"}},
      {"generate_other_model",
       "checkpoint whose weights belong to another model",
       generate_from("other_model"),
       kData,
       {"ck_other_model/checkpoint.bin"}},
      {"generate_nan_weight",
       "checkpoint holding a NaN weight",
       generate_from("nan_weight"),
       kData,
       {"non-finite"}},
      {"generate_invalid_utf8",
       "--input that is not UTF-8",
       {"generate", "--model", "run/checkpoint.bin", "--input", "\xff\xfe"},
       kData,
       {"UTF-8"}},
      {"generate_zero_beam",
       "--beam 0",
       {"generate", "--model", "run/checkpoint.bin", "--input", "今天", "--beam", "0"},
       kUsage,
       {"--beam"}},
      {"generate_nbest_above_beam",
       "--n-best 3 with --beam 2",
       {"generate", "--model", "run/checkpoint.bin", "--input", "今天", "--beam", "2", "--n-best",
        "3"},
       kUsage,
       {"--n-best"}},
      {"generate_top_p_zero",
       "--top-p 0",
       {"generate", "--model", "run/checkpoint.bin", "--input", "今天", "--sample", "--top-p", "0"},
       kUsage,
       {"--top-p"}},
      {"generate_negative_temperature",
       "--temperature -1",
       {"generate", "--model", "run/checkpoint.bin", "--input", "今天", "--sample", "--temperature",
        "-1"},
       kUsage,
       {"--temperature"}},
      {"generate_end_not_in_vocab",
       "--end with a token the vocabulary lacks",
       {"generate", "--model", "run/checkpoint.bin", "--input", "今天", "--end", "<eot>"},
       kUsage,
       {"--end", "'<eot>'", "vocabulary"}},
      {"generate_suppress_not_in_vocab",
       "--suppress with a token the vocabulary lacks",
       {"generate", "--model", "run/checkpoint.bin", "--input", "今天", "--suppress", "<eot>"},
       kUsage,
       {"--suppress", "'<eot>'", "vocabulary"}},
  };
  return r;
}

// The argument as a shell word: plain, 'quoted', or $'...' with \xNN for bytes that are not
// UTF-8, so the command in the table can be pasted into bash.
std::string shell_word(const std::string& a) {
  const bool utf8 = utf8_find_invalid(a) == std::string::npos;
  if (!a.empty() && utf8 && a.find_first_of(" \t\"'\\$`|&;<>()*?!~#") == std::string::npos)
    return a;
  if (utf8 && a.find('\'') == std::string::npos) return "'" + a + "'";
  std::string q = "$'";
  for (unsigned char ch : a) {
    if (ch >= 0x80 || ch < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", ch);
      q += buf;
    } else {
      if (ch == '\'' || ch == '\\') q += '\\';
      q += static_cast<char>(ch);
    }
  }
  return q + "'";
}

std::string command_line(const Row& row) {
  std::string s = "seqtape";
  for (const auto& a : row.args) s += " " + shell_word(a);
  return s;
}

void PrintTo(const Row& row, std::ostream* os) {
  *os << row.id;
}

class BadInput : public ::testing::TestWithParam<Row> {};

TEST_P(BadInput, ExitsWithItsClassAndSaysWhatIsWrong) {
  const Row& row = GetParam();
  const CliResult r = run_cli(row.args, Workspace::get().dir());
  SCOPED_TRACE(command_line(row) + "\nstderr: " + r.err + "\nstdout: " + r.out.substr(0, 400));
  EXPECT_EQ(r.exit_code, row.exit_code);
  EXPECT_NE(r.exit_code, 4) << "an internal error for a user's mistake";
  EXPECT_LT(r.exit_code, 128) << "killed by a signal";
  for (const auto& w : row.words) EXPECT_NE(r.err.find(w), std::string::npos) << "'" << w << "'";
}

INSTANTIATE_TEST_SUITE_P(Cli, BadInput, ::testing::ValuesIn(rows()),
                         [](const ::testing::TestParamInfo<Row>& i) { return i.param.id; });

// The good side of --end: a token given with --end ends decoding as <eos> does.
TEST(GenerateCli, EndTokenEndsLikeEos) {
  const std::string dir = Workspace::get().dir();
  const std::vector<std::string> base = {"generate", "--model", "run/checkpoint.bin",
                                         "--input",  "今天",    "--json"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    const CliResult r = run_cli(args, dir);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(r.out);
  };
  // The most likely first token other than <eos> (min-new 1 blocks <eos>)...
  const nlohmann::json first = with({"--min-new", "1", "--max-new", "1"});
  ASSERT_EQ(first["tokens"].size(), 1u);
  const std::string piece = first["text"];
  ASSERT_FALSE(piece.empty());
  // ...is either beaten by <eos> or chosen and ends the run: nothing generated, reason eos.
  const nlohmann::json ended = with({"--end", piece, "--max-new", "5"});
  EXPECT_EQ(ended["tokens"].size(), 0u) << ended.dump();
  EXPECT_EQ(ended["stop_reason"], "eos");
  EXPECT_EQ(ended["cache_lengths"].size(), 1u);  // one step: the end token was selected there
}

// ---- docs/bad_inputs.md --------------------------------------------------------------------

// Plain text for a table cell: no raw '|', and <tokens> shown rather than taken for HTML.
std::string cell(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '|')
      out += "\\|";
    else if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else
      out += c;
  }
  return out;
}

// Verbatim text for a table cell: each line a code span, lines joined by <br>.
std::string code_cell(const std::string& s) {
  std::string out, line;
  std::istringstream in(s);
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    std::string esc;
    for (char c : line) esc += c == '|' ? std::string("\\|") : std::string(1, c);
    out += (out.empty() ? "" : "<br>") + std::string("`") + esc + "`";
  }
  return out;
}

TEST(BadInputsDoc, WriteTheTable) {
  const char* path = std::getenv("SEQTAPE_BAD_INPUTS_DOC");
  if (!path) GTEST_SKIP() << "set SEQTAPE_BAD_INPUTS_DOC=docs/bad_inputs.md to regenerate it";
  std::ostringstream md;
  md << "# Bad input across the CLI\n\n"
        "Every bad input below was tried on the real `seqtape` binary; each row is a test\n"
        "(`tests/faults/test_bad_inputs.cpp`, `BadInput.*`) that checks the exit code and the\n"
        "key words of the message. The table is generated by that test:\n\n"
        "    SEQTAPE_BAD_INPUTS_DOC=docs/bad_inputs.md build/tests/faults/test_faults "
        "--gtest_filter=BadInputsDoc.*\n\n"
        "Exit codes: 0 ok, 1 a check failed, **2 usage error** (a flag or its value is wrong),\n"
        "**3 data error** (a file or input the user gave is wrong, or the disk is full),\n"
        "4 internal error (a bug: none of the rows below may give it). Commands run in a\n"
        "directory holding `data/` (from `seqtape gen-copy`), a good run in `run/`, and the bad\n"
        "files under `bad/` and `ck_*/` that the test writes.\n\n"
        "| # | bad input | command | exit | what the user sees (stderr) |\n"
        "|---|---|---|---|---|\n";
  int n = 0;
  for (const Row& row : rows()) {
    const CliResult r = run_cli(row.args, Workspace::get().dir());
    md << "| " << ++n << " | " << cell(row.what) << " | " << code_cell(command_line(row)) << " | "
       << r.exit_code << " | " << code_cell(r.err) << " |\n";
  }
  md << R"(
The other fault tests in `tests/faults/`, for the record:

- `KillResume.*`: `seqtape train --save-every 1` is killed with SIGKILL at 50 seeded random
  moments; after each kill the newest checkpoint loads, its step never goes back, and at most
  one temp file is left (each run removes those of dead processes when it starts). A final
  `--resume` run finishes, and every loss logged by the 51 runs equals the uninterrupted
  run's loss at that step, bit for bit.
- `InjectedDiskFull.*`, `RealDiskFull.*`: a save that hits ENOSPC (injected at a byte offset
  or at fsync, and on a real full 1 MB tmpfs) stops training with exit 3 and
  `... cannot save: writing ... failed: No space left on device (the previous file is
  unchanged)`; the previous checkpoint is byte-identical and training resumes from it.
- `NumericalFaults.*`: NaN/Inf injected into a weight, the input embeddings or a gradient
  stops training naming the step, the op (`--anomaly`: e.g. `step 4: add: anomaly:
  non-finite value nan ...`) or the parameter, and the last good checkpoint; a NaN weight
  that the loss does not see (ReLU) is refused at the next save.
- `FuzzRegressions.*`: every input under `fuzz/regressions/` and every seed under
  `fuzz/corpus/` through the fuzz targets' code (see `fuzz/README.md`).
)";
  write_file(path, md.str());
  std::printf("[          ] wrote %d rows to %s\n", n, path);
}

}  // namespace
}  // namespace seqtape::faults
