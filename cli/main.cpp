// seqtape: one command-line tool, one subcommand per job (cli/run_cli.cpp).
#include "cli/commands.h"

int main(int argc, char** argv) {
  return seqtape::cli::run_cli(argc, argv);
}
