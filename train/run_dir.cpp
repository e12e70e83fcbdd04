#include "train/run_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "tensor/tensor.h"
#include "text/subword.h"

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
  if (resume || overwrite) return;
  // Any checkpoint of a run: a best.bin alone is left by a run killed before its first save.
  if (const std::vector<std::string> found = run_checkpoint_files(out_dir); !found.empty()) {
    ::close(fd_);
    fd_ = -1;
    fail(out_dir,
         "already holds a run (" + found.front() +
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

int64_t periodic_checkpoint_step(const std::string& name) {
  if (!name.starts_with("checkpoint-") || !name.ends_with(".bin")) return -1;
  const std::string digits = name.substr(11, name.size() - 15);
  if (digits.empty() || digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), ::isdigit))
    return -1;
  return std::stoll(digits);
}

namespace {

bool is_checkpoint_name(const std::string& name) {
  return name == "checkpoint.bin" || name == "best.bin" || periodic_checkpoint_step(name) >= 0;
}

// The files a run writes beside its checkpoints.
bool is_run_file_name(const std::string& name) {
  return is_checkpoint_name(name) || name == "metrics.csv" || name == "loss.svg" ||
         name == kJointModelFile || name == "config.json" || name == "vocab.txt";
}

// A temp file of write_file_atomic ("<name>.tmp.<pid>.<n>") whose writer has exited.
bool stale_temp_of(const std::string& temp, const std::string& name) {
  const std::string prefix = name + ".tmp.";
  if (!temp.starts_with(prefix)) return false;
  const long pid = std::strtol(temp.c_str() + prefix.size(), nullptr, 10);
  return pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

// The first bytes of a file, at most n ("" if it cannot be read).
std::string head_of(const fs::path& p, size_t n) {
  std::ifstream in(p, std::ios::binary);
  std::string b(n, '\0');
  in.read(b.data(), static_cast<std::streamsize>(n));
  b.resize(static_cast<size_t>(std::max<std::streamsize>(0, in.gcount())));
  return b;
}

// The envelope's magic and kind 1 (io/envelope.h): what every seqtape checkpoint starts with.
bool is_seqtape_checkpoint(const fs::path& p) {
  const std::string h = head_of(p, 16);
  return h.size() == 16 && h.compare(0, 8, std::string("SEQTAPE\0", 8)) == 0 &&
         h.compare(12, 4, std::string("\x01\0\0\0", 4)) == 0;
}

bool is_regular(const fs::path& p) {
  std::error_code ec;
  return fs::symlink_status(p, ec).type() == fs::file_type::regular;
}

void remove_or_fail(const fs::path& p) {
  std::error_code ec;
  if (!fs::remove(p, ec) && ec)
    fail(p.string(), "cannot remove this file of the run --overwrite replaces: " + ec.message());
}

// The directory's entry names, sorted (so that what is removed is listed in a stable order).
std::vector<std::string> entry_names(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (auto it = fs::directory_iterator(dir, ec); !ec && it != fs::directory_iterator();
       it.increment(ec))
    names.push_back(it->path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

}  // namespace

std::vector<std::string> run_checkpoint_files(const std::string& out_dir) {
  std::vector<std::string> found;
  for (const std::string& name : entry_names(out_dir))
    if (is_checkpoint_name(name)) found.push_back((fs::path(out_dir) / name).string());
  return found;
}

std::vector<std::string> remove_replaced_run(const std::string& out_dir) {
  const fs::path dir(out_dir);
  const std::vector<std::string> names = entry_names(out_dir);
  std::vector<std::string> removed;
  auto remove = [&](const std::string& name) {
    remove_or_fail(dir / name);
    removed.push_back(name);
  };
  for (const std::string& name : names) {
    const fs::path p = dir / name;
    if (!is_regular(p)) continue;
    if (is_checkpoint_name(name) ? is_seqtape_checkpoint(p)
                                 : name == "metrics.csv" && head_of(p, 15) == "step,kind,loss,")
      remove(name);
  }
  // Without a checkpoint or metrics of a run, these names are not known to be the run's.
  for (const char* name : {"loss.svg", kJointModelFile.data()})
    if (!removed.empty() && is_regular(dir / name)) remove(name);
  for (const std::string& temp : names) {
    const size_t at = temp.find(".tmp.");
    if (at != std::string::npos && is_run_file_name(temp.substr(0, at)) &&
        stale_temp_of(temp, temp.substr(0, at)) && is_regular(dir / temp))
      remove(temp);
  }
  return removed;
}

int remove_stale_temp_files(const std::string& path) {
  const fs::path p(path);
  const std::string name = p.filename().string();
  int removed = 0;
  for (const std::string& temp : entry_names(p.parent_path().string())) {
    std::error_code rm;
    if (stale_temp_of(temp, name) && fs::remove(p.parent_path() / temp, rm)) ++removed;
  }
  return removed;
}

}  // namespace seqtape
