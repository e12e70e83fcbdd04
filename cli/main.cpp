// seqtape: one command-line tool, one subcommand per job.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>

#include "autograd/tensor.h"
#include "cli/commands.h"

int main(int argc, char** argv) {
  using namespace seqtape::cli;
  CLI::App app{
      "seqtape — a from-scratch autograd and Transformer toolkit you can check step by step"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "seqtape 0.1");
  Runner run;
  register_gradcheck(app, run);
  register_train(app, run);
  register_gen_copy(app, run);
  register_export(app, run);
  register_generate(app, run);
  register_walkthrough(app, run);
  register_vocab(app, run);
  register_eval(app, run);
  register_average(app, run);
  // A first word that is no subcommand: name it (CLI11 would only say one is required).
  if (argc > 1 && argv[1][0] != '-') {
    std::string names;
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
      known = known || sub->get_name() == argv[1];
      names += (names.empty() ? "" : ", ") + sub->get_name();
    }
    if (!known) {
      std::cerr << "seqtape: usage error: unknown subcommand '" << argv[1] << "' (one of: " << names
                << "; see seqtape --help)\n";
      return kUsage;
    }
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
  try {
    return run ? run() : kOk;
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
  } catch (const std::exception& e) {
    std::cerr << "seqtape: internal error: " << e.what() << "\n";
    return kInternal;
  }
}
