// Bad input across the CLI: every row of docs/bad_inputs.md is one test here. Each runs the real
// `seqtape` binary in a directory of prepared bad files and checks the exit-code class (2 usage,
// 3 data, never 4 internal or a crash) and that the message names what is wrong.
//
// Regenerate the table after changing a message (from the repository root):
//   SEQTAPE_BAD_INPUTS_DOC=docs/bad_inputs.md build/tests/faults/test_faults
//   --gtest_filter=BadInputsDoc.*

#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "fault_util.h"
#include "infer/export.h"
#include "infer/model.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"
#include "tensor/cpu_path.h"
#include "text/subword.h"
#include "text/tokenizer.h"
#include "train/copy_task.h"
#include "train/dataset.h"
#include "train/evaluate.h"
#include "train/model_io.h"
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

    make_text_files();
    make_damaged_checkpoints(good);
    const Checkpoint c = load_checkpoint(dir_.file("run/checkpoint.bin"));
    make_inconsistent_checkpoints(c);
    make_hostile_files(c);
    make_output_path_files(good);
    make_quantized_exports();
  }

  void put(const std::string& name, std::string_view bytes) const {
    write_file(dir_.file(name), bytes);
  }
  void save_as(const std::string& name, const Checkpoint& x) const {
    fs::create_directories(dir_.path() / ("ck_" + name));
    save_checkpoint(dir_.file("ck_" + name + "/checkpoint.bin"), x);
  }

  // Bad TSV data, vocabularies, subword directories and model configurations.
  void make_text_files() const {
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
    // 今天's references split by another source: lines 1 and 3.
    put("bad/split_references.tsv", "今天\t今天\n天气\t天气\n今天\t天天\n");
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
    // Subword vocabulary directories and a line longer than max_positions.
    {
      SubwordTrainOptions so;
      so.vocab_size = 30;
      std::vector<std::string> texts;
      for (const char* w : {"today", "tomorrow", "yesterday", "weather", "whether", "together"})
        for (const char* v : {"is fine", "was bad", "will be"})
          texts.push_back(std::string(w) + " " + v);
      const SubwordTokenizer sp = SubwordTokenizer::train(texts, so, "texts");
      write_subword_dir(dir_.file("bad/spm_separate"), sp, &sp, false);
      write_subword_dir(dir_.file("bad/spm_joint"), sp, nullptr, false);
    }
    put("bad/spm_garbage/spm.model", "this is not a SentencePiece model");
    // fuzz_subword's finding: the library's trie builder threw on a zero-length piece.
    put("bad/spm_zero_piece/spm.model",
        read_file(std::string(SEQTAPE_SOURCE_DIR) +
                  "/fuzz/regressions/subword/zero_length_piece.model"));
    put("bad/too_long.tsv", "今天\t今天\n" + std::string(300, 'a') + "\t今天\n");
    // Model configurations.
    put("bad/config_not_json.json", "{\"d_model\": 8,");
    put("bad/config_unknown_key.json", R"({"vocab_size": 10, "colour": "red"})");
    put("bad/config_wrong_type.json", R"({"vocab_size": 10, "d_model": "wide"})");
    put("bad/config_bad_heads.json", R"({"vocab_size": 10, "d_model": 6, "n_heads": 4})");
    put("bad/config_array.json", "[1, 2]");
    put("bad/config_huge_number.json", R"({"vocab_size": 10, "d_model": 1e999})");
  }

  // Damaged copies of a good checkpoint's bytes.
  void make_damaged_checkpoints(const std::string& good) const {
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
    future[8] = 3;  // format version 3
    ckpt("future_version", future);
    std::string kind = good;
    kind[12] = 9;  // envelope kind 9
    ckpt("other_kind", kind);
    ckpt("not_a_checkpoint", read_file(dir_.file("data/train.tsv")));
    ckpt("trailing_bytes", good + "junk");
    ckpt("good", good);
    put("best_only/best.bin", good);
  }

  // Checksum-valid checkpoints whose contents disagree with themselves, and a bad export.
  void make_inconsistent_checkpoints(const Checkpoint& c) const {
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

    Checkpoint spm = c;  // claims a SentencePiece tokenizer whose model is garbage
    spm.tokenizer_kind = "sentencepiece";
    spm.tokenizer_model = "not a model";
    save_as("bad_spm", spm);
    Checkpoint side = c;  // a tokenizer per side that no version writes
    side.tokenizer_kind = "chars/phones";
    save_as("bad_tokenizer_side", side);

    put("a_file", "not a directory\n");
    // An export whose metadata names a SentencePiece tokenizer, without its spm.model.
    export_checkpoint(dir_.file("run/checkpoint.bin"), dir_.file("bad/export_no_spm"));
    SafetensorsFile st = read_safetensors(dir_.file("bad/export_no_spm/model.safetensors"));
    st.metadata["tokenizer"] = "sentencepiece";
    write_safetensors(dir_.file("bad/export_no_spm/model.safetensors"), st.tensors, st.metadata);
  }

  // Hostile sizes, special files and links, and checkpoints with out-of-range fields.
  void make_hostile_files(const Checkpoint& c) const {
    // Special files, huge sparse files, links that loop.
    ::mkfifo(dir_.file("bad/fifo").c_str(), 0644);
    fs::create_symlink("loop", dir_.path() / "bad/loop");
    for (const char* name : {"bad/huge.tsv", "bad/huge_vocab.txt", "bad/huge_config.json"}) {
      put(name, "");
      fs::resize_file(dir_.file(name), uint64_t{5} << 30);  // 5 GiB, sparse
    }
    put("bad/config_huge_vocab.json", R"({"vocab_size": 1000000000000})");
    put("bad/config_no_vocab_size.json",
        R"({"d_model": 4, "n_heads": 1, "d_ff": 16, "pe_base": 100.0})");
    put("bad/config_wrong_vocab_size.json",
        R"({"vocab_size": 10, "d_model": 4, "n_heads": 1, "d_ff": 16})");
    Checkpoint huge_pos = c;  // checksum-valid, max_positions beyond int32
    auto hp = nlohmann::json::parse(huge_pos.config_json);
    hp["max_positions"] = 4294967596LL;
    huge_pos.config_json = hp.dump();
    save_as("huge_max_positions", huge_pos);
    Checkpoint bad_rng = c;
    bad_rng.rng_state = "not a generator state";
    save_as("bad_rng", bad_rng);
    Checkpoint f64 = c;  // float64 parameters: same shapes, another dtype
    for (auto& p : f64.params) p.value = p.value.to(DType::F64);
    save_as("float64_params", f64);
  }

  // Quantized exports (seqtape export --compute-type int8), each broken in one way.
  void make_quantized_exports() {
    const std::string ck = dir_.file("run/checkpoint.bin");
    export_checkpoint(ck, dir_.file("q/int8"), ComputeType::Int8);
    const SafetensorsFile good = read_safetensors(dir_.file("q/int8/model.safetensors"));
    auto broken = [&](const std::string& name, const std::function<void(SafetensorsFile&)>& f) {
      export_checkpoint(ck, dir_.file("q/" + name), ComputeType::Int8);
      SafetensorsFile st = good;
      f(st);
      write_safetensors(dir_.file("q/" + name + "/model.safetensors"), st.tensors, st.metadata,
                        st.stored);
    };
    auto tensor = [](SafetensorsFile& st, const std::string& name) -> Tensor& {
      for (NamedTensor& t : st.tensors)
        if (t.name == name) return t.value;
      throw std::runtime_error("no tensor " + name);
    };
    const std::string w1 = "decoder.layers.0.ffn.w1";
    broken("no_scale", [&](SafetensorsFile& st) {
      std::erase_if(st.tensors, [&](const NamedTensor& t) { return t.name == w1 + ".scale"; });
    });
    broken("scale_shape", [&](SafetensorsFile& st) {
      Tensor& s = tensor(st, w1 + ".scale");
      s = s.reshape({1, s.numel()});
    });
    broken("scale_f64", [&](SafetensorsFile& st) {
      Tensor& s = tensor(st, w1 + ".scale");
      s = s.to(DType::F64);
    });
    broken("scale_zero", [&](SafetensorsFile& st) {
      Tensor& s = tensor(st, w1 + ".scale");
      s = s.clone();
      s.set(2, 0.0);
    });
    broken("scale_nan", [&](SafetensorsFile& st) {
      Tensor& s = tensor(st, w1 + ".scale");
      s = s.clone();
      s.set(1, std::nan(""));
    });
    broken("minus_128", [&](SafetensorsFile& st) {
      for (StoredTensor& t : st.stored)
        if (t.name == w1) t.bytes[3] = 0x80;
    });
    broken("i8_bias", [&](SafetensorsFile& st) {  // out_proj.bias as I8 bytes
      Tensor& b = tensor(st, "out_proj.bias");
      st.stored.push_back({"out_proj.bias", StoredDType::I8, b.shape(),
                           std::vector<uint8_t>(size_t(b.numel()), 1)});
      std::erase_if(st.tensors, [&](const NamedTensor& t) { return t.name == "out_proj.bias"; });
    });
    broken("f32_matrix", [&](SafetensorsFile& st) {  // one matrix left float32
      const SafetensorsFile plain = read_safetensors(dir_.file("o/g6/model.safetensors"));
      for (const NamedTensor& t : plain.tensors)
        if (t.name == w1) st.tensors.push_back(t);
      std::erase_if(st.stored, [&](const StoredTensor& t) { return t.name == w1; });
    });
    broken("no_compute_type", [&](SafetensorsFile& st) { st.metadata.erase("compute_type"); });
    broken("says_bf16", [&](SafetensorsFile& st) { st.metadata["compute_type"] = "bf16"; });
    broken("says_f32", [&](SafetensorsFile& st) { st.metadata["compute_type"] = "f32"; });
  }

  // Outputs that are one of the command's inputs: each row its own copies under o/ (a refusal
  // that fails destroys them), and the files of the other rows.
  void make_output_path_files(const std::string& good) {
    auto put = [&](const std::string& name, std::string_view bytes) {
      write_file(dir_.file(name), bytes);
    };
    auto symlink = [&](const std::string& target, const std::string& name) {
      fs::create_symlink(target, dir_.path() / name);
    };
    auto hard_link = [&](const std::string& from, const std::string& name) {
      fs::create_directories((dir_.path() / name).parent_path());
      fs::create_hard_link(dir_.path() / from, dir_.path() / name);
    };
    const std::string valid = read_file(dir_.file("data/valid.tsv"));
    for (const char* d : {"e1", "e2", "e4", "g1", "g4", "g5", "a1", "a2", "x2"})
      put("o/" + std::string(d) + "/checkpoint.bin", good);
    symlink("checkpoint.bin", "o/e4/link");
    for (const char* d : {"e3", "e5"}) put("o/" + std::string(d) + "/valid.tsv", valid);
    hard_link("o/e5/valid.tsv", "o/e5/hyps.txt");
    for (const char* d : {"g2", "g3"}) put("o/" + std::string(d) + "/in.txt", "今天\n");
    symlink("in.txt", "o/g3/out.txt");
    hard_link("o/g4/checkpoint.bin", "o/g4/out.txt");
    export_checkpoint(dir_.file("run/checkpoint.bin"), dir_.file("o/g6"));
    symlink("checkpoint.bin", "o/a2/link");
    put("o/x1/model.safetensors", good);
    hard_link("o/x2/checkpoint.bin", "o/x2/out/config.json");
    put("o/t1/metrics.csv", read_file(dir_.file("data/train.tsv")));
    put("o/t2/valid.tsv", valid);
    hard_link("o/t2/valid.tsv", "o/t2/checkpoint-4.bin");
    put("o/v1/spm.vocab.tsv", read_file(dir_.file("data/train.tsv")));
    put("o/v2/train.tsv", read_file(dir_.file("data/train.tsv")));
    fs::create_directories(dir_.path() / "o/v2/out");
    symlink("../train.tsv", "o/v2/out/source.model");
    put("o/w1/t.json", R"({"format": "seqtape-trace"})");
    const std::string f15 =
        read_file(std::string(SEQTAPE_SOURCE_DIR) + "/datasets/f15/checkpoint.bin");
    for (const char* d : {"w2", "w3"}) put("o/" + std::string(d) + "/checkpoint.bin", f15);
    put("f15/checkpoint.bin", f15);
    // A source and a target of 50,000 characters: SentencePiece's own limit skips both.
    put("bad/long_line.tsv", std::string(50000, 'a') + "\t" + std::string(50000, 'b') + "\n");
    // An export whose metadata says its Linear weights are stored transposed.
    export_checkpoint(dir_.file("run/checkpoint.bin"), dir_.file("bad/export_out_in"));
    SafetensorsFile st = read_safetensors(dir_.file("bad/export_out_in/model.safetensors"));
    st.metadata["linear_layout"] = "out_in";
    write_safetensors(dir_.file("bad/export_out_in/model.safetensors"), st.tensors, st.metadata);
    // A run directory whose checkpoint.bin is what `seqtape average` writes.
    fs::create_directories(dir_.path() / "ck_averaged");
    const CliResult avg = run_cli({"average", "run/checkpoint.bin", "ck_good/checkpoint.bin",
                                   "--out", "ck_averaged/checkpoint.bin"},
                                  dir_.path().string());
    if (avg.exit_code != 0) throw std::runtime_error("seqtape average failed: " + avg.err);
  }

  TempDir dir_{"badinput"};
};

