// OutputText: stop strings across token boundaries, and streaming that never shows a byte
// the final text will not have.
//
// Dimension key: none (bytes of UTF-8 text).
#include "infer/output_text.h"

#include <algorithm>

namespace seqtape {

bool OutputText::append(std::string_view piece) {
  if (stopped_) fail("OutputText::append", "the text already ended at a stop string");
  const size_t old = text_.size();
  text_.append(piece);
  if (!stops_) return false;
  size_t first = std::string::npos;
  for (const std::string& s : *stops_) {
    if (s.empty()) continue;
    // A match that ends in the new bytes starts at most s.size() - 1 bytes before them.
    const size_t from = old >= s.size() - 1 ? old - (s.size() - 1) : 0;
    const size_t at = text_.find(s, from);
    if (at != std::string::npos) first = std::min(first, at);
  }
  if (first == std::string::npos) return false;
  text_.resize(first);
  stopped_ = true;
  return true;
}

size_t OutputText::holdback() const {
  if (!stops_ || stopped_) return 0;
  size_t keep = 0;
  for (const std::string& s : *stops_) {
    // The longest proper prefix of s that the text ends with.
    const size_t most = std::min(s.size() - (s.empty() ? 0 : 1), text_.size());
    for (size_t k = most; k > keep; --k)
      if (text_.compare(text_.size() - k, k, s, 0, k) == 0) {
        keep = k;
        break;
      }
  }
  return keep;
}

std::string OutputText::take_stream() {
  const size_t safe = text_.size() - holdback();
  if (safe > released_) {
    stream_.feed(std::string_view(text_).substr(released_, safe - released_));
    released_ = safe;
  }
  return stream_.take_complete();
}

std::string OutputText::finish_stream() {
  if (text_.size() > released_) {
    stream_.feed(std::string_view(text_).substr(released_));
    released_ = text_.size();
  }
  std::string out = stream_.take_complete();
  return out + stream_.finish();
}

}  // namespace seqtape
