#pragma once
// Text <-> token ids. A vocabulary is a list of token strings in id order; a few of them are
// special tokens recognised by name. Encoding is longest match over the vocabulary, so
// single-character tokens (the common case) and multi-character tokens (学习) mix freely.
// The UTF-8 decoder is our own and strict, because every error a user's file can cause must
// come back as an Error naming the file, the line and the offending bytes.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tensor/tensor.h"  // seqtape::Error, fail

namespace seqtape {

// ---- UTF-8 --------------------------------------------------------------------------------

enum class Utf8Error : uint8_t {
  kNone = 0,
  kInvalidByte,             // 0xF5..0xFF can never appear in UTF-8
  kUnexpectedContinuation,  // 0x80..0xBF where a character should start
  kTruncated,               // a sequence ends (string end or non-continuation byte) too early
  kOverlong,                // the code point has a shorter encoding (0xC0, 0xC1, E0 80.., F0 80..)
  kSurrogate,               // U+D800..U+DFFF
  kTooLarge,                // above U+10FFFF
};
const char* utf8_error_name(Utf8Error e);

struct Utf8Char {
  char32_t cp = 0;
  uint8_t len = 0;  // bytes consumed; 0 when err != kNone
  Utf8Error err = Utf8Error::kNone;
};

// Decodes the character starting at byte `pos` of `s` (pos < s.size()).
Utf8Char utf8_decode_one(std::string_view s, size_t pos);

// Byte offset of the first invalid sequence, or std::string_view::npos if `s` is valid UTF-8.
size_t utf8_find_invalid(std::string_view s, Utf8Error* err = nullptr);

std::string utf8_encode(char32_t cp);       // cp must be a valid scalar value
std::string code_point_label(char32_t cp);  // "U+4ECA"

// Splits valid UTF-8 into code points; throws Error "<where>: invalid UTF-8 at byte N (...)".
std::vector<char32_t> utf8_decode(std::string_view s, std::string_view where);

// Streaming output: a generated token may end in the middle of a multi-byte character, and
// a half character must not be shown. feed() bytes as they come, take_complete() what can be
// shown now; the concatenation of everything returned (including finish()) equals everything fed.
class Utf8StreamBuffer {
 public:
  void feed(std::string_view bytes) { buf_.append(bytes); }
  // The longest buffered prefix that does not end inside an incomplete character. Bytes that
  // can never become valid UTF-8 are passed through rather than held back forever.
  std::string take_complete();
  // Everything still buffered (an incomplete tail at the end of the stream), then empty.
  std::string finish();
  size_t pending_bytes() const { return buf_.size(); }

 private:
  std::string buf_;
};

// ---- vocabulary ---------------------------------------------------------------------------

inline constexpr std::string_view kPadToken = "<pad>";
inline constexpr std::string_view kBosToken = "<bos>";
inline constexpr std::string_view kEosToken = "<eos>";
inline constexpr std::string_view kUnkToken = "<unk>";
inline constexpr std::string_view kSepToken = "<sep>";

// Token strings in id order. <pad>, <bos>, <eos> must be present (the models need them);
// <unk> (map unknown characters) and <sep> (decoder-only prompts) are optional.
class Vocab {
 public:
  // One token per line in id order, UTF-8; the final '\n' is optional, "\r\n" is accepted,
  // a leading UTF-8 byte-order mark is skipped. Empty lines, duplicates and invalid UTF-8 are
  // errors naming "path:line".
  static Vocab load(const std::string& path);
  // `where` names the source in error messages ("tokens[3]: ...").
  static Vocab from_tokens(std::vector<std::string> tokens, std::string_view where = "tokens");
  // From data: <pad> <bos> <eos> <unk> <sep> (ids 0..4), then every character seen in `texts`,
  // sorted by code point so the result depends only on the set of characters.
  static Vocab build(const std::vector<std::string>& texts);

  void save(const std::string& path) const;  // the format load() reads, '\n' after each token

  const std::vector<std::string>& tokens() const { return tokens_; }
  int32_t size() const { return static_cast<int32_t>(tokens_.size()); }
  const std::string& token(int32_t id) const;  // Error if out of range
  std::optional<int32_t> find(std::string_view token) const;

  int32_t pad_id() const { return pad_; }
  int32_t bos_id() const { return bos_; }
  int32_t eos_id() const { return eos_; }
  std::optional<int32_t> unk_id() const { return unk_; }
  std::optional<int32_t> maybe_sep_id() const { return sep_; }
  int32_t sep_id() const;  // Error if the vocabulary has no <sep>
  bool is_special(int32_t id) const;

 private:
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  using Index = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

  std::vector<std::string> tokens_;
  Index index_;
  int32_t pad_ = -1, bos_ = -1, eos_ = -1;
  std::optional<int32_t> unk_, sep_;
};

// ---- tokenizer ----------------------------------------------------------------------------

class Tokenizer {
 public:
  // single_characters: match only the tokens that are one character (the character side of a
  // vocabulary shared with a side of words, whose words must not be matched inside text).
  explicit Tokenizer(Vocab vocab, bool single_characters = false);

  // Longest match, left to right, over the non-special tokens. Text is plain: "<eos>" in the
  // text is five characters, never the special token. A character no token starts with maps to
  // <unk> if the vocabulary has one; otherwise an Error names `context` (e.g. "data.tsv:12"),
  // the 1-based character index, the character and its code point.
  std::vector<int32_t> encode(std::string_view text, std::string_view context = "text") const;

  // Concatenates token strings. <pad>, <bos>, <eos> are skipped unless keep_specials; <unk>
  // and <sep> are always written by name. An id outside the vocabulary is an Error.
  std::string decode(std::span<const int32_t> ids, bool keep_specials = false) const;

  const std::string& token_bytes(int32_t id) const { return vocab_.token(id); }
  const Vocab& vocab() const { return vocab_; }
  // The longest non-special token, in characters (at least 1): a text of more than
  // max_token_chars() * N characters cannot encode to N tokens or fewer.
  size_t max_token_chars() const { return std::max<size_t>(max_token_chars_, 1); }

 private:
  Vocab vocab_;
  size_t max_token_chars_ = 0;  // longest non-special token, in characters
  // A byte trie over the non-special tokens, so that the longest match at a position costs
  // at most its length: encoding is linear in text length x longest token.
  // Node 0 is the root; child (node << 8 | byte) -> node; token_at_[node] is the token id
  // that ends at that node, or -1.
  std::unordered_map<uint64_t, int32_t> child_;
  std::vector<int32_t> token_at_;
};

}  // namespace seqtape
