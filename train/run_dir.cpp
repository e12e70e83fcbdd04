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
#include "train/trainer.h"

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

nlohmann::json run_record(const TrainOptions& opt, const std::string& model_json,
                          const std::string& vocab_fingerprint) {
  nlohmann::json r;
  r["model"] = nlohmann::json::parse(model_json);
  r["vocabulary"] = vocab_fingerprint;
  r["optimizer"] = {{"kind", optimizer_name(opt.optim.kind)},
                    {"weight_decay", opt.optim.weight_decay},
                    {"lr", opt.schedule.lr},
                    {"warmup", opt.schedule.warmup},
                    {"clip", opt.clip},
                    {"label_smoothing", opt.label_smoothing},
                    {"batch", opt.batch}};
  r["data"] = {{"data", file_fingerprint(opt.data)},
               {"valid", opt.valid_data.empty() ? "" : file_fingerprint(opt.valid_data)},
               {"seed", opt.seed},
               {"valid_fraction", opt.valid_fraction},
               {"valid_max", opt.valid_max}};
  return r;
}

namespace {

void diff(const nlohmann::json& was, const nlohmann::json& now, const std::string& path,
          std::vector<std::string>& out) {
  if (was.is_object() && now.is_object()) {
    for (const auto& [k, v] : was.items())
      diff(v, now.contains(k) ? now.at(k) : nlohmann::json(), path.empty() ? k : path + "." + k,
           out);
    for (const auto& [k, v] : now.items())
      if (!was.contains(k)) diff(nlohmann::json(), v, path.empty() ? k : path + "." + k, out);
    return;
  }
  if (was != now) out.push_back(path + " was " + was.dump() + ", now " + now.dump());
}

}  // namespace

void check_resume(const nlohmann::json& stored, const nlohmann::json& now,
                  const std::string& ckpt_path) {
  if (!stored.is_object() || !stored.contains("run")) return;  // written before records existed
  std::vector<std::string> d;
  diff(stored.at("run"), now, "", d);
  if (d.empty()) return;
  std::string msg = "--resume with different options or data than the run was started with (" +
                    std::to_string(d.size()) + " difference" + (d.size() > 1 ? "s" : "") + "): ";
  for (size_t i = 0; i < d.size(); ++i) msg += (i ? "; " : "") + d[i];
  msg +=
      ". Only --steps, --epochs and --time-limit may change on resume; give the run's "
      "original options, or start a new run with another --out";
  fail(ckpt_path, msg);
}

}  // namespace seqtape
