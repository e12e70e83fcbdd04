#pragma once
// The access log of `seqtape serve`: one JSON object per answered request, one line each,
// written whole under a mutex and flushed (a crash loses no finished line). Request headers
// are never written, so neither are API keys.
//
// Dimension key: none.

#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>

namespace seqtape::serve {

class AccessLog {
 public:
  // "-": stderr; "": no log; else the file, appended to (Error naming it when it cannot be
  // opened).
  explicit AccessLog(const std::string& path);
  ~AccessLog();
  AccessLog(const AccessLog&) = delete;
  AccessLog& operator=(const AccessLog&) = delete;
  void write(const nlohmann::json& line);

 private:
  std::mutex m_;
  std::FILE* f_ = nullptr;
  bool own_ = false;
};

// Now in UTC as ISO 8601 with milliseconds: 2026-12-05T04:01:41.123Z.
std::string utc_now_iso8601();

}  // namespace seqtape::serve