struct Row {
  const char* id;
  const char* what;  // the bad input, for the table
  std::vector<std::string> args;
  int exit_code;
  std::vector<std::string> words;  // each must appear in stderr
  std::string stdin_text = {};     // fed to the command's stdin
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
// Resumes ck_good with its own options (those of seed_training), changed by `change`.
std::vector<std::string> resume_good_with(const std::vector<std::string>& change) {
  std::vector<std::string> a = {"train",
                                "--data",
                                "data/train.tsv",
                                "--valid",
                                "data/valid.tsv",
                                "--vocab",
                                "data/vocab.txt",
                                "--preset",
                                "seed",
                                "--batch",
                                "8",
                                "--out",
                                "ck_good",
                                "--steps",
                                "4",
                                "--eval-max",
                                "1",
                                "--no-progress",
                                "--resume"};
  a.insert(a.end(), change.begin(), change.end());
  return a;
}
std::vector<std::string> export_from(const std::string& ck) {
  return {"export", "--model", "ck_" + ck + "/checkpoint.bin", "--out", "exported"};
}
std::vector<std::string> generate_from(const std::string& ck) {
  return {"generate", "--model", "ck_" + ck + "/checkpoint.bin", "--input", "今天"};
}

constexpr int kUsage = 2, kData = 3;

std::string repeat(const std::string& s, int n) {
  std::string out;
  for (int i = 0; i < n; ++i) out += s;
  return out;
}

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
       "--vocab is a directory without a SentencePiece model",
       train_with({"--vocab", "data"}),
       kData,
       {"data", "no SentencePiece model", "spm.model"}},
      {"train_vocab_separate",
       "--vocab directory of separate source and target models (vocab --separate)",
       train_with({"--vocab", "bad/spm_separate"}),
       kData,
       {"bad/spm_separate", "separate source and target", "shares one embedding"}},
      {"train_tokenizer_not_the_vocabularys",
       "--tgt-tokenizer words with a SentencePiece --vocab directory (which reads both sides)",
       train_with({"--vocab", "bad/spm_joint", "--tgt-tokenizer", "words"}),
       kData,
       {"bad/spm_joint", "SentencePiece vocabulary", "--tgt-tokenizer is words"}},
      {"train_tokenizer_spm_without_model",
       "--tokenizer spm with a vocabulary file, not a `seqtape vocab` directory",
       train_with({"--vocab", "data/vocab.txt", "--tokenizer", "spm"}),
       kData,
       {"--src-tokenizer", "spm needs --vocab DIR", "data/vocab.txt is a file"}},
      {"train_tokenizer_unknown",
       "--tgt-tokenizer that does not exist",
       train_with({"--tgt-tokenizer", "phones"}),
       kUsage,
       {"--tgt-tokenizer", "phones"}},
      {"train_vocab_bad_spm",
       "--vocab directory whose spm.model is not a SentencePiece model",
       train_with({"--vocab", "bad/spm_garbage"}),
       kData,
       {"bad/spm_garbage/spm.model"}},
      {"train_vocab_spm_zero_length_piece",
       "--vocab directory whose spm.model has a zero-length piece (found by fuzz_subword)",
       train_with({"--vocab", "bad/spm_zero_piece"}),
       kData,
       {"bad/spm_zero_piece/spm.model", "not a valid SentencePiece model"}},
      {"train_too_long",
       "an example longer than max_positions",
       train_with({"--data", "bad/too_long.tsv"}),
       kData,
       {"bad/too_long.tsv:2", "max_positions", "--too-long"}},
      {"train_too_long_value",
       "--too-long with an unknown policy",
       train_with({"--too-long", "cut"}),
       kUsage,
       {"--too-long", "cut"}},
      {"train_accum_zero",
       "--accum 0",
       train_with({"--accum", "0"}),
       kUsage,
       {"--accum: must be an integer in [1, 4096], got 0"}},
      {"train_bucket_mb_zero",
       "--bucket-mb 0 (data-parallel allreduce buckets)",
       train_with({"--bucket-mb", "0"}),
       kUsage,
       {"--bucket-mb must be a size in MiB in (0, 1024]"}},
      {"train_matmul_unknown",
       "--matmul mkl (an unknown matrix-product backend)",
       train_with({"--matmul", "mkl"}),
       kUsage,
       {"--matmul: unknown matmul backend 'mkl' (choose auto, openblas or onednn)"}},
      {"train_precision_unknown",
       "--precision fp16",
       train_with({"--precision", "fp16"}),
       kUsage,
       {"--precision: unknown precision 'fp16' (choose f32 or bf16)"}},
      {"train_check_sync_negative",
       "--check-sync -1",
       train_with({"--check-sync", "-1"}),
       kUsage,
       {"--check-sync: must be an integer >= 0, got -1"}},
      {"train_collective_timeout_nan",
       "--collective-timeout nan",
       train_with({"--collective-timeout", "nan"}),
       kUsage,
       {"--collective-timeout must be a number of seconds >= 0"}},
      {"train_ranks_negative",
       "--ranks -1 (data-parallel ranks in one process)",
       train_with({"--ranks", "-1"}),
       kUsage,
       {"--ranks: must be an integer in [0, 256], got -1"}},
      {"train_batch_tokens_negative",
       "--batch-tokens -5",
       train_with({"--batch-tokens", "-5"}),
       kUsage,
       {"--batch-tokens: must be an integer >= 0, got -5"}},
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
      {"train_zero_batch",
       "--batch 0",
       train_with({"--batch", "0"}),
       kUsage,
       {"--batch: must be an integer >= 1, got 0"}},
      {"train_negative_clip", "--clip -1", train_with({"--clip", "-1"}), kUsage, {"--clip"}},
      {"train_zero_log_every",
       "--log-every 0",
       train_with({"--log-every", "0"}),
       kUsage,
       {"--log-every: must be an integer >= 1, got 0"}},
      {"train_accum_huge",
       "--accum 2^63-1 (a step holds its batches at once: the run grew until the machine killed "
       "it)",
       train_with({"--accum", "9223372036854775807"}),
       kUsage,
       {"--accum: must be an integer in [1, 4096], got 9223372036854775807"}},
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
      {"train_attention_dropout_one",
       "--attention-dropout 1 (every attention weight dropped)",
       train_with({"--attention-dropout", "1"}),
       kUsage,
       {"attention_dropout", "[0, 1)"}},
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
       "--d-model 65536 --ffn 262144 (in bounds, more memory than exists)",
       train_with({"--d-model", "65536", "--heads", "1", "--ffn", "262144"}),
       kData,
       {"too large", "needs", "TiB", "available"}},
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
       {"newer seqtape", "version 3"}},
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
       {"different options or data", "--data was"}},
      {"resume_other_batch",
       "--resume with another batch size, model and vocabulary than the run's",
       {"train", "--data", "data/train.tsv", "--out", "ck_good", "--steps", "4", "--eval-max", "1",
        "--no-progress", "--resume", "--batch", "16"},
       kData,
       {"ck_good/checkpoint.bin", "--batch was 8, now 16",
        "--d-model (model d_model) was 4, now 64", "--valid was"}},
      {"resume_other_batch_tokens",
       "--resume switching from --batch to --batch-tokens",
       resume_good_with({"--batch-tokens", "64"}),
       kData,
       {"ck_good/checkpoint.bin", "(1 difference): --batch-tokens was 0, now 64"}},
      {"resume_other_accum",
       "--resume with another --accum",
       resume_good_with({"--accum", "2"}),
       kData,
       {"(1 difference): --accum was 1, now 2"}},
      {"resume_other_too_long",
       "--resume with another --too-long",
       resume_good_with({"--too-long", "skip"}),
       kData,
       {"(1 difference): --too-long was \"error\", now \"skip\""}},
      {"resume_other_optimizer",
       "--resume with another --optimizer and --clip",
       resume_good_with({"--optimizer", "sgd", "--clip", "0.5"}),
       kData,
       {"(2 differences)", "--optimizer was \"adam\", now \"sgd\"", "--clip was 1.0, now 0.5"}},
      {"train_out_holds_a_run",
       "--out already holds a run (no --resume or --overwrite)",
       train_with({"--out", "ck_good"}),
       kData,
       {"ck_good", "already holds a run", "--overwrite"}},
      {"train_out_holds_best_bin",
       "--out holding only best.bin (a run killed before its first checkpoint.bin)",
       train_with({"--out", "best_only"}),
       kData,
       {"already holds a run", "best_only/best.bin", "--overwrite"}},
      {"train_resume_and_overwrite",
       "--resume and --overwrite together",
       train_with({"--resume", "--overwrite"}),
       kUsage,
       {"--resume or --overwrite"}},
      {"train_best_metric_unknown",
       "--best-metric that does not exist",
       train_with({"--best-metric", "accuracy", "--eval-every", "1"}),
       kUsage,
       {"--best-metric", "accuracy", "wer, per"}},
      {"train_best_metric_wer_no_decodes",
       "--best-metric wer with --eval-max 0 (no hypothesis to compare with the references)",
       train_with({"--best-metric", "wer", "--eval-every", "1", "--eval-max", "0"}),
       kUsage,
       {"--best-metric wer", "--eval-max 0"}},
      {"train_valid_references_split",
       "--valid where a source's lines (its references) are not consecutive",
       train_with({"--valid", "bad/split_references.tsv"}),
       kData,
       {"bad/split_references.tsv:3", "first at line 1", "consecutive"}},
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
      {"eval_length_penalty_nan",
       "eval --length-penalty nan",
       {"eval", "--model", "ck_good/checkpoint.bin", "--data", "data/valid.tsv", "--beam", "3",
        "--length-penalty", "nan"},
       kUsage,
       {"--length-penalty", "finite"}},
      {"eval_unknown_compute_type",
       "eval --compute-type int4",
       {"eval", "--model", "ck_good/checkpoint.bin", "--data", "data/valid.tsv", "--compute-type",
        "int4"},
       kUsage,
       {"--compute-type must be f32, bf16, int8 or auto", "'int4'"}},
      {"eval_out_missing_dir",
       "eval --out in a directory that does not exist (refused before decoding)",
       {"eval", "--model", "ck_good/checkpoint.bin", "--data", "data/valid.tsv", "--out",
        "no_such_dir/hyps.txt"},
       kData,
       {"no_such_dir/hyps.txt: cannot save"}},
      {"eval_out_is_dir",
       "eval --out names a directory",
       {"eval", "--model", "ck_good/checkpoint.bin", "--data", "data/valid.tsv", "--out", "data"},
       kData,
       {"data: cannot save: is a directory"}},
      {"vocab_out_is_file",
       "vocab --out names a file (refused before learning)",
       {"vocab", "--data", "data/train.tsv", "--size", "20", "--out", "data/train.tsv"},
       kData,
       {"data/train.tsv: exists and is not a directory"}},
      {"vocab_out_cannot_be_made",
       "vocab --out inside a file",
       {"vocab", "--data", "data/train.tsv", "--size", "20", "--out", "data/train.tsv/v"},
       kData,
       {"data/train.tsv/v: cannot create the directory"}},
      {"eval_references_split",
       "eval --data where a source's lines (its references) are not consecutive",
       {"eval", "--model", "ck_good/checkpoint.bin", "--data", "bad/split_references.tsv"},
       kData,
       {"bad/split_references.tsv:3", "first at line 1", "consecutive"}},
      {"eval_copy_baseline_references_split",
       "eval --copy-baseline on data whose references are not consecutive",
       {"eval", "--copy-baseline", "--data", "bad/split_references.tsv"},
       kData,
       {"bad/split_references.tsv:3", "first at line 1", "consecutive"}},
      {"eval_no_model",
       "eval without --model or --copy-baseline",
       {"eval", "--data", "data/valid.tsv"},
       kUsage,
       {"--model is required"}},
      {"eval_copy_baseline_with_model",
       "eval --copy-baseline together with --model",
       {"eval", "--copy-baseline", "--model", "ck_good/checkpoint.bin", "--data", "data/valid.tsv"},
       kUsage,
       {"--copy-baseline", "drop --model"}},
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
      {"average_onto_its_input",
       "average whose --out is one of its inputs, a run's checkpoint.bin (it was replaced "
       "silently, optimizer state and all)",
       {"average", "ck_good/checkpoint.bin", "ck_good/checkpoint.bin", "--out",
        "ck_good/checkpoint.bin"},
       kData,
       {"ck_good/checkpoint.bin: already exists", "--overwrite"}},
      // ---- export
      // --------------------------------------------------------------------------------
      {"export_missing_model",
       "--model file does not exist",
       {"export", "--model", "nope.bin", "--out", "exported"},
       kData,
       {"nope.bin", "cannot open"}},
      {"export_model_is_dir",
       "--model is a directory without checkpoint.bin",
       {"export", "--model", "data", "--out", "exported"},
       kData,
       {"data: is a directory without checkpoint.bin"}},
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
      {"export_bad_spm",
       "checkpoint whose SentencePiece model is malformed",
       export_from("bad_spm"),
       kData,
       {"ck_bad_spm/checkpoint.bin"}},
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
      {"generate_bad_spm",
       "checkpoint whose SentencePiece model is malformed",
       generate_from("bad_spm"),
       kData,
       {"ck_bad_spm/checkpoint.bin"}},
      {"generate_bad_tokenizer_side",
       "checkpoint naming a tokenizer per side that does not exist",
       generate_from("bad_tokenizer_side"),
       kData,
       {"ck_bad_tokenizer_side/checkpoint.bin", "unknown tokenizer 'phones'"}},
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
      {"generate_unknown_compute_type",
       "--compute-type fp16",
       {"generate", "--model", "run/checkpoint.bin", "--input", "今天", "--compute-type", "fp16"},
       kUsage,
       {"--compute-type must be f32, bf16, int8 or auto", "'fp16'"}},
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
      // ---- hostile sizes, special files, inconsistent checkpoints ------------------------------
      {"i11_max_positions_beyond_int32",
       "--max-positions 4294967596 (wraps to 300 as int)",
       train_with({"--max-positions", "4294967596"}),
       kUsage,
       {"max_positions", "1048576"}},
      {"i11_max_positions_2_31",
       "--max-positions 2^31",
       train_with({"--max-positions", "2147483648"}),
       kUsage,
       {"max_positions"}},
      {"i11_checkpoint_max_positions_beyond_int32",
       "checksum-valid checkpoint with max_positions 4294967596",
       generate_from("huge_max_positions"),
       kData,
       {"max_positions", "4294967596"}},
      {"i11_dec_layers_20000",
       "--dec-layers 20000",
       train_with({"--dec-layers", "20000"}),
       kUsage,
       {"n_decoder_layers", "20000"}},
      {"i11_enc_layers_1e9",
       "--enc-layers 1000000000",
       train_with({"--enc-layers", "1000000000"}),
       kUsage,
       {"n_encoder_layers"}},
      {"i11_vocab_size_config_huge",
       "--config with vocab_size 10^12",
       {"train", "--data", "data/train.tsv", "--out", "out", "--steps", "1", "--config",
        "bad/config_huge_vocab.json"},
       kData,
       {"vocab_size"}},
      {"i11_data_dev_zero",
       "--data /dev/zero",
       train_with({"--data", "/dev/zero"}),
       kData,
       {"/dev/zero", "not a regular"}},
      {"i11_data_huge",
       "a 5 GiB --data file",
       train_with({"--data", "bad/huge.tsv"}),
       kData,
       {"bad/huge.tsv", "5368709120 bytes", "limit"}},
      {"i11_vocab_huge",
       "a 5 GiB --vocab file",
       train_with({"--vocab", "bad/huge_vocab.txt"}),
       kData,
       {"bad/huge_vocab.txt", "limit"}},
      {"i11_config_huge",
       "a 5 GiB --config file",
       {"train", "--data", "data/train.tsv", "--out", "out", "--steps", "1", "--config",
        "bad/huge_config.json"},
       kData,
       {"bad/huge_config.json", "limit"}},
      {"i11_data_fifo",
       "a FIFO as --data",
       train_with({"--data", "bad/fifo"}),
       kData,
       {"bad/fifo", "FIFO"}},
      {"i11_vocab_fifo",
       "a FIFO as --vocab",
       train_with({"--vocab", "bad/fifo"}),
       kData,
       {"bad/fifo", "FIFO"}},
      {"i11_config_fifo",
       "a FIFO as --config",
       {"train", "--data", "data/train.tsv", "--out", "out", "--steps", "1", "--config",
        "bad/fifo"},
       kData,
       {"bad/fifo", "FIFO"}},
      {"i11_data_symlink_loop",
       "a symlink loop as --data",
       train_with({"--data", "bad/loop"}),
       kData,
       {"bad/loop", "symbolic link loop"}},
      {"i11_model_symlink_loop",
       "a symlink loop as --model",
       {"generate", "--model", "bad/loop", "--input", "今天"},
       kData,
       {"bad/loop", "symbolic link loop"}},
      {"i11_gen_copy_max_len_1e9",
       "gen-copy --max-len 1000000000",
       {"gen-copy", "--out", "gc", "--max-len", "1000000000"},
       kData,
       {"too large", "needs", "available"}},
      {"i11_gen_copy_train_1e12",
       "gen-copy --train 1000000000000",
       {"gen-copy", "--out", "gc", "--train", "1000000000000"},
       kData,
       {"too large", "needs", "available"}},
      {"i11_gen_copy_max_len_in_budget",
       "gen-copy --train 1 --valid 1 --max-len 1000000000",
       {"gen-copy", "--out", "gc", "--train", "1", "--valid", "1", "--max-len", "1000000000"},
       kUsage,
       {"max_len", "1048576"}},
      {"i11_gen_copy_length_sum_overflow",
       "gen-copy --min-len 1 --max-len 2^63-1 (the memory estimate added the two in int64; found "
       "by fuzz_cli)",
       {"gen-copy", "--out", "gc", "--min-len", "1", "--max-len", "9223372036854775807"},
       kData,
       {"too large", "needs", "available"}},
      {"i11_generate_huge_beam",
       "generate --beam 1000000000",
       {"generate", "--model", "run/checkpoint.bin", "--input", "今天", "--beam", "1000000000",
        "--n-best", "1"},
       kData,
       {"too large", "beam", "available"}},
      {"generate_huge_num_samples",
       "generate --sample --num-samples 1000000000 (the draws are one batch: it allocated until "
       "the machine ran out)",
       {"generate", "--model", "run/checkpoint.bin", "--input", "今天", "--sample", "--num-samples",
        "1000000000"},
       kData,
       {"too large", "sampled draw", "available"}},
      {"eval_huge_beam",
       "eval --beam 2^63-1 (an internal error: the beam outgrew std::vector)",
       {"eval", "--model", "ck_good/checkpoint.bin", "--data", "data/valid.tsv", "--beam",
        "9223372036854775807"},
       kData,
       {"eval:", "too large", "beam", "available"}},
      {"i11_stop_not_utf8",
       "--stop text that is not UTF-8, with --json",
       {"generate", "--model", "run/checkpoint.bin", "--input", "今天", "--stop", "\xa4\xa7",
        "--json"},
       kUsage,
       {"--stop", "invalid UTF-8"}},
      {"i11_stop_not_utf8_plain",
       "--stop text that is not UTF-8",
       {"generate", "--model", "run/checkpoint.bin", "--input", "今天", "--stop", "\xa4"},
       kUsage,
       {"--stop", "invalid UTF-8"}},
      {"i11_input_too_long",
       "a 100,000-character line on stdin (refused before tokenizing)",
       {"generate", "--model", "run/checkpoint.bin"},
       kData,
       {"stdin:1", "100000 characters", "max_positions"},
       repeat("今", 100000) + "\n"},
      {"i11_resume_bad_rng_state",
       "checksum-valid checkpoint with a bad RNG state",
       resume_from("bad_rng"),
       kData,
       {"ck_bad_rng/checkpoint.bin", "rng_state"}},
      {"i11_export_vocab_mismatch",
       "export of a checkpoint whose vocabulary and config disagree",
       export_from("vocab_mismatch"),
       kData,
       {"vocab_size", "44 tokens"}},
      {"i11_export_other_model",
       "export of a checkpoint whose weights belong to another model",
       export_from("other_model"),
       kData,
       {"embed.weight", "[45,4]", "[45,8]"}},
      {"i11_resume_float64_params",
       "checkpoint with float64 parameters",
       resume_from("float64_params"),
       kData,
       {"float64", "float32"}},
      {"i11_stdin_blank_line",
       "a blank line among generate's stdin lines (the others are answered)",
       {"generate", "--model", "run/checkpoint.bin"},
       kData,
       {"stdin:2", "empty input", "1 of 3 input lines"},
       "今天\n\n天气\n"},
      {"i11_config_wrong_vocab_size",
       "--config whose vocab_size disagrees with the vocabulary",
       {"train", "--data", "data/train.tsv", "--out", "out", "--steps", "1", "--eval-max", "1",
        "--no-progress", "--config", "bad/config_wrong_vocab_size.json"},
       kData,
       {"vocab_size 10", "differs"}},
      {"i11_empty_arg_then_unknown_flag",
       "an empty word, then an unknown flag (CLI11 looped forever; found by fuzz_cli)",
       train_with({"", "--presep-k", "2d"}),
       kUsage,
       {"argument 13 is empty"}},
      {"i11_trace_too_big",
       "--trace of a 200-character input, --max-new 255, --beam 8",
       {"generate", "--model", "run/checkpoint.bin", "--input", repeat("今", 200), "--max-new",
        "255", "--beam", "8", "--trace", "t.json"},
       kUsage,
       {"--trace", "attention weights", "limit"}},
      {"generate_batch_size_zero",
       "--batch-size 0",
       {"generate", "--model", "run/checkpoint.bin", "--input", "今天", "--batch-size", "0"},
       kUsage,
       {"--batch-size"}},
      {"generate_stream_batched",
       "--stream with --batch-size above 1",
       {"generate", "--model", "run/checkpoint.bin", "--input", "今天", "--stream", "--batch-size",
        "4"},
       kUsage,
       {"--stream", "--batch-size 1"}},
      {"generate_num_samples_without_sample",
       "--num-samples 2 without --sample",
       {"generate", "--model", "run/checkpoint.bin", "--input", "今天", "--num-samples", "2"},
       kUsage,
       {"--num-samples", "--sample"}},
      {"generate_num_samples_zero",
       "--num-samples 0",
       {"generate", "--model", "run/checkpoint.bin", "--input", "今天", "--sample", "--num-samples",
        "0"},
       kUsage,
       {"--num-samples"}},
      {"generate_stream_num_samples",
       "--stream with --num-samples 2",
       {"generate", "--model", "run/checkpoint.bin", "--input", "今天", "--sample", "--num-samples",
        "2", "--stream"},
       kUsage,
       {"--stream", "--num-samples"}},
      {"generate_input_and_input_file",
       "--input and --input-file together",
       {"generate", "--model", "run/checkpoint.bin", "--input", "今天", "--input-file",
        "data/train.tsv"},
       kUsage,
       {"--input", "--input-file"}},
      {"generate_missing_input_file",
       "--input-file that does not exist",
       {"generate", "--model", "run/checkpoint.bin", "--input-file", "nope.txt"},
       kData,
       {"nope.txt"}},
      {"generate_model_dir_without_model",
       "--model names a directory with neither checkpoint.bin nor an export",
       {"generate", "--model", "bad", "--input", "今天"},
       kData,
       {"bad", "checkpoint.bin", "config.json"}},
      {"generate_export_without_spm",
       "--model names an export whose metadata calls for a spm.model that is missing",
       {"generate", "--model", "bad/export_no_spm", "--input", "今天"},
       kData,
       {"bad/export_no_spm", "SentencePiece", "spm.model is missing"}},
      {"eval_model_dir_without_model",
       "eval --model names a directory with neither checkpoint.bin nor an export",
       {"eval", "--model", "bad", "--data", "data/valid.tsv"},
       kData,
       {"bad", "checkpoint.bin", "config.json"}},
      {"serve_model_dir_without_model",
       "serve --model names a directory with neither checkpoint.bin nor an export",
       {"serve", "--model", "bad", "--port", "0"},
       kData,
       {"bad", "checkpoint.bin", "config.json"}},
      {"serve_api_key_file_missing",
       "serve --api-key-file names a file that does not exist",
       {"serve", "--model", "bad", "--api-key-file", "bad/no_keys.txt", "--port", "0"},
       kData,
       {"cannot read the API key file bad/no_keys.txt"}},
      {"serve_api_key_file_empty",
       "serve --api-key-file names a file with no key",
       {"serve", "--model", "bad", "--api-key-file", "bad/empty.tsv", "--port", "0"},
       kData,
       {"the API key file bad/empty.tsv holds no key"}},
      {"serve_api_key_with_a_space",
       "serve --api-key-file holds a key with a tab inside (a TSV file given by mistake)",
       {"serve", "--model", "bad", "--api-key-file", "data/valid.tsv", "--port", "0"},
       kData,
       {"data/valid.tsv:1", "an API key has a space or a control character inside"}},
      {"serve_threads_is_http_threads",
       "serve --threads (the old name of --http-threads)",
       {"serve", "--model", "bad", "--threads", "8", "--port", "0"},
       kUsage,
       {"serve has no --threads", "--http-threads"}},

      // ---- an output is never one of the command's inputs -------------------------------------
      {"eval_out_is_model",
       "eval --out names the --model checkpoint",
       {"eval", "--model", "o/e1/checkpoint.bin", "--data", "data/valid.tsv", "--out",
        "o/e1/checkpoint.bin"},
       kUsage,
       {"--out o/e1/checkpoint.bin is the same file as the --model input o/e1/checkpoint.bin"}},
      {"eval_out_is_model_of_run_dir",
       "eval --out names the checkpoint.bin of the --model run directory",
       {"eval", "--model", "o/e2", "--data", "data/valid.tsv", "--out", "o/e2/checkpoint.bin"},
       kUsage,
       {"is the same file as the --model o/e2 input o/e2/checkpoint.bin"}},
      {"eval_out_is_data",
       "eval --out names the --data TSV",
       {"eval", "--model", "run/checkpoint.bin", "--data", "o/e3/valid.tsv", "--out",
        "o/e3/valid.tsv"},
       kUsage,
       {"--out o/e3/valid.tsv is the same file as the --data input o/e3/valid.tsv"}},
      {"eval_out_symlink_to_model",
       "eval --out is a symbolic link to the --model checkpoint",
       {"eval", "--model", "o/e4/checkpoint.bin", "--data", "data/valid.tsv", "--out", "o/e4/link"},
       kUsage,
       {"--out o/e4/link is the same file as the --model input o/e4/checkpoint.bin"}},
      {"eval_out_hard_link_to_data",
       "eval --out is a hard link to the --data TSV",
       {"eval", "--model", "run/checkpoint.bin", "--data", "o/e5/valid.tsv", "--out",
        "o/e5/hyps.txt"},
       kUsage,
       {"--out o/e5/hyps.txt is the same file as the --data input o/e5/valid.tsv"}},
      {"generate_output_is_model",
       "generate --output names the --model checkpoint",
       {"generate", "--model", "o/g1/checkpoint.bin", "--input", "今天", "--output",
        "o/g1/checkpoint.bin"},
       kUsage,
       {"--output o/g1/checkpoint.bin is the same file as the --model input"}},
      {"generate_output_is_input_file",
       "generate --output names the --input-file (it was emptied before being read)",
       {"generate", "--model", "run/checkpoint.bin", "--input-file", "o/g2/in.txt", "--output",
        "o/g2/in.txt"},
       kUsage,
       {"--output o/g2/in.txt is the same file as the --input-file input o/g2/in.txt"}},
      {"generate_output_symlink_to_input_file",
       "generate --output is a symbolic link to the --input-file",
       {"generate", "--model", "run/checkpoint.bin", "--input-file", "o/g3/in.txt", "--output",
        "o/g3/out.txt"},
       kUsage,
       {"--output o/g3/out.txt is the same file as the --input-file input o/g3/in.txt"}},
      {"generate_output_hard_link_to_model",
       "generate --output is a hard link to the --model checkpoint",
       {"generate", "--model", "o/g4/checkpoint.bin", "--input", "今天", "--output",
        "o/g4/out.txt"},
       kUsage,
       {"--output o/g4/out.txt is the same file as the --model input o/g4/checkpoint.bin"}},
      {"generate_trace_is_model",
       "generate --trace names the --model checkpoint",
       {"generate", "--model", "o/g5/checkpoint.bin", "--input", "今天", "--trace",
        "o/g5/checkpoint.bin"},
       kUsage,
       {"--trace o/g5/checkpoint.bin is the same file as the --model input"}},
      {"generate_output_is_export_weights",
       "generate --output names the model.safetensors of the --model export",
       {"generate", "--model", "o/g6", "--input", "今天", "--output", "o/g6/model.safetensors"},
       kUsage,
       {"is the same file as the --model o/g6 input o/g6/model.safetensors"}},
      {"generate_output_is_directory",
       "generate --output names a directory",
       {"generate", "--model", "run/checkpoint.bin", "--input", "今天", "--output", "data"},
       kUsage,
       {"--output data is a directory"}},
      {"average_out_is_input",
       "average --out names one of its checkpoints, with --overwrite",
       {"average", "o/a1/checkpoint.bin", "run/checkpoint.bin", "--out", "o/a1/checkpoint.bin",
        "--overwrite"},
       kUsage,
       {"--out o/a1/checkpoint.bin is the same file as the checkpoint input o/a1/checkpoint.bin"}},
      {"average_out_symlink_to_input",
       "average --out is a symbolic link to one of its checkpoints, with --overwrite",
       {"average", "run/checkpoint.bin", "o/a2/checkpoint.bin", "--out", "o/a2/link",
        "--overwrite"},
       kUsage,
       {"--out o/a2/link is the same file as the checkpoint input o/a2/checkpoint.bin"}},
      {"average_out_is_directory",
       "average --out names a directory, with --overwrite",
       {"average", "run/checkpoint.bin", "ck_good/checkpoint.bin", "--out", "data", "--overwrite"},
       kData,
       {"data: cannot save: is a directory"}},
      {"export_out_holds_model",
       "export --out is the directory of a --model named model.safetensors",
       {"export", "--model", "o/x1/model.safetensors", "--out", "o/x1"},
       kUsage,
       {"--out o/x1/model.safetensors is the same file as the --model input"}},
      {"export_out_file_hard_link_to_model",
       "export --out holds config.json, a hard link to the --model checkpoint",
       {"export", "--model", "o/x2/checkpoint.bin", "--out", "o/x2/out"},
       kUsage,
       {"--out o/x2/out/config.json is the same file as the --model input o/x2/checkpoint.bin"}},
      {"vocab_out_holds_data",
       "vocab --out holds the --data TSV as spm.vocab.tsv, with --overwrite",
       {"vocab", "--data", "o/v1/spm.vocab.tsv", "--out", "o/v1", "--size", "60", "--overwrite"},
       kUsage,
       {"--out o/v1/spm.vocab.tsv is the same file as the --data input o/v1/spm.vocab.tsv"}},
      {"vocab_out_file_symlink_to_data",
       "vocab --out holds source.model, a symbolic link to the --data TSV",
       {"vocab", "--data", "o/v2/train.tsv", "--out", "o/v2/out", "--size", "60", "--separate"},
       kUsage,
       {"--out o/v2/out/source.model is the same file as the --data input o/v2/train.tsv"}},
      {"walkthrough_out_is_embed_trace",
       "walkthrough --out names the --embed-trace input",
       {"walkthrough", "--embed-trace", "o/w1/t.json", "--out", "o/w1/t.json"},
       kUsage,
       {"--out o/w1/t.json is the same file as the --embed-trace input o/w1/t.json"}},
      {"walkthrough_trace_is_checkpoint",
       "walkthrough --trace names the --f15-checkpoint",
       {"walkthrough", "--f15-checkpoint", "o/w2/checkpoint.bin", "--trace", "o/w2/checkpoint.bin"},
       kUsage,
       {"--trace o/w2/checkpoint.bin is the same file as the --f15-checkpoint input"}},
      {"walkthrough_write_f15_over_checkpoint",
       "walkthrough --write-f15 into the directory of the --f15-checkpoint",
       {"walkthrough", "--f15-checkpoint", "o/w3/checkpoint.bin", "--write-f15", "o/w3"},
       kUsage,
       {"--write-f15 o/w3/checkpoint.bin is the same file as the --f15-checkpoint input"}},
      {"walkthrough_trace_is_directory",
       "walkthrough --trace names a directory",
       {"walkthrough", "--trace", "data"},
       kUsage,
       {"--trace data is a directory"}},
      {"train_out_holds_data",
       "train --data is the metrics.csv of its own --out, with --overwrite",
       train_with({"--data", "o/t1/metrics.csv", "--out", "o/t1", "--overwrite"}),
       kUsage,
       {"--out o/t1/metrics.csv is the same file as the --data input o/t1/metrics.csv"}},
      {"train_out_checkpoint_is_valid",
       "train --valid is a hard link to a checkpoint-N.bin in its --out, with --overwrite",
       train_with({"--valid", "o/t2/valid.tsv", "--out", "o/t2", "--overwrite"}),
       kUsage,
       {"--out o/t2/checkpoint-4.bin is the same file as the --valid input o/t2/valid.tsv"}},
      // ---- bounded input, clear messages ------------------------------------------------------
      {"i38_input_file_dev_zero",
       "generate --input-file /dev/zero (a device that never ends)",
       {"generate", "--model", "run/checkpoint.bin", "--input-file", "/dev/zero"},
       kData,
       {"/dev/zero: is a device or socket, not a file of inputs"}},
      {"i38_stdin_endless_line",
       "a 1.2 MB line on stdin (reading stops at the bound, 1 MiB for this model)",
       {"generate", "--model", "run/checkpoint.bin"},
       kData,
       {"stdin:1: the line is longer than 1048576 bytes", "stopped reading"},
       repeat("今", 400000) + "\n"},
      {"i38_input_file_directory",
       "generate --input-file names a directory",
       {"generate", "--model", "run/checkpoint.bin", "--input-file", "data"},
       kData,
       {"data: is a directory, not a file of inputs"}},
      {"i38_vocab_long_line",
       "vocab on a TSV line of 50,000 characters per field",
       {"vocab", "--data", "bad/long_line.tsv", "--out", "o/v3", "--size", "60"},
       kData,
       {"bad/long_line.tsv:1 (source): is 50000 bytes long", "4192 bytes"}},
      {"i38_eval_model_without_sep",
       "eval of the F15 model (decoder-only, no <sep> in its vocabulary)",
       {"eval", "--model", "f15/checkpoint.bin", "--data", "data/valid.tsv"},
       kData,
       {"f15/checkpoint.bin: is a decoder-only model whose vocabulary has no <sep> token"}},
      {"i38_resume_averaged",
       "--resume from a checkpoint written by seqtape average",
       resume_from("averaged"),
       kData,
       {"ck_averaged/checkpoint.bin: was written by seqtape average", "no optimizer state",
        "resume from one of the run's own checkpoints"}},
      {"i38_export_linear_layout",
       "an export whose metadata says linear_layout out_in",
       {"generate", "--model", "bad/export_out_in", "--input", "今天"},
       kData,
       {"bad/export_out_in/model.safetensors: linear_layout is 'out_in'"}},
      // ---- quantized exports (export --compute-type int8|bf16) ------------------------------
      {"export_compute_type_auto",
       "export --compute-type auto",
       {"export", "--model", "run/checkpoint.bin", "--out", "q/auto", "--compute-type", "auto"},
       kUsage,
       {"--compute-type must be f32, int8 or bf16, got 'auto'"}},
      {"quant_other_compute_type",
       "generate --compute-type bf16 on an int8 export",
       {"generate", "--model", "q/int8", "--input", "今天", "--compute-type", "bf16"},
       kUsage,
       {"--compute-type bf16: the model is an export quantized as int8"}},
      {"quant_scale_missing",
       "an int8 export without one matrix's scale",
       {"generate", "--model", "q/no_scale", "--input", "今天"},
       kData,
       {"q/no_scale/model.safetensors", "\"decoder.layers.0.ffn.w1\" is I8 but its scale",
        "\"decoder.layers.0.ffn.w1.scale\"", "is missing"}},
      {"quant_scale_shape",
       "an int8 export with a scale of the wrong shape",
       {"generate", "--model", "q/scale_shape", "--input", "今天"},
       kData,
       {"q/scale_shape/model.safetensors", "\"decoder.layers.0.ffn.w1.scale\" has shape [1,",
        "one per output"}},
      {"quant_scale_dtype",
       "an int8 export with an F64 scale",
       {"generate", "--model", "q/scale_f64", "--input", "今天"},
       kData,
       {"q/scale_f64/model.safetensors", "\"decoder.layers.0.ffn.w1.scale\" is F64",
        "scales of an int8 export are F32"}},
      {"quant_scale_zero",
       "an int8 export with a scale of 0",
       {"generate", "--model", "q/scale_zero", "--input", "今天"},
       kData,
       {"q/scale_zero/model.safetensors", "\"decoder.layers.0.ffn.w1.scale\" holds 0", "at index 2",
        "finite and > 0"}},
      {"quant_scale_nan",
       "an int8 export with a NaN scale",
       {"eval", "--model", "q/scale_nan", "--data", "data/valid.tsv"},
       kData,
       {"q/scale_nan/model.safetensors", "\"decoder.layers.0.ffn.w1.scale\" holds nan",
        "at index 1"}},
      {"quant_minus_128",
       "an int8 export holding the value -128",
       {"eval", "--model", "q/minus_128", "--data", "data/valid.tsv"},
       kData,
       {"q/minus_128/model.safetensors", "\"decoder.layers.0.ffn.w1\" holds -128 at element 3",
        "[-127, 127]"}},
      {"quant_i8_bias",
       "an int8 export with I8 data for a bias (which stays float32)",
       {"generate", "--model", "q/i8_bias", "--input", "今天"},
       kData,
       {"q/i8_bias/model.safetensors", "\"out_proj.bias\" is I8, but it stays float32"}},
      {"quant_f32_matrix",
       "an int8 export with one matrix left F32",
       {"generate", "--model", "q/f32_matrix", "--input", "今天"},
       kData,
       {"q/f32_matrix/model.safetensors", "\"decoder.layers.0.ffn.w1\" is F32",
        "int8 export stores it as I8"}},
      {"quant_no_compute_type",
       "I8 tensors without the compute_type metadata",
       {"generate", "--model", "q/no_compute_type", "--input", "今天"},
       kData,
       {"q/no_compute_type/model.safetensors", "is I8, but the metadata has no compute_type"}},
      {"quant_says_bf16",
       "I8 tensors under compute_type bf16",
       {"generate", "--model", "q/says_bf16", "--input", "今天"},
       kData,
       {"q/says_bf16/model.safetensors", "is I8, but the file's compute_type is bf16"}},
      {"quant_says_f32",
       "compute_type f32 in a quantized export",
       {"generate", "--model", "q/says_f32", "--input", "今天"},
       kData,
       {"q/says_f32/model.safetensors", "compute_type is 'f32'",
        "a quantized export says int8 or bf16"}},
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
  const std::string unit = "今";
  const size_t n_units = row.stdin_text.size() / unit.size();
  if (row.stdin_text.size() > 64 &&
      row.stdin_text == repeat(unit, static_cast<int>(n_units)) + "\n") {
    s = "printf '" + unit + "%.0s' {1.." + std::to_string(n_units) + "} | seqtape";
  } else if (!row.stdin_text.empty()) {
    std::string esc;
    for (char c : row.stdin_text) esc += c == '\n' ? std::string("\\n") : std::string(1, c);
    s = "printf '" + esc + "' | seqtape";
  }
  for (const auto& a : row.args) {
    // A long run of one character (the too-long inputs) as the shell expression that makes it.
    const std::string unit = "今";
    if (a.size() > 64 && a.size() % unit.size() == 0 &&
        a == repeat(unit, static_cast<int>(a.size() / unit.size()))) {
      s += " \"$(printf '" + unit + "%.0s' {1.." + std::to_string(a.size() / unit.size()) + "})\"";
      continue;
    }
    s += " " + shell_word(a);
  }
  return s;
}

