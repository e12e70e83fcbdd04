#pragma once
// The larger copy task: random strings over a small alphabet, target = source. Validation
// strings are distinct and never appear in training, so a validation score measures copying,
// not memorised pairs.

#include <cstdint>
#include <string>
#include <vector>

#include "model/memory_budget.h"
#include "train/dataset.h"  // TextPair, write_tsv

namespace seqtape {

// 40 common Chinese characters, one string each (今 天 气 很 好 的 是 first, as in the reference).
std::vector<std::string> default_copy_alphabet();

struct CopyTaskOptions {
  int64_t n_train = 10000;
  int64_t n_valid = 500;
  int64_t min_len = 1;   // characters, inclusive
  int64_t max_len = 12;  // inclusive
  uint64_t seed = 0;
  std::vector<std::string> alphabet = default_copy_alphabet();  // one character per entry
};

struct CopyTask {
  std::vector<TextPair> train;  // may repeat a string; line = 1-based position
  std::vector<TextPair> valid;  // pairwise distinct, none equal to a training string
};

// Each string: length uniform in [min_len, max_len], then characters uniform over the
// alphabet. Validation strings are drawn first (rejecting repeats), training strings reject
// any validation string. Deterministic for a given options value. An Error if the options are
// invalid or the space of strings is too small to hold n_valid distinct strings and still
// leave some for training.
CopyTask generate_copy_task(const CopyTaskOptions& opt);

// The memory generate_copy_task and write_copy_task need for `opt` (for check_memory_budget).
MemoryNeed copy_task_memory(const CopyTaskOptions& opt);

// Writes dir/train.tsv, dir/valid.tsv and dir/vocab.txt (Vocab::build over the alphabet, so
// every character has an id even if the training draw missed it). Creates dir if needed.
void write_copy_task(const std::string& dir, const CopyTask& task,
                     const std::vector<std::string>& alphabet);

}  // namespace seqtape
