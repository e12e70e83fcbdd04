#include "cli/output_paths.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iostream>

#include "cli/commands.h"
#include "infer/load.h"
#include "tensor/tensor.h"

namespace seqtape::cli {

void check_not_an_input(const FlagPath& out, const std::vector<FlagPath>& inputs) {
  struct stat o {};
  if (out.path.empty() || ::stat(out.path.c_str(), &o) != 0) return;
  // Two character devices can only be one file by inode: writing /dev/null never hurts an input.
  for (const FlagPath& in : inputs) {
    struct stat i {};
    if (in.path.empty() || ::stat(in.path.c_str(), &i) != 0) continue;
    if (i.st_dev == o.st_dev && i.st_ino == o.st_ino && !S_ISCHR(o.st_mode))
      throw UsageError(out.flag + " " + out.path + " is the same file as the " + in.flag +
                       " input " + in.path +
                       ": writing it would destroy that input (give another " + out.flag + ")");
  }
}

std::vector<FlagPath> model_inputs(const std::string& flag, const std::string& path) {
  std::vector<FlagPath> files;
  for (const std::string& f : model_file_paths(path))
    files.push_back({f == path ? flag : flag + " " + path, f});
  return files;
}

void check_not_a_directory(const FlagPath& out) {
  struct stat st {};
  if (::stat(out.path.c_str(), &st) == 0 && S_ISDIR(st.st_mode))
    throw UsageError(out.flag + " " + out.path + " is a directory; give a file name");
}

void check_written(std::ostream& out, const std::string& name) {
  int err = 0;
  bool failed = false;
  if (&out == &std::cout) {
    // std::cout writes through C's stdout (synced with stdio). Flushed first, here, so that its
    // errno is the cause: glibc keeps bytes it could not write and tries them again, and
    // stdout's error flag remembers a write that failed earlier.
    errno = 0;
    if (std::fflush(stdout) != 0) err = errno;
    failed = err != 0 || std::ferror(stdout);
  }
  out.flush();
  if (failed || !out)
    fail(name, "writing the results failed" +
                   (err != 0 ? std::string(": ") + std::strerror(err) : std::string()));
}

}  // namespace seqtape::cli
