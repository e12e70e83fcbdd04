#pragma once
// The one rule for every path a command writes (eval --out, average --out, generate --output and
// --trace, export --out, vocab --out, walkthrough's outputs): never onto one of the command's
// own inputs, and a failed write, stdout's included, is an error naming the stream.

#include <ostream>
#include <string>
#include <vector>

namespace seqtape::cli {

// A path given on the command line and what gave it ("--data", "--model", "checkpoint 2").
struct FlagPath {
  std::string flag, path;
};

// Refuses (UsageError, exit 2) writing `out` when it is the same file as any of `inputs`, by
// device and inode, so through symbolic and hard links too. A path that does not exist (yet) is
// the same as none: there is nothing to lose.
void check_not_an_input(const FlagPath& out, const std::vector<FlagPath>& inputs);

// The inputs a --model path stands for: the checkpoint, a run directory's checkpoint.bin or an
// export's files ("--model run", "run/checkpoint.bin").
std::vector<FlagPath> model_inputs(const std::string& flag, const std::string& path);

// Refuses (UsageError) a file output that names a directory.
void check_not_a_directory(const FlagPath& out);

// Flushes `out` (std::cout: C's stdout too) and throws an Error naming `name` and the cause when
// any write to it failed (a full disk, /dev/full, a closed pipe).
void check_written(std::ostream& out, const std::string& name);

}  // namespace seqtape::cli