void PrintTo(const Row& row, std::ostream* os) {
  *os << row.id;
}

class BadInput : public ::testing::TestWithParam<Row> {};

TEST_P(BadInput, ExitsWithItsClassAndSaysWhatIsWrong) {
  const Row& row = GetParam();
  const CliResult r = run_cli(row.args, Workspace::get().dir(), row.stdin_text);
  SCOPED_TRACE(command_line(row) + "\nstderr: " + r.err + "\nstdout: " + r.out.substr(0, 400));
  EXPECT_EQ(r.exit_code, row.exit_code);
  EXPECT_NE(r.exit_code, 4) << "an internal error for a user's mistake";
  EXPECT_LT(r.exit_code, 128) << "killed by a signal";
  for (const auto& w : row.words) EXPECT_NE(r.err.find(w), std::string::npos) << "'" << w << "'";
  EXPECT_EQ(r.err.find("not in range"), std::string::npos) << "CLI11's raw range message";
}

INSTANTIATE_TEST_SUITE_P(Cli, BadInput, ::testing::ValuesIn(rows()),
                         [](const ::testing::TestParamInfo<Row>& i) { return i.param.id; });

// --compute-type on a CPU without the units (SEQTAPE_ROWWISE_PATH=portable: no AVX2 for int8,
// no AVX-512 BF16): int8 and bf16 are usage errors naming what is missing; auto falls back to
// f32 and says so, decoding what f32 decodes.
TEST(ComputeTypeCli, MissingUnitsAreNamedAndAutoFallsBackToF32) {
  const std::string dir = Workspace::get().dir();
  const std::vector<std::string> gen = {"generate", "--model", "run/checkpoint.bin", "--input",
                                        "今天"};
  const auto with = [&](const std::string& type) {
    std::vector<std::string> a = gen;
    a.insert(a.end(), {"--compute-type", type});
    return run_cli(a, dir);
  };
  const CliResult f32 = run_cli(gen, dir);
  ASSERT_EQ(f32.exit_code, 0) << f32.err;
  struct Restore {
    ~Restore() { unsetenv("SEQTAPE_ROWWISE_PATH"); }
  } restore;
  setenv("SEQTAPE_ROWWISE_PATH", "portable", 1);
  const CliResult int8 = with("int8"), bf16 = with("bf16"), chosen = with("auto");
  EXPECT_EQ(int8.exit_code, 2) << int8.err;
  EXPECT_NE(int8.err.find("--compute-type int8: this CPU lacks AVX2"), std::string::npos)
      << int8.err;
  EXPECT_EQ(bf16.exit_code, 2) << bf16.err;
  EXPECT_NE(bf16.err.find("lacks AVX-512 BF16"), std::string::npos) << bf16.err;
  EXPECT_EQ(chosen.exit_code, 0) << chosen.err;
  EXPECT_NE(chosen.err.find("compute type: auto chose f32"), std::string::npos) << chosen.err;
  EXPECT_EQ(chosen.out, f32.out);
}

