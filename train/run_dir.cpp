#include "train/run_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "autograd/tensor.h"

namespace seqtape {

namespace fs = std::filesystem;

RunDir::RunDir(const std::string& out_dir, bool resume, bool overwrite)
    : lock_path_((fs::path(out_dir) / ".seqtape.lock").string()) {
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) fail(out_dir, "cannot create the output directory: " + ec.message());
  fd_ = ::open(lock_path_.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd_ < 0)
    fail(lock_path_, std::string("cannot open the run's lock file: ") + std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    if (err == EWOULDBLOCK)
      fail(lock_path_,
           "another seqtape process is writing this run (it holds the lock); wait for "
           "it to finish or choose another --out");
    fail(lock_path_, std::string("cannot lock the run directory: ") + std::strerror(err));
  }
  // The holder's pid, for a person looking at the file (the lock itself is the flock).
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) == 0) (void)!::write(fd_, pid.data(), pid.size());
  const fs::path ckpt = fs::path(out_dir) / "checkpoint.bin";
  if (!resume && !overwrite && fs::exists(ckpt, ec)) {
    ::close(fd_);
    fd_ = -1;
    fail(out_dir,
         "already holds a run (" + ckpt.string() +
             "); give --resume to continue it, --overwrite to replace it, or another --out");
  }
}

RunDir::~RunDir() {
  if (fd_ >= 0) ::close(fd_);  // releases the flock
}

std::string text_fingerprint(std::string_view bytes) {
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx",
                static_cast<unsigned long long>(XXH3_64bits(bytes.data(), bytes.size())));
  return hex;
}

std::string file_fingerprint(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) fail(path, "does not exist");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open to fingerprint the data");
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  std::vector<char> buf(1 << 16);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    if (in.gcount() > 0) XXH3_64bits_update(st, buf.data(), static_cast<size_t>(in.gcount()));
  }
  const bool bad = in.bad();
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  if (bad) fail(path, "read error while fingerprinting the data");
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(h));
  return hex;
}

}  // namespace seqtape
