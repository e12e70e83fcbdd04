// The command boundary: parse the command line, run the chosen subcommand, and turn every
// way it can end into an exit code and one line on stderr. Nothing below calls exit(), so the
// whole command runs in-process too (fuzz/fuzz_cli.cpp).
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <limits>
#include <new>
#include <string>

#include "cli/commands.h"
#include "cli/output_paths.h"
#include "tensor/tensor.h"

namespace seqtape::cli {

int run_guarded(const std::string& doing, const Runner& run) {
  try {
    const int code = run ? run() : kOk;
    // Results printed but never delivered (a full disk, /dev/full) are a failed command.
    if (code == kOk) check_written(std::cout, "stdout");
    return code;
  } catch (const UsageError& e) {
    std::cerr << "seqtape: usage error: " << e.what() << "\n";
    return kUsage;
  } catch (const seqtape::Error& e) {
    std::cerr << "seqtape: error: " << e.what() << "\n";
    return kDataError;
  } catch (const std::filesystem::filesystem_error& e) {
    // A path the user gave cannot be used (e.g. --out names an existing file).
    std::cerr << "seqtape: error: " << e.what() << "\n";
    return kDataError;
  } catch (const std::bad_alloc&) {
    // What the memory budget check (model/memory_budget.h) did not foresee: the input asked for
    // more than the machine gives, which is the user's to change, not a bug.
    std::cerr << "seqtape: error: out of memory while running " << doing
              << " (use smaller sizes, or free memory)\n";
    return kDataError;
  } catch (const std::exception& e) {
    std::cerr << "seqtape: internal error: " << e.what() << "\n";
    return kInternal;
  }
}

namespace {
// An integer in [min, max], or the message naming `bounds`.
CLI::Validator integer_within(int64_t min, int64_t max, const std::string& bounds) {
  return CLI::Validator(
      [min, max, bounds](std::string& text) -> std::string {
        int64_t v = 0;
        if (!CLI::detail::lexical_cast(text, v) || v < min || v > max)
          return "must be an integer " + bounds + ", got " + text;
        return {};
      },
      bounds);
}
}  // namespace

CLI::Validator at_least(int64_t min) {
  return integer_within(min, std::numeric_limits<int64_t>::max(), ">= " + std::to_string(min));
}

CLI::Validator in_range(int64_t min, int64_t max) {
  return integer_within(min, max, "in [" + std::to_string(min) + ", " + std::to_string(max) + "]");
}

void add_commands(CLI::App& app, Runner& run, const Hooks& hooks) {
  app.require_subcommand(1);
  app.set_version_flag("--version", "seqtape 0.1");
  register_gradcheck(app, run);
  register_train(app, run, hooks.on_train_step);
  register_gen_copy(app, run);
  register_export(app, run);
  register_generate(app, run);
  register_walkthrough(app, run);
  register_vocab(app, run);
  register_serve(app, run);
  register_eval(app, run);
  register_average(app, run);
}

std::string argv_problem(const CLI::App& app, int argc, char** argv) {
  // A first word that is no subcommand: name it (CLI11 would only say one is required).
  if (argc > 1 && argv[1][0] != '-') {
    std::string names;
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; })) {
      known = known || sub->get_name() == argv[1];
      names += (names.empty() ? "" : ", ") + sub->get_name();
    }
    if (!known)
      return "unknown subcommand '" + std::string(argv[1]) + "' (one of: " + names +
             "; see seqtape --help)";
  }
  // An empty word that is no option's value: CLI11 2.3 loops forever on one followed by an
  // unknown flag in `train` (found by fuzz_cli), and it never means anything here.
  const CLI::App* chosen = nullptr;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    if (argc > 1 && sub->get_name() == argv[1]) chosen = sub;
  auto takes_value = [&](const std::string& word) {
    const CLI::Option* o = chosen && word.starts_with("-") && word.find('=') == std::string::npos
                               ? chosen->get_option_no_throw(word)
                               : nullptr;
    return o != nullptr && o->get_expected_min() > 0;  // flags take none
  };
  for (int i = 2; i < argc; ++i)
    if (argv[i][0] == '\0' && !takes_value(argv[i - 1]))
      return "argument " + std::to_string(i) + " is empty (after '" + argv[i - 1] +
             "', which takes no value)";
  return {};
}

int run_cli(int argc, char** argv) {
  CLI::App app{
      "seqtape — a from-scratch autograd and Transformer toolkit you can check step by step"};
  Runner run;
  add_commands(app, run);
  if (const std::string problem = argv_problem(app, argc, argv); !problem.empty()) {
    std::cerr << "seqtape: usage error: " << problem << "\n";
    return kUsage;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kUsage;
  }
  std::string doing = "seqtape";
  for (const CLI::App* sub : app.get_subcommands()) doing += " " + sub->get_name();
  return run_guarded(doing, run);
}

}  // namespace seqtape::cli