// The good side of the quantized-export rows: `export --compute-type int8` then generate from
// the export (its type taken without the flag, or with auto) gives the tokens and score that
// --compute-type int8 gives on the checkpoint.
TEST(ComputeTypeCli, QuantizedExportDecodesWhatItsTypeDecodes) {
  const std::string dir = Workspace::get().dir();
  const CliResult exported = run_cli(
      {"export", "--model", "run/checkpoint.bin", "--out", "q_cli", "--compute-type", "int8"}, dir);
  ASSERT_EQ(exported.exit_code, 0) << exported.err;
  EXPECT_NE(exported.out.find("(int8)"), std::string::npos) << exported.out;
  const auto decode = [&](const std::string& model, std::vector<std::string> extra) {
    std::vector<std::string> a = {"generate", "--model", model,       "--input",
                                  "今天",     "--json",  "--beam",    "3",
                                  "--n-best", "1",       "--max-new", "8"};
    a.insert(a.end(), extra.begin(), extra.end());
    const CliResult r = run_cli(a, dir);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return std::make_pair(nlohmann::json::parse(r.out), r.err);
  };
  const auto [want, _] = decode("run/checkpoint.bin", {"--compute-type", "int8"});
  for (const std::vector<std::string>& flag :
       {std::vector<std::string>{}, std::vector<std::string>{"--compute-type", "auto"}}) {
    const auto [got, err] = decode("q_cli", flag);
    EXPECT_EQ(got["tokens"], want["tokens"]);
    EXPECT_EQ(got["score"], want["score"]);
    if (!flag.empty()) {
      EXPECT_NE(err.find("auto chose int8"), std::string::npos) << err;
    }
  }
}

