#pragma once
// Helpers shared by the test programs: a self-removing temporary directory, whole-file reads
// and writes, and the message of an expected seqtape::Error.

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <exception>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "tensor/tensor.h"  // seqtape::Error

namespace seqtape::test_util {

// A fresh directory under the system temp dir, removed with everything in it.
class TempDir {
 public:
  explicit TempDir(const std::string& tag = "test") {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            ("seqtape_" + tag + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  // File names in the directory, sorted.
  std::vector<std::string> entries() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(path_))
      out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  std::filesystem::path path_;
};

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

inline void write_bytes(const std::string& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Runs fn, which must throw seqtape::Error; returns its message (a test failure otherwise).
template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-seqtape exception: " << e.what();
    return {};
  }
  ADD_FAILURE() << "did not throw";
  return {};
}

// 24 short German phrases with spaces and shared stems ("kein Haus"): text that a SentencePiece
// model splits into subwords and the character tokenizer reads differently.
inline std::vector<std::string> german_phrases() {
  std::vector<std::string> out;
  for (const char* det : {"das", "ein", "kein", "mein"})
    for (const char* noun : {"Haus", "Garten", "Fenster", "Wasser", "Schule", "Stadt"})
      out.push_back(std::string(det) + " " + noun);
  return out;
}

}  // namespace seqtape::test_util

// stmt must throw a seqtape::Error whose message contains text.
#define EXPECT_ERROR_HAS(stmt, text)                                        \
  do {                                                                      \
    const std::string msg_ = ::seqtape::test_util::error_of([&] { stmt; }); \
    EXPECT_NE(msg_.find(text), std::string::npos) << msg_;                  \
  } while (0)

// haystack (a string) contains needle.
#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE((haystack).find(needle), std::string::npos) << (haystack)
