#include "text/tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <sstream>

#include "io/envelope.h"

namespace seqtape {

// ---- UTF-8 --------------------------------------------------------------------------------

const char* utf8_error_name(Utf8Error e) {
  switch (e) {
    case Utf8Error::kNone:
      return "valid";
    case Utf8Error::kInvalidByte:
      return "byte that never occurs in UTF-8";
    case Utf8Error::kUnexpectedContinuation:
      return "continuation byte without a lead byte";
    case Utf8Error::kTruncated:
      return "truncated multi-byte sequence";
    case Utf8Error::kOverlong:
      return "overlong encoding";
    case Utf8Error::kSurrogate:
      return "encoded surrogate code point";
    case Utf8Error::kTooLarge:
      return "code point above U+10FFFF";
  }
  return "unknown";
}

namespace {

bool is_continuation(unsigned char b) {
  return (b & 0xC0) == 0x80;
}

// Bytes a sequence with this lead byte has in total, or 0 if it cannot start one.
int sequence_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if (lead < 0xC0) return 0;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  if (lead < 0xF5) return 4;
  return 0;
}

std::string hex_bytes(std::string_view s, size_t pos, size_t n) {
  std::string out;
  char buf[8];
  for (size_t i = pos; i < s.size() && i < pos + n; ++i) {
    std::snprintf(buf, sizeof buf, "%s%02X", out.empty() ? "" : " ",
                  static_cast<unsigned char>(s[i]));
    out += buf;
  }
  return out;
}

std::string invalid_utf8_message(std::string_view s, size_t pos, Utf8Error err) {
  return "invalid UTF-8 at byte " + std::to_string(pos + 1) + " (" + utf8_error_name(err) + ": " +
         hex_bytes(s, pos, 4) + ")";
}

}  // namespace

Utf8Char utf8_decode_one(std::string_view s, size_t pos) {
  const auto lead = static_cast<unsigned char>(s[pos]);
  if (lead < 0x80) return {lead, 1, Utf8Error::kNone};
  if (lead < 0xC0) return {0, 0, Utf8Error::kUnexpectedContinuation};
  if (lead == 0xC0 || lead == 0xC1) return {0, 0, Utf8Error::kOverlong};
  if (lead >= 0xF5) return {0, 0, Utf8Error::kInvalidByte};
  const int n = sequence_length(lead);
  // The second byte's allowed range is narrower for a few lead bytes; checking it here is what
  // rejects overlongs, surrogates and > U+10FFFF without decoding first.
  unsigned char lo = 0x80, hi = 0xBF;
  Utf8Error range_err = Utf8Error::kNone;
  if (lead == 0xE0) lo = 0xA0, range_err = Utf8Error::kOverlong;
  if (lead == 0xED) hi = 0x9F, range_err = Utf8Error::kSurrogate;
  if (lead == 0xF0) lo = 0x90, range_err = Utf8Error::kOverlong;
  if (lead == 0xF4) hi = 0x8F, range_err = Utf8Error::kTooLarge;
  char32_t cp = lead & (0xFF >> (n + 1));
  for (int i = 1; i < n; ++i) {
    if (pos + i >= s.size()) return {0, 0, Utf8Error::kTruncated};
    const auto b = static_cast<unsigned char>(s[pos + i]);
    if (!is_continuation(b)) return {0, 0, Utf8Error::kTruncated};
    if (i == 1 && (b < lo || b > hi)) return {0, 0, range_err};
    cp = (cp << 6) | (b & 0x3F);
  }
  return {cp, static_cast<uint8_t>(n), Utf8Error::kNone};
}

size_t utf8_find_invalid(std::string_view s, Utf8Error* err) {
  size_t pos = 0;
  while (pos < s.size()) {
    const Utf8Char c = utf8_decode_one(s, pos);
    if (c.err != Utf8Error::kNone) {
      if (err) *err = c.err;
      return pos;
    }
    pos += c.len;
  }
  if (err) *err = Utf8Error::kNone;
  return std::string_view::npos;
}

std::string utf8_encode(char32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

std::string code_point_label(char32_t cp) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "U+%04X", static_cast<unsigned>(cp));
  return buf;
}

std::vector<char32_t> utf8_decode(std::string_view s, std::string_view where) {
  std::vector<char32_t> out;
  size_t pos = 0;
  while (pos < s.size()) {
    const Utf8Char c = utf8_decode_one(s, pos);
    if (c.err != Utf8Error::kNone) fail(std::string(where), invalid_utf8_message(s, pos, c.err));
    out.push_back(c.cp);
    pos += c.len;
  }
  return out;
}

