// AccessLog: JSON lines to stderr or a file.
//
// Dimension key: none.
#include "serve/access_log.h"

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>

#include "tensor/tensor.h"  // fail

namespace seqtape::serve {

AccessLog::AccessLog(const std::string& path) {
  if (path == "-") {
    f_ = stderr;
  } else if (!path.empty()) {
    f_ = std::fopen(path.c_str(), "a");
    if (!f_) fail("serve", "cannot open the access log " + path + ": " + std::strerror(errno));
    own_ = true;
  }
}

AccessLog::~AccessLog() {
  if (own_) std::fclose(f_);
}

void AccessLog::write(const nlohmann::json& line) {
  if (!f_) return;
  const std::string text =
      line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
  std::lock_guard<std::mutex> l(m_);
  std::fwrite(text.data(), 1, text.size(), f_);
  std::fflush(f_);
}

std::string utc_now_iso8601() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
                tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec, int(ms));
  return buf;
}

}  // namespace seqtape::serve