// SEQTAPE_ISA=avx2, and oneDNN's own ONEDNN_MAX_CPU_ISA=AVX2, put --compute-type int8 on the AVX2
// kernel: it decodes the tokens and score of the default path (the int8 sums are exact integers
// on every path). That the run is on AVX2 shows in what it refuses: auto takes f32 (it takes int8
// only on VNNI), and bf16 is a usage error (no AVX-512 BF16 under the cap).
TEST(ComputeTypeCli, ForcedAvx2DecodesWhatTheDefaultPathDecodes) {
  if (!kernels::cpu_has(kernels::CpuPath::Avx2)) GTEST_SKIP() << "this CPU lacks AVX2";
  const std::string dir = Workspace::get().dir();
  const auto decode = [&](const std::string& type) {
    return run_cli({"generate", "--model", "run/checkpoint.bin", "--input", "今天", "--json",
                    "--beam", "3", "--n-best", "1", "--max-new", "8", "--compute-type", type},
                   dir);
  };
  const CliResult want = decode("int8");
  ASSERT_EQ(want.exit_code, 0) << want.err;
  const nlohmann::json wanted = nlohmann::json::parse(want.out);
  ASSERT_FALSE(wanted["tokens"].empty()) << want.out;
  for (const auto& [var, value] : {std::pair<const char*, const char*>{"SEQTAPE_ISA", "avx2"},
                                   {"ONEDNN_MAX_CPU_ISA", "AVX2"}}) {
    struct Restore {
      const char* var;
      ~Restore() { unsetenv(var); }
    } restore{var};
    setenv(var, value, 1);
    const CliResult got = decode("int8"), chosen = decode("auto"), bf16 = decode("bf16");
    ASSERT_EQ(got.exit_code, 0) << var << ": " << got.err;
    const nlohmann::json gotten = nlohmann::json::parse(got.out);
    EXPECT_EQ(gotten["tokens"], wanted["tokens"]) << var;
    EXPECT_EQ(gotten["score"], wanted["score"]) << var;
    EXPECT_NE(chosen.err.find("compute type: auto chose f32"), std::string::npos)
        << var << ": " << chosen.err;
    EXPECT_EQ(bf16.exit_code, 2) << var << ": " << bf16.err;
    EXPECT_NE(bf16.err.find("lacks AVX-512 BF16"), std::string::npos) << var << ": " << bf16.err;
  }
}

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