std::string Utf8StreamBuffer::take_complete() {
  // Only the last character can be incomplete, and it starts within the last 3 bytes.
  size_t keep_from = buf_.size();
  const size_t lookback = std::min<size_t>(3, buf_.size());
  for (size_t k = 1; k <= lookback; ++k) {
    const size_t start = buf_.size() - k;
    const auto b = static_cast<unsigned char>(buf_[start]);
    if (is_continuation(b)) continue;
    const int n = sequence_length(b);
    if (n > static_cast<int>(k)) keep_from = start;  // lead byte still waiting for its tail
    break;
  }
  std::string out = buf_.substr(0, keep_from);
  buf_.erase(0, keep_from);
  return out;
}

std::string Utf8StreamBuffer::finish() {
  std::string out;
  out.swap(buf_);
  return out;
}

// ---- vocabulary ---------------------------------------------------------------------------

Vocab Vocab::from_tokens(std::vector<std::string> tokens, std::string_view where) {
  Vocab v;
  const std::string w(where);
  if (tokens.size() > static_cast<size_t>(INT32_MAX))
    fail(w, "vocabulary of " + std::to_string(tokens.size()) + " tokens does not fit int32 ids");
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string& t = tokens[i];
    const std::string at = w + "[" + std::to_string(i) + "]";
    if (t.empty()) fail(at, "empty token");
    if (t.find_first_of("\r\n") != std::string::npos)
      fail(at, "token contains a line break, which a vocabulary file cannot hold");
    Utf8Error err;
    const size_t bad = utf8_find_invalid(t, &err);
    if (bad != std::string::npos) fail(at, invalid_utf8_message(t, bad, err));
    const auto id = static_cast<int32_t>(i);
    if (!v.index_.emplace(t, id).second)
      fail(at, "duplicate token '" + t + "' (first at id " + std::to_string(v.index_.at(t)) + ")");
  }
  v.tokens_ = std::move(tokens);
  auto special = [&](std::string_view name) -> std::optional<int32_t> {
    auto it = v.index_.find(name);
    if (it == v.index_.end()) return std::nullopt;
    return it->second;
  };
  for (std::string_view name : {kPadToken, kBosToken, kEosToken})
    if (!special(name))
      fail(w, "vocabulary has no " + std::string(name) +
                  " token (every model needs <pad>, <bos> and <eos>)");
  v.pad_ = *special(kPadToken);
  v.bos_ = *special(kBosToken);
  v.eos_ = *special(kEosToken);
  v.unk_ = special(kUnkToken);
  v.sep_ = special(kSepToken);
  return v;
}

Vocab Vocab::load(const std::string& path) {
  std::string text = read_user_file(path, "vocabulary file", kMaxVocabBytes);
  if (text.starts_with("\xEF\xBB\xBF")) text.erase(0, 3);
  std::vector<std::string> tokens;
  std::unordered_map<std::string, int64_t> first_line;
  size_t pos = 0;
  int64_t line = 0;
  while (pos < text.size()) {
    ++line;
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string tok = text.substr(pos, end - pos);
    pos = end + 1;
    if (tok.ends_with('\r')) tok.pop_back();
    const std::string at = path + ":" + std::to_string(line);
    if (tok.empty()) fail(at, "empty line (every line must hold one token)");
    Utf8Error err;
    const size_t bad = utf8_find_invalid(tok, &err);
    if (bad != std::string::npos) fail(at, invalid_utf8_message(tok, bad, err));
    if (tok.find('\r') != std::string::npos) fail(at, "stray carriage return inside a token");
    // from_tokens would catch duplicates too, but only here are both line numbers known.
    auto [it, fresh] = first_line.emplace(tok, line);
    if (!fresh)
      fail(at,
           "duplicate token '" + tok + "' (already on line " + std::to_string(it->second) + ")");
    tokens.push_back(std::move(tok));
  }
  if (tokens.empty()) fail(path, "vocabulary file is empty");
  return from_tokens(std::move(tokens), path);
}

Vocab Vocab::build(const std::vector<std::string>& texts) {
  std::set<char32_t> chars;
  for (size_t i = 0; i < texts.size(); ++i) {
    const std::string where = "text #" + std::to_string(i + 1);
    for (char32_t c : utf8_decode(texts[i], where)) {
      if (c == U'\n' || c == U'\r')
        fail(where, "contains a line break, which a vocabulary file cannot hold");
      chars.insert(c);
    }
  }
  std::vector<std::string> tokens = {std::string(kPadToken), std::string(kBosToken),
                                     std::string(kEosToken), std::string(kUnkToken),
                                     std::string(kSepToken)};
  for (char32_t c : chars) tokens.push_back(utf8_encode(c));
  // A data character that spells a special name (e.g. a lone "<unk>") cannot occur: single
  // characters never equal a multi-character special name.
  return from_tokens(std::move(tokens), "Vocab::build");
}

