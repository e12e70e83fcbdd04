#pragma once
// OutputText: the text of one hypothesis as tokens arrive — stop strings and streaming.
//
// A stop string is found even when it is split across tokens (each search starts far enough
// back to cover a match that began in earlier text); the text is cut before its first
// occurrence. Streaming releases text only when it can no longer change: never a byte that
// might still begin a stop string, and never half a UTF-8 character (Utf8StreamBuffer). So
// the concatenation of everything released equals the final text.
//
// Dimension key: none (bytes of UTF-8 text).

#include <string>
#include <string_view>
#include <vector>

#include "text/tokenizer.h"  // Utf8StreamBuffer

namespace seqtape {

class OutputText {
 public:
  OutputText() = default;
  explicit OutputText(const std::vector<std::string>* stop_strings) : stops_(stop_strings) {}

  // Appends a token's bytes. Returns true when a stop string now occurs; text() is then cut
  // before it and further appends are refused.
  bool append(std::string_view piece);
  const std::string& text() const { return text_; }
  bool stopped() const { return stopped_; }

  // Streaming: text that became final since the last call (complete characters only).
  std::string take_stream();
  // The rest of the text, at the end of the hypothesis.
  std::string finish_stream();

 private:
  size_t holdback() const;  // bytes at the end that may still begin a stop string

  const std::vector<std::string>* stops_ = nullptr;
  std::string text_;
  size_t released_ = 0;  // bytes of text_ already passed to stream_
  Utf8StreamBuffer stream_;
  bool stopped_ = false;
};

}  // namespace seqtape