// ---- the good side of the fixes --------------------------------------------------------------

// A --config without vocab_size takes it from the vocabulary (it used to be refused).
TEST(Issue11, ConfigWithoutVocabSizeTakesItFromTheVocabulary) {
  const CliResult r =
      run_cli({"train", "--data", "data/train.tsv", "--out", "out_novocab", "--steps", "1",
               "--eval-max", "1", "--no-progress", "--config", "bad/config_no_vocab_size.json"},
              Workspace::get().dir());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const std::string dir = Workspace::get().dir() + "/out_novocab/";
  const auto cfg = nlohmann::json::parse(read_file(dir + "config.json"));
  const std::string vocab = read_file(dir + "vocab.txt");
  EXPECT_EQ(cfg["vocab_size"], std::count(vocab.begin(), vocab.end(), '\n'));
  EXPECT_EQ(cfg["d_model"], 4);
}

// --valid-max 0 says so, instead of "too few examples".
TEST(Issue11, ValidMaxZeroIsNamed) {
  const CliResult r =
      run_cli(train_with({"--out", "out_vmax", "--valid-fraction", "0.5", "--valid-max", "0"}),
              Workspace::get().dir());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("--valid-max 0"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("too few examples"), std::string::npos) << r.out;
}

// Under a 4 GiB address-space limit, a model in bounds but far beyond it is refused before
// allocating, naming RLIMIT_AS (it used to end in std::bad_alloc: exit 134).
TEST(Issue11, AddressSpaceLimitIsRespected) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer reserves terabytes of shadow address space: no ulimit -v";
#endif
  const CliResult r = run_cli(train_with({"--out", "out_rlimit", "--dec-layers", "1000",
                                          "--d-model", "512", "--heads", "1", "--ffn", "2048"}),
                              Workspace::get().dir(), "", 4L << 20);
  EXPECT_EQ(r.exit_code, 3) << r.err;
  EXPECT_NE(r.err.find("needs"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("RLIMIT_AS"), std::string::npos) << r.err;
}

// A blank stdin line is answered with its own error; the lines around it are decoded.
TEST(Issue11, BlankStdinLineLeavesTheOthersDecoded) {
  const CliResult r = run_cli({"generate", "--model", "run/checkpoint.bin", "--json"},
                              Workspace::get().dir(), "今天\n\n天气\n");
  EXPECT_EQ(r.exit_code, 3) << r.err;
  std::istringstream lines(r.out);
  std::vector<nlohmann::json> out;
  for (std::string l; std::getline(lines, l);) out.push_back(nlohmann::json::parse(l));
  ASSERT_EQ(out.size(), 3u) << r.out;
  EXPECT_EQ(out[0]["input"], "今天");
  EXPECT_TRUE(out[0].contains("text"));
  EXPECT_TRUE(out[1].contains("error"));
  EXPECT_EQ(out[2]["input"], "天气");
  EXPECT_TRUE(out[2].contains("text"));
}

// generate --json: one line per input, parsed; stderr must stay quiet.
std::vector<nlohmann::json> generate_json(const std::vector<std::string>& extra) {
  std::vector<std::string> args = {"generate", "--model", "run/checkpoint.bin", "--json"};
  args.insert(args.end(), extra.begin(), extra.end());
  const CliResult r = run_cli(args, Workspace::get().dir());
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "") << "--json keeps stderr quiet";
  std::vector<nlohmann::json> out;
  std::istringstream in(r.out);
  for (std::string line; std::getline(in, line);) out.push_back(nlohmann::json::parse(line));
  return out;
}

// Batches keep input order and give each line what it gives alone; --output writes the same.
TEST(GenerateCli, BatchesKeepInputOrderAndMatchOneAtATime) {
  const std::string dir = Workspace::get().dir();
  const std::vector<std::string> lines = {"今天", "天气很好", "好", "今天天气", "天", "气很"};
  std::string text;
  for (const auto& l : lines) text += l + "\n";
  write_file(dir + "/batch_inputs.txt", text);
  const auto one = generate_json({"--input-file", "batch_inputs.txt", "--batch-size", "1"});
  const auto four = generate_json({"--input-file", "batch_inputs.txt", "--batch-size", "4"});
  ASSERT_EQ(one.size(), lines.size());
  ASSERT_EQ(four.size(), lines.size());
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(four[i]["input"], lines[i]);
    EXPECT_EQ(four[i]["tokens"], one[i]["tokens"]) << lines[i];
    EXPECT_NEAR(four[i]["score"].get<double>(), one[i]["score"].get<double>(), 1e-5);
  }
  const CliResult r = run_cli({"generate", "--model", "run/checkpoint.bin", "--input-file",
                               "batch_inputs.txt", "--batch-size", "3", "--output", "batch.out"},
                              dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "");
  std::string want;
  for (const auto& j : one) want += j["text"].get<std::string>() + "\n";
  EXPECT_EQ(read_file(dir + "/batch.out"), want);
}

// A file saved by a Windows editor (byte-order mark, CRLF) reads as the same lines without them.
TEST(GenerateCli, InputFileWithByteOrderMarkAndCrlfReadsAsPlainLines) {
  const std::string dir = Workspace::get().dir();
  write_file(dir + "/plain_inputs.txt", "今天\n天气很好\n");
  write_file(dir + "/windows_inputs.txt", "\xEF\xBB\xBF今天\r\n天气很好\r\n");
  const auto plain = generate_json({"--input-file", "plain_inputs.txt"});
  const auto windows = generate_json({"--input-file", "windows_inputs.txt"});
  ASSERT_EQ(plain.size(), 2u);
  ASSERT_EQ(windows.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(windows[i]["input"], plain[i]["input"]);
    EXPECT_EQ(windows[i]["tokens"], plain[i]["tokens"]);
    EXPECT_EQ(windows[i]["score"], plain[i]["score"]);
    EXPECT_EQ(windows[i]["unk"], 0);
  }
}

TEST(GenerateCli, NumSamplesUnkCountAndModelDirectories) {
  const auto s =
      generate_json({"--input", "今天", "--sample", "--seed", "5", "--num-samples", "3"});
  ASSERT_EQ(s.size(), 1u);
  ASSERT_EQ(s[0]["samples"].size(), 3u);
  EXPECT_EQ(s[0]["samples"][0]["tokens"], s[0]["tokens"]);
  const auto seed6 = generate_json({"--input", "今天", "--sample", "--seed", "6"});
  EXPECT_EQ(s[0]["samples"][1]["tokens"], seed6.at(0)["tokens"]) << "draw 1 uses --seed + 1";
  // An input made only of characters the copy-task vocabulary lacks.
  const auto u = generate_json({"--input", "Zq"});
  EXPECT_EQ(u.at(0)["unk"], 2);
  const CliResult warn = run_cli({"generate", "--model", "run/checkpoint.bin", "--input", "Zq"},
                                 Workspace::get().dir());
  EXPECT_NE(warn.err.find("warning: --input: 2 character(s) not in the vocabulary"),
            std::string::npos)
      << warn.err;
  // A run directory and an export give the checkpoint's tokens.
  const CliResult ex = run_cli({"export", "--model", "run/checkpoint.bin", "--out", "exported"},
                               Workspace::get().dir());
  ASSERT_EQ(ex.exit_code, 0) << ex.err;
  // export takes the run directory too, and writes the same files.
  const CliResult ex_run =
      run_cli({"export", "--model", "run", "--out", "exported_run"}, Workspace::get().dir());
  ASSERT_EQ(ex_run.exit_code, 0) << ex_run.err;
  for (const char* f : {"model.safetensors", "config.json", "vocab.txt"})
    EXPECT_EQ(read_file(Workspace::get().dir() + "/exported_run/" + f),
              read_file(Workspace::get().dir() + "/exported/" + f))
        << f;
  const auto want = generate_json({"--input", "今天天气", "--beam", "2"});
  for (const std::string m : {"run", "exported"}) {
    std::vector<std::string> args = {"generate", "--model", m,   "--input",
                                     "今天天气", "--beam",  "2", "--json"};
    const CliResult r = run_cli(args, Workspace::get().dir());
    ASSERT_EQ(r.exit_code, 0) << m << ": " << r.err;
    EXPECT_EQ(nlohmann::json::parse(r.out)["tokens"], want.at(0)["tokens"]) << m;
  }
}

// Reads from fd until a newline, EOF, or 60 s without a byte (a hang is the failure).
std::string read_line_from(int fd) {
  std::string line;
  char c = 0;
  pollfd p{fd, POLLIN, 0};
  while (::poll(&p, 1, 60'000) == 1 && ::read(fd, &c, 1) == 1) {
    line += c;
    if (c == '\n') break;
  }
  return line;
}

// --batch-size 1 on stdin answers the first line while stdin is still open: the second line is
// only written after the first answer arrived (a read-to-the-end implementation would hang).
TEST(GenerateCli, StdinLinesAreAnsweredAsTheyArrive) {
  std::signal(SIGPIPE, SIG_IGN);  // a child that died early fails the test, not the process
  int in[2], out[2];
  ASSERT_EQ(::pipe(in), 0);
  ASSERT_EQ(::pipe(out), 0);
  std::vector<std::string> argv_s = {cli_path(), "generate", "--model", "run/checkpoint.bin",
                                     "--json"};
  std::vector<char*> argv;
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  for (int fd : {in[0], in[1], out[0], out[1]}) posix_spawn_file_actions_addclose(&fa, fd);
  posix_spawn_file_actions_addchdir_np(&fa, Workspace::get().dir().c_str());
  pid_t pid = -1;
  ASSERT_EQ(posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&fa);
  ::close(in[0]);
  ::close(out[1]);
  ASSERT_EQ(::write(in[1], "今天\n", 7), 7);
  const std::string first = read_line_from(out[0]);
  ASSERT_FALSE(first.empty()) << "no answer to the first line while stdin is open";
  EXPECT_EQ(nlohmann::json::parse(first)["input"], "今天");
  ASSERT_EQ(::write(in[1], "天气\n", 7), 7);
  ::close(in[1]);
  const std::string second = read_line_from(out[0]);
  ::close(out[0]);
  EXPECT_EQ(wait_child(pid), 0);
  EXPECT_EQ(nlohmann::json::parse(second)["input"], "天气");
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
    const CliResult r = run_cli(row.args, Workspace::get().dir(), row.stdin_text);
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
- `Issue11.*`: a `--config` without `vocab_size` trains with the vocabulary's size;
  `--valid-max 0` is named as such in the log; under `ulimit -v 4194304` a model within the
  field bounds but far beyond the limit is refused before allocating (exit 3, naming
  `RLIMIT_AS`; it used to abort with exit 134 in `std::bad_alloc`); a blank line among
  `generate`'s stdin lines gets its own error while the lines around it are decoded.
- `CliBoundary.*`: `std::bad_alloc` escaping a command is exit 3 "out of memory while running
  seqtape <command>", never 134 or "internal error"; the whole command line runs in-process
  (`cli::run_cli`, as the `fuzz_cli` target runs it) under a memory budget.

Limits behind the issue-11 rows: every model-configuration field has bounds (`model/config.cpp`'s
field table: `max_positions` at most 2^20, widths 2^16, layers 1024, vocabulary 2^21); the
memory a run needs (parameters, gradients, Adam state and activations; for `generate` and
`eval` the weights, the KV cache of every row decoded at once, beams or `--num-samples` draws of
each input of a batch, x length, and logits; for a `serve` request the same for its inputs x
beam, refused with a 400; for `gen-copy` the strings) is estimated first and compared with
MemAvailable and RLIMIT_AS (`model/memory_budget.h`); text files are read only if they are regular
files under 1 GiB (TSV), 64 MiB (vocabulary) or 1 MiB (configuration); a `--trace` may record at
most 1,000,000 attention weights (about 25 MB of JSON).
)";
  write_file(path, md.str());
  std::printf("[          ] wrote %d rows to %s\n", n, path);
}

