#pragma once
// Every option of `seqtape train`, one row each, with the two decisions about it written down
// once, in one table (train_options()):
//
//   on --resume   kept: the data order or the optimizer's meaning depends on it (the data, the
//                 vocabulary, the model, the split, the batches, the optimizer and its
//                 schedule, the seed), so a resume with another value is refused, naming the
//                 option and both values; or free: how long to train, how often to log,
//                 evaluate and save, and how to compute may change.
//   across ranks  agree: every data-parallel rank runs the same steps and the same collectives
//                 from the same options, so ranks started with different values are refused
//                 before the first step (a difference could hang them or mix their gradients);
//                 or per process: only that rank's business (--out, --threads, ...).
//
// The kept values go into the checkpoint (run_record(), under the keys of the table, so that
// records written before a row existed still read: an option they lack is not compared), and
// check_resume() compares them; rank_differences() compares the agreed ones across ranks.

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace seqtape {

struct TrainOptions;

// What the values of the rows are read from: the options, and the fingerprints of what the
// options name (train/run_dir.h's file_fingerprint, text_fingerprint).
struct RunFacts {
  const TrainOptions& opt;
  nlohmann::json model;     // the model configuration with its vocab_size
  std::string vocabulary;   // fingerprint of the vocabulary's tokens
  std::string tokenizer;    // the text codec's kind ("chars", "chars/words", ...); "": not given
  std::string data, valid;  // fingerprints of --data and --valid ("" without --valid)
};

struct TrainOption {
  const char* flags;  // as the user writes them; the model row's also stand for the model flags
  const char* key;    // "section.name" in the checkpoint's record
  bool kept_on_resume;
  bool ranks_agree;
  nlohmann::json (*value)(const RunFacts&);  // nullptr: the option is never compared
};

const std::vector<TrainOption>& train_options();

// Every compared option's value, keyed by its row's flags; the data files are fingerprinted.
nlohmann::json option_values(const TrainOptions& opt, const nlohmann::json& model,
                             const std::string& vocab_fingerprint,
                             const std::string& tokenizer = "");

// The kept options of `values`, nested by their keys, as stored in a checkpoint.
nlohmann::json run_record(const nlohmann::json& values);

// Throws an Error naming the checkpoint and every kept option whose value differs between the
// stored record and `values` (nothing to check in checkpoints written before records existed).
void check_resume(const nlohmann::json& stored, const nlohmann::json& values,
                  const std::string& ckpt_path);

// The agreed options of `values` (what rank 0 sends the other ranks).
nlohmann::json rank_record(const nlohmann::json& values);
// "" when this rank's values agree with rank 0's record, else each difference as
// "--steps 5 (rank 0: 10)", separated by ", ".
std::string rank_differences(const nlohmann::json& lead_record, const nlohmann::json& values);
// "--out, --threads, ...": the options the ranks may differ in.
std::string per_process_flags();

}  // namespace seqtape
