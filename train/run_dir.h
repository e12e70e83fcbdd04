#pragma once
// A run directory that cannot be lost or mixed (issue 10, item 6).
//
// RunDir takes an exclusive flock(2) on <out>/.seqtape.lock for the life of the object, so a
// second process writing the same run stops at once (an Error naming the lock file, exit 3),
// and refuses an --out that already holds a run (checkpoint.bin) unless the caller resumes it
// or asked to overwrite it.
//
// What a run was started with is kept in its checkpoints and compared on --resume by
// train/run_options.h, over the fingerprints of its files computed here.

#include <cstdint>
#include <string>
#include <string_view>

namespace seqtape {

class RunDir {
 public:
  RunDir(const std::string& out_dir, bool resume, bool overwrite);
  ~RunDir();
  RunDir(const RunDir&) = delete;
  RunDir& operator=(const RunDir&) = delete;
  const std::string& lock_path() const { return lock_path_; }

 private:
  std::string lock_path_;
  int fd_ = -1;
};

// XXH3-64 of bytes, as 16 hex digits.
std::string text_fingerprint(std::string_view bytes);
// XXH3-64 of a file's bytes, as 16 hex digits; throws an Error naming an unreadable file.
std::string file_fingerprint(const std::string& path);

}  // namespace seqtape
