#pragma once
// Shared by the serve tests: a Server on 127.0.0.1 at a free port (stopped by the destructor),
// a raw loopback socket for misbehaving clients, and Server-Sent Events parsing.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "infer/model.h"
#include "serve/server.h"

namespace seqtape::serve_test {

inline std::string f15_path() {
  return std::string(SEQTAPE_SOURCE_DIR) + "/datasets/f15/checkpoint.bin";
}

// A server running on its own thread; the destructor stops it (drain 0) and joins.
struct RunningServer {
  std::unique_ptr<serve::Server> server;
  std::thread thread;
  int port = 0;
  RunningServer(const InferenceModel& model, serve::ServerOptions o) {
    o.host = "127.0.0.1";
    o.port = 0;
    server = std::make_unique<serve::Server>(model, o);
    port = server->bind();
    thread = std::thread([this] { server->run(); });
  }
  void stop(std::chrono::milliseconds drain = std::chrono::milliseconds(0)) {
    if (!thread.joinable()) return;
    server->stop(drain);
    thread.join();
  }
  ~RunningServer() { stop(); }
};

// A blocking TCP socket to 127.0.0.1:port with receive timeout; `from` binds its own end to
// another loopback address (another client, as the server counts them).
class RawSocket {
 public:
  explicit RawSocket(int port, int timeout_ms = 10000, const char* from = nullptr) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    if (from) {
      sockaddr_in self{};
      self.sin_family = AF_INET;
      inet_pton(AF_INET, from, &self.sin_addr);
      if (bind(fd_, reinterpret_cast<sockaddr*>(&self), sizeof self) != 0) {
        ::close(fd_);
        fd_ = -1;
        return;
      }
    }
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(fd_);
      fd_ = -1;
    }
    timeval tv{timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    if (fd_ >= 0) setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~RawSocket() { close(); }
  bool ok() const { return fd_ >= 0; }
  bool send_all(const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
      const ssize_t n = ::send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += size_t(n);
    }
    return true;
  }
  // Appends what arrives to `buf`; returns bytes read (0 = closed, -1 = timeout/error).
  ssize_t read_some(std::string& buf) {
    char tmp[4096];
    const ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
    if (n > 0) buf.append(tmp, size_t(n));
    return n;
  }
  // Reads until the peer closes or times out.
  std::string read_all() {
    std::string buf;
    while (read_some(buf) > 0) {
    }
    return buf;
  }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  // Half-closes: the server reads the end of the request, the answer can still come back.
  void shutdown_write() { ::shutdown(fd_, SHUT_WR); }

 private:
  int fd_ = -1;
};

inline std::string post_request(const std::string& body, bool keep_alive = false) {
  return "POST /v1/generate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n" +
         std::string(keep_alive ? "" : "Connection: close\r\n") +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

struct SseEvent {
  std::string name;
  nlohmann::json data;
};

// Parses a text/event-stream body (already de-chunked).
inline std::vector<SseEvent> parse_sse(const std::string& body) {
  std::vector<SseEvent> out;
  size_t pos = 0;
  for (;;) {
    const size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) break;
    const std::string block = body.substr(pos, end - pos);
    pos = end + 2;
    SseEvent e;
    std::string data;
    size_t lp = 0;
    while (lp <= block.size()) {
      size_t le = block.find('\n', lp);
      if (le == std::string::npos) le = block.size();
      const std::string line = block.substr(lp, le - lp);
      if (line.rfind("event: ", 0) == 0) e.name = line.substr(7);
      if (line.rfind("data: ", 0) == 0) data += line.substr(6);
      lp = le + 1;
    }
    e.data = nlohmann::json::parse(data);
    out.push_back(e);
  }
  return out;
}

// The JSON minus what depends on the clock.
inline nlohmann::json timeless(nlohmann::json j) {
  j.erase("seconds");
  j.erase("tokens_per_second");
  return j;
}

// Runs a shell command; its stdout, and fails the test unless it exits 0.
inline std::string command_output(const std::string& cmd) {
  FILE* p = popen(cmd.c_str(), "r");
  EXPECT_NE(p, nullptr) << cmd;
  if (!p) return "";
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  EXPECT_EQ(pclose(p), 0) << cmd;
  return out;
}

}  // namespace seqtape::serve_test