void Vocab::save(const std::string& path) const {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) fail(path, "cannot open vocabulary file for writing");
  // load() drops one leading byte-order mark; a first token that starts with U+FEFF itself
  // keeps it only if the file carries a mark of its own in front.
  if (!tokens_.empty() && tokens_[0].starts_with("\xEF\xBB\xBF")) out << "\xEF\xBB\xBF";
  for (const std::string& t : tokens_) out << t << '\n';
  out.flush();
  if (!out) fail(path, "error while writing vocabulary file");
}

const std::string& Vocab::token(int32_t id) const {
  if (id < 0 || id >= size())
    fail("Vocab::token", "id " + std::to_string(id) + " is outside the vocabulary [0, " +
                             std::to_string(size()) + ")");
  return tokens_[static_cast<size_t>(id)];
}

std::optional<int32_t> Vocab::find(std::string_view token) const {
  auto it = index_.find(token);
  if (it == index_.end()) return std::nullopt;
  return it->second;
}

int32_t Vocab::sep_id() const {
  if (!sep_) fail("Vocab", "vocabulary has no <sep> token (a decoder-only model needs one)");
  return *sep_;
}

bool Vocab::is_special(int32_t id) const {
  return id == pad_ || id == bos_ || id == eos_ || (unk_ && id == *unk_) || (sep_ && id == *sep_);
}

// ---- tokenizer ----------------------------------------------------------------------------

Tokenizer::Tokenizer(Vocab vocab, bool single_characters) : vocab_(std::move(vocab)) {
  token_at_.push_back(-1);  // the root
  for (int32_t id = 0; id < vocab_.size(); ++id) {
    if (vocab_.is_special(id)) continue;
    const std::string& t = vocab_.token(id);
    const size_t chars = utf8_decode(t, "token").size();
    if (single_characters && chars != 1) continue;
    max_token_chars_ = std::max(max_token_chars_, chars);
    uint64_t node = 0;
    for (unsigned char b : t) {
      auto [it, fresh] = child_.emplace(node << 8 | b, static_cast<int32_t>(token_at_.size()));
      if (fresh) token_at_.push_back(-1);
      node = static_cast<uint64_t>(it->second);
    }
    token_at_[node] = id;
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, std::string_view context) const {
  // Validate the whole text first, so that errors name the first bad byte.
  size_t n_chars = 0;
  for (size_t pos = 0; pos < text.size(); ++n_chars) {
    const Utf8Char c = utf8_decode_one(text, pos);
    if (c.err != Utf8Error::kNone)
      fail(std::string(context), invalid_utf8_message(text, pos, c.err));
    pos += c.len;
  }

  std::vector<int32_t> ids;
  ids.reserve(n_chars);
  size_t pos = 0, i = 0;  // byte offset and character index of the next token
  while (pos < text.size()) {
    // Longest match: walk the trie as far as the text allows. Tokens are whole UTF-8
    // characters, so any token end is a character boundary of the (valid) text.
    int32_t match = -1;
    size_t match_end = pos;
    uint64_t node = 0;
    for (size_t p = pos; p < text.size(); ++p) {
      const auto it = child_.find(node << 8 | static_cast<unsigned char>(text[p]));
      if (it == child_.end()) break;
      node = static_cast<uint64_t>(it->second);
      if (token_at_[node] >= 0) {
        match = token_at_[node];
        match_end = p + 1;
      }
    }
    const size_t ch_len = utf8_decode_one(text, pos).len;
    if (match >= 0) {
      ids.push_back(match);
      for (size_t p = pos; p < match_end; ++p)  // count the characters consumed
        i += (static_cast<unsigned char>(text[p]) & 0xC0) != 0x80;
      pos = match_end;
      continue;
    }
    if (!vocab_.unk_id()) {
      const std::string_view ch = text.substr(pos, ch_len);
      fail(std::string(context), "character " + std::to_string(i + 1) + " '" + std::string(ch) +
                                     "' (" + code_point_label(utf8_decode_one(ch, 0).cp) +
                                     ") is not in the vocabulary, which has no <unk> token");
    }
    ids.push_back(*vocab_.unk_id());
    pos += ch_len;
    ++i;
  }
  return ids;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool keep_specials) const {
  std::string out;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int32_t id = ids[i];
    if (id < 0 || id >= vocab_.size())
      fail("Tokenizer::decode", "id " + std::to_string(id) + " at position " + std::to_string(i) +
                                    " is outside the vocabulary [0, " +
                                    std::to_string(vocab_.size()) + ")");
    if (!keep_specials && (id == vocab_.pad_id() || id == vocab_.bos_id() || id == vocab_.eos_id()))
      continue;
    out += vocab_.token(id);
  }
  return out;
}

}  // namespace seqtape