// average replaces an existing --out only with --overwrite, and one of its inputs never; a
// refused file is left as it was, to the byte.
TEST(AverageCli, ReplacesAnExistingOutOnlyWithOverwrite) {
  const std::string dir = Workspace::get().dir();
  const std::string before = read_file(dir + "/ck_good/checkpoint.bin");
  write_file(dir + "/avg_in.bin", before);
  const std::vector<std::string> args = {"average", "avg_in.bin", "ck_good/checkpoint.bin", "--out",
                                         "avg_in.bin"};
  const CliResult refused = run_cli(args, dir);
  EXPECT_EQ(refused.exit_code, 3) << refused.err;
  EXPECT_NE(refused.err.find("avg_in.bin: already exists; give --overwrite"), std::string::npos)
      << refused.err;
  EXPECT_EQ(read_file(dir + "/avg_in.bin"), before);
  std::vector<std::string> overwrite = args;
  overwrite.push_back("--overwrite");
  const CliResult input_kept = run_cli(overwrite, dir);
  EXPECT_EQ(input_kept.exit_code, 2) << input_kept.err;
  EXPECT_NE(input_kept.err.find("--out avg_in.bin is the same file as the checkpoint input "
                                "avg_in.bin"),
            std::string::npos)
      << input_kept.err;
  EXPECT_EQ(read_file(dir + "/avg_in.bin"), before);
  write_file(dir + "/avg_out.bin", before);  // an existing file that is no input
  const CliResult replaced = run_cli(
      {"average", "avg_in.bin", "ck_good/checkpoint.bin", "--out", "avg_out.bin", "--overwrite"},
      dir);
  ASSERT_EQ(replaced.exit_code, 0) << replaced.err;
  EXPECT_NE(read_file(dir + "/avg_out.bin"), before) << "the average keeps no optimizer state";
  const CliResult decoded =
      run_cli({"generate", "--model", "avg_out.bin", "--input", "今天", "--json"}, dir);
  EXPECT_EQ(decoded.exit_code, 0) << decoded.err;
}

// eval --copy-baseline scores the sources as the hypotheses: two of three lines copy exactly.
TEST(EvalCli, CopyBaselineScoresTheSources) {
  const std::string dir = Workspace::get().dir();
  write_file(dir + "/copy_eval.tsv", "今天\t今天\n天气\t天气\n很好\t好的\n");
  const CliResult r = run_cli(
      {"eval", "--copy-baseline", "--data", "copy_eval.tsv", "--json", "--out", "copy_hyps.txt"},
      dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["examples"], 3);
  EXPECT_NEAR(j["exact_match"].get<double>(), 2.0 / 3, 1e-12);
  EXPECT_NEAR(j["ser"].get<double>(), 1.0 / 3, 1e-12);
  EXPECT_TRUE(j["copy_baseline"].get<bool>());
  EXPECT_FALSE(j.contains("loss")) << "no model, no teacher-forced loss";
  EXPECT_EQ(read_file(dir + "/copy_hyps.txt"), "今天\n天气\n很好\n");
}

// Consecutive lines with one source are one source with several references: one hypothesis
// per source, right when it equals any of them; PER to the closest reference.
TEST(EvalCli, ConsecutiveLinesWithOneSourceAreOneSource) {
  const std::string dir = Workspace::get().dir();
  write_file(dir + "/refs_eval.tsv", "今 天\t明 天\n今 天\t今 天\n天 气\t天\n");
  const CliResult r = run_cli(
      {"eval", "--copy-baseline", "--data", "refs_eval.tsv", "--json", "--out", "refs_hyps.txt"},
      dir);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["examples"], 2);
  EXPECT_NEAR(j["wer"].get<double>(), 0.5, 1e-12);      // 今 天 matches its second line
  EXPECT_NEAR(j["per"].get<double>(), 1.0 / 3, 1e-12);  // 0 of 2, then 1 of 1 (天 气 → 天)
  EXPECT_NEAR(j["exact_match"].get<double>(), 0.5, 1e-12);
  EXPECT_EQ(read_file(dir + "/refs_hyps.txt"), "今 天\n天 气\n");
  const CliResult text = run_cli({"eval", "--copy-baseline", "--data", "refs_eval.tsv"}, dir);
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_HAS(text.out, "2 sources of refs_eval.tsv");
  EXPECT_HAS(text.out, "WER 0.5000  PER 0.3333");
}

// eval with a model prints every metric, the teacher-forced ones included.
TEST(EvalCli, ModelPrintsEveryMetric) {
  const CliResult r =
      run_cli({"eval", "--model", "run/checkpoint.bin", "--data", "data/valid.tsv", "--json"},
              Workspace::get().dir());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  for (const char* k : {"examples", "loss", "token_accuracy", "exact_match", "chrf", "bleu", "ter",
                        "wer", "per", "cer", "ser", "beam"})
    EXPECT_TRUE(j.contains(k)) << k << " in " << r.out;
  EXPECT_GT(j["examples"].get<int64_t>(), 0);
}

// eval decodes --batch-size sources at once, in order of length: the hypotheses (in data order) and
// the decoding metrics are those of one source at a time, for greedy and beam search.
TEST(EvalCli, BatchedDecodingGivesTheHypothesesOfOneAtATime) {
  const std::string dir = Workspace::get().dir();
  // 300 steps: enough for answers that differ between sources (checked below), so that a
  // hypothesis written to another source's line would show.
  const CliResult t =
      run_cli({"train", "--data", "data/train.tsv", "--vocab", "data/vocab.txt", "--preset", "seed",
               "--steps", "300", "--batch", "8", "--out", "eval_run", "--no-progress"},
              dir);
  ASSERT_EQ(t.exit_code, 0) << t.err;
  // 12 training pairs: lengths 1..5 in data order, not in order of length.
  std::istringstream train(read_file(dir + "/data/train.tsv"));
  std::string tsv, sources;
  int n = 0;
  for (std::string line; n < 12 && std::getline(train, line); ++n) {
    tsv += line + "\n";
    sources += line.substr(0, line.find('\t')) + "\n";
  }
  write_file(dir + "/eval_lengths.tsv", tsv);
  write_file(dir + "/eval_sources.txt", sources);
  for (const char* beam : {"1", "3"}) {
    nlohmann::json metrics[2];
    std::string hyps[2];
    for (int k = 0; k < 2; ++k) {
      const std::string out = std::string("eval_hyps_") + beam + "_" + std::to_string(k) + ".txt";
      const CliResult r =
          run_cli({"eval", "--model", "eval_run", "--data", "eval_lengths.tsv", "--json", "--beam",
                   beam, "--batch-size", k ? "5" : "1", "--out", out},
                  dir);
      ASSERT_EQ(r.exit_code, 0) << r.err;
      EXPECT_EQ(r.err, "") << "no progress line off a terminal";
      metrics[k] = nlohmann::json::parse(r.out);
      hyps[k] = read_file(dir + "/" + out);
    }
    EXPECT_EQ(hyps[1], hyps[0]) << "beam " << beam;
    // generate, one source at a time in data order, gives the same lines (eval decodes up to
    // max_positions new tokens; generate caps --max-new there too).
    const CliResult g = run_cli({"generate", "--model", "eval_run", "--input-file",
                                 "eval_sources.txt", "--beam", beam, "--max-new", "256"},
                                dir);
    ASSERT_EQ(g.exit_code, 0) << g.err;
    EXPECT_EQ(hyps[0], g.out) << "beam " << beam;
    std::set<std::string> distinct;
    std::istringstream lines(hyps[0]);
    for (std::string l; std::getline(lines, l);) distinct.insert(l);
    EXPECT_GE(distinct.size(), 3u) << "the answers must differ: " << hyps[0];
    for (const char* m :
         {"examples", "exact_match", "chrf", "bleu", "ter", "wer", "per", "cer", "ser"})
      EXPECT_EQ(metrics[1][m], metrics[0][m]) << m << ", beam " << beam;
  }
}

// eval's batch is --batch-size, as generate's; the old --batch still works for the scripts that
// use it, but --help shows only the new spelling.
TEST(EvalCli, BatchSizeAsGenerateAndTheOldSpellingAsAHiddenAlias) {
  const std::string dir = Workspace::get().dir();
  std::string out[2];
  for (int k = 0; k < 2; ++k) {
    const CliResult r = run_cli({"eval", "--model", "run/checkpoint.bin", "--data",
                                 "data/valid.tsv", "--json", k ? "--batch" : "--batch-size", "3"},
                                dir);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    out[k] = r.out;
  }
  EXPECT_EQ(out[0], out[1]);
  const CliResult zero = run_cli(
      {"eval", "--model", "run/checkpoint.bin", "--data", "data/valid.tsv", "--batch-size", "0"},
      dir);
  EXPECT_EQ(zero.exit_code, 2);
  EXPECT_HAS(zero.err, "--batch-size must be >= 1");
  const CliResult help = run_cli({"eval", "--help"}, dir);
  EXPECT_HAS(help.out, "--batch-size");
  EXPECT_EQ(help.out.find("--batch "), std::string::npos) << help.out;
}

// vocab refuses a directory that already holds a vocabulary before it learns (a minute on real
// data), not after; the vocabulary there is left as it was, and --overwrite replaces it.
TEST(VocabCli, RefusesAnExistingVocabularyBeforeLearning) {
  const std::string dir = Workspace::get().dir() + "/vocab_twice";
  std::string tsv;
  for (const std::string& p : test_util::german_phrases()) tsv += p + "\t" + p + "\n";
  write_file(dir + "/data.tsv", tsv);
  const std::vector<std::string> args = {"vocab", "--data", "data.tsv", "--size",
                                         "40",    "--out",  "v"};
  const CliResult first = run_cli(args, dir);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  EXPECT_NE(first.out.find("learning a joint unigram vocabulary"), std::string::npos) << first.out;
  const std::string model = read_file(dir + "/v/spm.model");
  const CliResult again = run_cli(args, dir);
  EXPECT_EQ(again.exit_code, 3);
  EXPECT_NE(again.err.find("v/spm.model: already exists (give --overwrite"), std::string::npos)
      << again.err;
  EXPECT_EQ(again.out, "") << "refused before learning";
  EXPECT_EQ(read_file(dir + "/v/spm.model"), model);
  std::vector<std::string> overwrite = args;
  overwrite.push_back("--overwrite");
  const CliResult replaced = run_cli(overwrite, dir);
  EXPECT_EQ(replaced.exit_code, 0) << replaced.err;
}

