#pragma once
// The `seqtape` subcommands. Each registers itself on the app and runs when selected.
// Exit codes (README.md, docs/cli.md): 0 success, 1 a check failed (gradcheck, verify),
// 2 usage error (bad flags), 3 data error (a file or input the user gave is wrong),
// 4 internal error.

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <string>

#include "train/training_log.h"

namespace seqtape::cli {

enum Exit { kOk = 0, kCheckFailed = 1, kUsage = 2, kDataError = 3, kInternal = 4 };

// A usage error found after parsing (e.g. a flag value out of range).
struct UsageError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Each register_* adds a subcommand and stores the function that runs it in `run`.
using Runner = std::function<int()>;
void register_gradcheck(CLI::App& app, Runner& run);
// on_step: TrainOptions::on_step of the run (may be empty).
using TrainStepHook = std::function<bool(const StepStats&, double tokens_per_second)>;
void register_train(CLI::App& app, Runner& run, TrainStepHook on_step = {});
void register_gen_copy(CLI::App& app, Runner& run);
void register_export(CLI::App& app, Runner& run);
void register_generate(CLI::App& app, Runner& run);
void register_walkthrough(CLI::App& app, Runner& run);
void register_vocab(CLI::App& app, Runner& run);
void register_eval(CLI::App& app, Runner& run);
void register_average(CLI::App& app, Runner& run);
void register_serve(CLI::App& app, Runner& run);

// An integer flag's lower bound with a plain message ("--batch: must be an integer >= 1, got
// 0"); CLI11's own range validators print their bounds as raw doubles.
CLI::Validator at_least(int64_t min);
// Both bounds ("--threads: must be an integer in [2, 1024], got -1"). The text is checked
// before it is converted, so a negative number never becomes a huge unsigned one, and a number
// past int64 (which CLI11 saturates to its largest value) is out of range.
CLI::Validator in_range(int64_t min, int64_t max);

// What a caller inside the process adds to the commands (the Python module's step callback).
struct Hooks {
  TrainStepHook on_train_step;
};
// The app with every subcommand; parsing it stores the chosen one's runner in `run`.
void add_commands(CLI::App& app, Runner& run, const Hooks& hooks = {});
// A usage problem of argv that CLI11 would name badly or never finish parsing (an unknown
// subcommand; an empty argument that is no option's value), as its message, or "".
std::string argv_problem(const CLI::App& app, int argc, char** argv);

// `seqtape argv[1..]`: parses, runs the subcommand and returns its exit code; never calls
// exit(). Callable in-process (the CLI fuzz target does).
int run_cli(int argc, char** argv);
// Runs `run`, mapping how it ends to an exit code with one line on stderr: UsageError 2,
// seqtape::Error / filesystem_error / std::bad_alloc ("out of memory while <doing>") 3, any
// other exception 4 (a bug).
int run_guarded(const std::string& doing, const Runner& run);

}  // namespace seqtape::cli
