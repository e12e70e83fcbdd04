// `seqtape gen-copy`: the copy task's training and held-out strings, and its vocabulary.
#include <cstdio>

#include "cli/commands.h"
#include "model/memory_budget.h"
#include "train/copy_task.h"

namespace seqtape::cli {

void register_gen_copy(CLI::App& app, Runner& run) {
  struct Args {
    std::string out;
    CopyTaskOptions o;
  };
  auto a = std::make_shared<Args>();
  CLI::App* sub = app.add_subcommand("gen-copy",
                                     "Generate the copy task: random strings of Chinese "
                                     "characters, held-out split disjoint from training");
  sub->add_option("--out", a->out, "directory for train.tsv, valid.tsv, vocab.txt")->required();
  sub->add_option("--train", a->o.n_train, "training strings")->capture_default_str();
  sub->add_option("--valid", a->o.n_valid, "held-out strings (never in training)")
      ->capture_default_str();
  sub->add_option("--min-len", a->o.min_len, "shortest string")->capture_default_str();
  sub->add_option("--max-len", a->o.max_len, "longest string")->capture_default_str();
  sub->add_option("--seed", a->o.seed, "random seed")->capture_default_str();
  sub->callback([&run, a] {
    run = [a] {
      check_memory_budget(copy_task_memory(a->o), "gen-copy");
      CopyTask t;
      try {
        t = generate_copy_task(a->o);  // its errors are all about the flags
      } catch (const Error& e) {
        throw UsageError(e.what());
      }
      write_copy_task(a->out, t, a->o.alphabet);
      std::printf(
          "wrote %zu training and %zu held-out strings to %s/{train,valid}.tsv and vocab.txt\n",
          t.train.size(), t.valid.size(), a->out.c_str());
      return kOk;
    };
  });
}

}  // namespace seqtape::cli