// eval reads a SentencePiece model's text through that model, as generate does: its hypotheses
// are generate's, its loss the trainer's validation loss over the same codec, from the
// checkpoint, the run directory and its export alike.
TEST(EvalCli, SubwordModelReadsTextThroughItsSentencePieceModel) {
  const std::string dir = Workspace::get().dir() + "/spm_eval";
  std::string tsv, sources;
  for (const std::string& p : test_util::german_phrases()) {
    tsv += p + "\t" + p + "\n";
    sources += p + "\n";
  }
  write_file(dir + "/data.tsv", tsv);
  write_file(dir + "/sources.txt", sources);
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"vocab", "--data", "data.tsv", "--type", "unigram", "--size", "40",
                                 "--out", "v"},
        {"train", "--data", "data.tsv", "--vocab", "v", "--preset", "seed", "--steps", "3",
         "--batch", "8", "--out", "run"},
        {"export", "--model", "run/checkpoint.bin", "--out", "exported"}}) {
    const CliResult r = run_cli(args, dir);
    ASSERT_EQ(r.exit_code, 0) << args[0] << ": " << r.err;
  }
  const InferenceModel m = InferenceModel::load(dir + "/run/checkpoint.bin");
  // eval decodes up to max_positions new tokens
  const CliResult gen = run_cli({"generate", "--model", "run", "--input-file", "sources.txt",
                                 "--json", "--max-new", std::to_string(m.config().max_positions)},
                                dir);
  ASSERT_EQ(gen.exit_code, 0) << gen.err;
  std::string want_hyps;
  std::istringstream lines(gen.out);
  for (std::string line; std::getline(lines, line);)
    want_hyps += nlohmann::json::parse(line)["text"].get<std::string>() + "\n";

  auto net = make_model(m.config());
  load_params_into(*net, load_checkpoint(dir + "/run/checkpoint.bin").params, "run");
  const std::vector<TextPair> pairs = read_tsv(dir + "/data.tsv");
  const EncodedPairs enc = encode_pairs(m.config().arch, m.codec(), pairs, "data.tsv");
  double accuracy = 0;
  const double want_loss = validation_loss(*net, enc, 32, m.vocab().pad_id(), &accuracy);
  const EncodedPairs chars = encode_pairs(m.config().arch, CharCodec(m.vocab()), pairs, "data.tsv");
  ASSERT_NE(enc.prompt(0), chars.prompt(0)) << "the test needs text characters read differently";

  for (const std::string model : {"run/checkpoint.bin", "run", "exported"}) {
    const CliResult r = run_cli(
        {"eval", "--model", model, "--data", "data.tsv", "--json", "--out", "hyps.txt"}, dir);
    ASSERT_EQ(r.exit_code, 0) << model << ": " << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(read_file(dir + "/hyps.txt"), want_hyps) << model;
    EXPECT_NEAR(j["loss"].get<double>(), want_loss, 1e-9 * std::abs(want_loss)) << model;
    EXPECT_NEAR(j["token_accuracy"].get<double>(), accuracy, 1e-12) << model;
  }
}

// ---- outputs into devices and FIFOs, and failed writes to stdout ------------------------------

// Every command's output that is a file (or, for export and vocab, a file in --out), writing
// into `d` (relative to the workspace); `node` is the path the case makes a device or FIFO.
struct OutputCase {
  std::string name;
  std::vector<std::string> args;
  std::string node;
};

std::vector<OutputCase> output_cases(const std::string& d) {
  const std::string n = d + "/node";
  const std::vector<std::string> gen = {"generate", "--model", "run/checkpoint.bin", "--input",
                                        "今天"};
  auto with = [](std::vector<std::string> a, const std::vector<std::string>& extra) {
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  return {
      {"eval --out",
       {"eval", "--model", "run/checkpoint.bin", "--data", "data/valid.tsv", "--out", n},
       n},
      {"average --out",
       {"average", "run/checkpoint.bin", "ck_good/checkpoint.bin", "--out", n, "--overwrite"},
       n},
      {"export --out", {"export", "--model", "run/checkpoint.bin", "--out", d}, d + "/vocab.txt"},
      {"vocab --out",
       {"vocab", "--data", "data/train.tsv", "--out", d, "--size", "60"},
       d + "/spm.vocab.tsv"},
      {"generate --output", with(gen, {"--output", n}), n},
      {"generate --trace", with(gen, {"--trace", n}), n},
      {"walkthrough --trace", {"walkthrough", "--trace", n}, n},
      {"walkthrough --out", {"walkthrough", "--embed-trace", d + "/t.json", "--out", n}, n},
  };
}

// Makes a case's directory `d`, with the trace walkthrough --embed-trace reads.
void prepare_output_case(const std::string& root, const std::string& d) {
  write_file(root + "/" + d + "/t.json", R"({"format": "seqtape-trace"})");
}

// A character device node of the test's own (the device of /dev/null: writes vanish) takes the
// output's place: the command writes into it and leaves it a device. A save used to rename its
// temp file over the node, leaving a regular file (as root, over /dev/null itself).
TEST(OutputRule, WritesIntoACharacterDeviceWithoutReplacingIt) {
  const std::string root = Workspace::get().dir();
  const size_t cases = output_cases("x").size();
  for (size_t i = 0; i < cases; ++i) {
    const std::string d = "out_dev/" + std::to_string(i);
    const OutputCase k = output_cases(d)[i];
    SCOPED_TRACE(k.name);
    prepare_output_case(root, d);
    const std::string node = root + "/" + k.node;
    if (::mknod(node.c_str(), S_IFCHR | 0666, makedev(1, 3)) != 0)
      GTEST_SKIP() << "mknod needs root: " << std::strerror(errno);
    const CliResult r = run_cli(k.args, root);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    struct stat st {};
    ASSERT_EQ(::lstat(node.c_str(), &st), 0);
    EXPECT_TRUE(S_ISCHR(st.st_mode)) << k.node << " is no longer a character device";
  }
}

// An output through a symbolic link replaces the file the link names; the link stays a link.
// The atomic save used to rename its temp file over the link itself.
TEST(OutputRule, WritesThroughASymbolicLinkAndKeepsIt) {
  const std::string root = Workspace::get().dir();
  const size_t cases = output_cases("x").size();
  for (size_t i = 0; i < cases; ++i) {
    const std::string d = "out_link/" + std::to_string(i);
    const OutputCase k = output_cases(d)[i];
    SCOPED_TRACE(k.name);
    prepare_output_case(root, d);
    const std::string node = root + "/" + k.node;
    write_file(root + "/" + d + "/real", "old\n");
    fs::create_symlink("real", node);
    const CliResult r = run_cli(k.args, root);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_TRUE(fs::is_symlink(node)) << k.node << " is no longer a symbolic link";
    EXPECT_NE(read_file(root + "/" + d + "/real"), "old\n") << "the linked file was not written";
  }
}

// Reads a FIFO until its writer closes it (after writing something) or `deadline` passes, so
// that a command which never opens the FIFO cannot hang the test.
class FifoReader {
 public:
  explicit FifoReader(const std::string& path)
      : fd_(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC)), thread_([this] { run(); }) {}
  ~FifoReader() { finish(); }
  // Stops waiting `grace` after now, and returns what was read.
  std::string finish(std::chrono::milliseconds grace = std::chrono::milliseconds(2000)) {
    if (thread_.joinable()) {
      stop_at_ = std::chrono::steady_clock::now() + grace;
      thread_.join();
      if (fd_ >= 0) ::close(fd_);
    }
    return got_;
  }

 private:
  void run() {
    char buf[65536];
    for (;;) {
      if (std::chrono::steady_clock::now() > stop_at_.load()) return;
      pollfd p{fd_, POLLIN, 0};
      ::poll(&p, 1, 50);
      const ssize_t n = ::read(fd_, buf, sizeof buf);
      if (n > 0) got_.append(buf, static_cast<size_t>(n));
      if (n == 0 && !got_.empty()) return;  // the writer wrote and closed
      if (n <= 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }

  int fd_;
  std::string got_;
  std::atomic<std::chrono::steady_clock::time_point> stop_at_{std::chrono::steady_clock::now() +
                                                              std::chrono::seconds(300)};
  std::thread thread_;
};

// A FIFO in the output's place gets the output, read by another thread, and stays a FIFO.
TEST(OutputRule, WritesIntoAFifoWithoutReplacingIt) {
  const std::string root = Workspace::get().dir();
  const size_t cases = output_cases("x").size();
  for (size_t i = 0; i < cases; ++i) {
    const std::string d = "out_fifo/" + std::to_string(i);
    const OutputCase k = output_cases(d)[i];
    SCOPED_TRACE(k.name);
    prepare_output_case(root, d);
    const std::string node = root + "/" + k.node;
    ASSERT_EQ(::mkfifo(node.c_str(), 0644), 0) << std::strerror(errno);
    FifoReader reader(node);
    const CliResult r = run_cli(k.args, root);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    const std::string got = reader.finish();
    EXPECT_FALSE(got.empty()) << "nothing was written into the FIFO";
    struct stat st {};
    ASSERT_EQ(::lstat(node.c_str(), &st), 0);
    EXPECT_TRUE(S_ISFIFO(st.st_mode)) << k.node << " is no longer a FIFO";
  }
}

// Results that cannot be delivered (stdout on /dev/full) fail the command with exit 3 naming
// stdout; eval --json and walkthrough used to exit 0.
TEST(OutputRule, AFailedWriteToStdoutExits3NamingIt) {
  const std::string root = Workspace::get().dir();
  const TempDir errs("stdout_full");
  const std::vector<std::vector<std::string>> commands = {
      {"eval", "--model", "run/checkpoint.bin", "--data", "data/valid.tsv", "--json"},
      {"eval", "--copy-baseline", "--data", "data/valid.tsv"},
      {"walkthrough", "--f15"},
      {"generate", "--model", "run/checkpoint.bin", "--input", "今天"},
      {"export", "--model", "run/checkpoint.bin", "--out", "full/export"},
      {"average", "run/checkpoint.bin", "ck_good/checkpoint.bin", "--out", "full/avg.bin",
       "--overwrite"},
      {"vocab", "--data", "data/train.tsv", "--out", "full/vocab", "--size", "60", "--overwrite"},
      {"gen-copy", "--out", "full/copy", "--train", "5", "--valid", "2"},
  };
  fs::create_directories(fs::path(root) / "full");
  for (const auto& args : commands) {
    SCOPED_TRACE(args[0] + " " + args[1]);
    const std::string err = errs.file("err");
    const int code = wait_child(spawn_cli(args, root, "/dev/full", err));
    const std::string text = read_file(err);
    EXPECT_EQ(code, 3) << text;
    EXPECT_NE(text.find("seqtape: error: stdout: writing the results failed"), std::string::npos)
        << text;
  }
}

// An endless line on stdin (/dev/zero: no newline ever) stops at the line bound; it used to be
// read until the memory ran out (here the 4 GiB address-space limit).
TEST(GenerateCli, AnEndlessStdinLineStopsAtTheLineBound) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer reserves terabytes of shadow address space: no ulimit -v";
#endif
  const TempDir io("endless");
  const pid_t pid = spawn_cli({"generate", "--model", "run/checkpoint.bin"}, Workspace::get().dir(),
                              io.file("out"), io.file("err"), "/dev/zero", 4L << 20);
  const int code = wait_child(pid);
  const std::string err = read_file(io.file("err"));
  EXPECT_EQ(code, 3) << err;
  EXPECT_NE(err.find("stdin:1: the line is longer than 1048576 bytes"), std::string::npos) << err;
}

}  // namespace
}  // namespace seqtape::faults
