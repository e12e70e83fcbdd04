#pragma once
// The small copy task that several training tests run (test_trainer.cpp, test_thread_ranks.cpp):
// its files, and the options of a tiny encoder-decoder with dropout on, so that the random
// generator's state matters for resume and for data-parallel ranks.
#include <filesystem>

#include "train/copy_task.h"
#include "train/trainer.h"

namespace seqtape::copy_fixture {

// 200 training and 10 validation strings of up to 6 symbols, with their vocabulary, into dir.
inline void write_data(const std::filesystem::path& dir) {
  CopyTaskOptions co;
  co.n_train = 200;
  co.n_valid = 10;
  co.max_len = 6;
  co.seed = 3;
  write_copy_task(dir.string(), generate_copy_task(co), co.alphabet);
}

// d 16, 2 heads, 1+1 layers, dropout 0.1, batches of 8, lr 3e-3, seed 11; steps left to the test.
inline TrainOptions copy_options(const std::filesystem::path& data,
                                 const std::filesystem::path& out) {
  TrainOptions o;
  o.data = (data / "train.tsv").string();
  o.valid_data = (data / "valid.tsv").string();
  o.vocab = (data / "vocab.txt").string();
  o.out_dir = out.string();
  o.model = preset("default", 2);
  o.model.d_model = 16;
  o.model.n_heads = 2;
  o.model.d_ff = 32;
  o.model.n_encoder_layers = o.model.n_decoder_layers = 1;
  o.model.dropout = 0.1;
  o.batch = 8;
  o.schedule.lr = 3e-3;
  o.progress = 0;
  o.eval_max = 5;
  o.seed = 11;
  return o;
}

}  // namespace seqtape::copy_fixture
