#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "tests/test_util.h"
#include "text/text_codec.h"
#include "text/tokenizer.h"
#include "train/dataset.h"

namespace seqtape {
namespace {

const std::string kRefVocab = std::string(SEQTAPE_SOURCE_DIR) + "/datasets/reference/vocab.txt";

// A file in the test's temp dir holding exactly `bytes`.
std::string write_temp(const std::string& name, const std::string& bytes) {
  const auto dir = std::filesystem::temp_directory_path() / "seqtape_test_tokenizer";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / name).string();
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

using test_util::error_of;

TEST(Utf8, DecodesValidText) {
  const std::vector<char32_t> cps = utf8_decode("a\xC3\xA9今\xF0\x9F\x98\x80", "t");
  EXPECT_EQ(cps, (std::vector<char32_t>{U'a', U'é', U'今', U'\U0001F600'}));
  for (char32_t cp : {U'\0', U'\x7F', U'\x80', U'\u07FF', U'\u0800', U'\uD7FF', U'\uE000',
                      U'\uFFFF', U'\U00010000', U'\U0010FFFF'}) {
    const std::string s = utf8_encode(cp);
    ASSERT_EQ(utf8_find_invalid(s), std::string::npos) << code_point_label(cp);
    EXPECT_EQ(utf8_decode(s, "t"), std::vector<char32_t>{cp});
  }
  EXPECT_EQ(code_point_label(U'今'), "U+4ECA");
}

TEST(Utf8, RejectsEveryKindOfInvalidSequence) {
  struct Case {
    std::string bytes;
    Utf8Error err;
    size_t at;
  };
  const std::vector<Case> cases = {
      {"ab\x80", Utf8Error::kUnexpectedContinuation, 2},
      {"\xC0\xAF", Utf8Error::kOverlong, 0},  // '/' in two bytes
      {"\xC1\xBF", Utf8Error::kOverlong, 0},
      {"\xE0\x80\xAF", Utf8Error::kOverlong, 0},      // '/' in three bytes
      {"\xF0\x80\x80\xAF", Utf8Error::kOverlong, 0},  // '/' in four bytes
      {"x\xED\xA0\x80", Utf8Error::kSurrogate, 1},    // U+D800
      {"\xED\xBF\xBF", Utf8Error::kSurrogate, 0},     // U+DFFF
      {"\xF4\x90\x80\x80", Utf8Error::kTooLarge, 0},  // U+110000
      {"\xF5\x80\x80\x80", Utf8Error::kInvalidByte, 0},
      {"\xFF", Utf8Error::kInvalidByte, 0},
      {"\xE4\xBB", Utf8Error::kTruncated, 0},  // 今 without its last byte
      {"\xE4\xBB"
       "a",
       Utf8Error::kTruncated, 0},  // ... followed by ASCII
      {"ok\xF0\x9F\x98", Utf8Error::kTruncated, 2},
  };
  for (const Case& c : cases) {
    Utf8Error err = Utf8Error::kNone;
    EXPECT_EQ(utf8_find_invalid(c.bytes, &err), c.at) << c.bytes;
    EXPECT_EQ(err, c.err) << c.bytes << ": " << utf8_error_name(err);
    const std::string msg = error_of([&] { utf8_decode(c.bytes, "where.txt:7"); });
    EXPECT_HAS(msg, "where.txt:7");
    EXPECT_HAS(msg, "byte " + std::to_string(c.at + 1));
  }
}

TEST(Vocab, ReferenceFileGivesIdsZeroToNine) {
  const Vocab v = Vocab::load(kRefVocab);
  const std::vector<std::string> expected = {"<pad>", "<bos>", "<eos>", "今", "天",
                                             "气",    "很",    "好",    "的", "是"};
  EXPECT_EQ(v.tokens(), expected);
  for (int32_t id = 0; id < 10; ++id) EXPECT_EQ(v.find(expected[id]), id);
  EXPECT_EQ(v.pad_id(), 0);
  EXPECT_EQ(v.bos_id(), 1);
  EXPECT_EQ(v.eos_id(), 2);
  EXPECT_FALSE(v.unk_id().has_value());
  EXPECT_FALSE(v.maybe_sep_id().has_value());
  EXPECT_HAS(error_of([&] { v.sep_id(); }), "<sep>");
}

TEST(Vocab, LoadToleratesCrlfAndMissingFinalNewline) {
  const Vocab a = Vocab::load(write_temp("crlf.txt", "<pad>\r\n<bos>\r\n<eos>\r\n学习\r\n"));
  const Vocab b = Vocab::load(write_temp("nofinal.txt", "<pad>\n<bos>\n<eos>\n学习"));
  EXPECT_EQ(a.tokens(), b.tokens());
  EXPECT_EQ(a.find("学习"), 3);
}

TEST(Vocab, SaveLoadRoundTrip) {
  const Vocab v = Vocab::from_tokens({"<pad>", "<bos>", "<eos>", "<unk>", "学习", " ", "a"});
  const std::string path = write_temp("roundtrip.txt", "");
  v.save(path);
  EXPECT_EQ(Vocab::load(path).tokens(), v.tokens());
}

TEST(Vocab, LoadErrorsNameFileAndLine) {
  std::string p = write_temp("empty_line.txt", "<pad>\n<bos>\n\n<eos>\n");
  std::string msg = error_of([&] { Vocab::load(p); });
  EXPECT_HAS(msg, p + ":3");
  EXPECT_HAS(msg, "empty line");

  p = write_temp("dup.txt", "<pad>\n<bos>\n<eos>\n今\n天\n今\n");
  msg = error_of([&] { Vocab::load(p); });
  EXPECT_HAS(msg, p + ":6");
  EXPECT_HAS(msg, "duplicate");
  EXPECT_HAS(msg, "line 4");

  p = write_temp("bad_utf8.txt", "<pad>\n<bos>\n<eos>\n\xE4\xBB\n");
  msg = error_of([&] { Vocab::load(p); });
  EXPECT_HAS(msg, p + ":4");
  EXPECT_HAS(msg, "invalid UTF-8");

  p = write_temp("no_eos.txt", "<pad>\n<bos>\n今\n");
  EXPECT_HAS(error_of([&] { Vocab::load(p); }), "<eos>");

  p = (std::filesystem::temp_directory_path() / "seqtape_no_such_vocab.txt").string();
  msg = error_of([&] { Vocab::load(p); });
  EXPECT_HAS(msg, p);
  EXPECT_HAS(msg, "does not exist");
}

TEST(Vocab, BuildPutsSpecialsFirstThenCharactersByCodePoint) {
  const Vocab v = Vocab::build({"天好今", "b今a"});
  // a U+0061, b U+0062, 今 U+4ECA, 天 U+5929, 好 U+597D
  const std::vector<std::string> expected = {"<pad>", "<bos>", "<eos>", "<unk>", "<sep>",
                                             "a",     "b",     "今",    "天",    "好"};
  EXPECT_EQ(v.tokens(), expected);
  EXPECT_EQ(v.unk_id(), 3);
  EXPECT_EQ(v.sep_id(), 4);
  EXPECT_EQ(Vocab::build({"好今天", "ab"}).tokens(), expected);  // order of data is irrelevant
}

TEST(Tokenizer, ReferenceSentence) {
  const Tokenizer tok(Vocab::load(kRefVocab));
  EXPECT_EQ(tok.encode("今天天气很好"), (std::vector<int32_t>{3, 4, 4, 5, 6, 7}));
  const std::vector<int32_t> ids = {1, 3, 4, 4, 5, 6, 7, 2, 0, 0};
  EXPECT_EQ(tok.decode(ids), "今天天气很好");
  EXPECT_EQ(tok.decode(ids, /*keep_specials=*/true), "<bos>今天天气很好<eos><pad><pad>");
  EXPECT_EQ(tok.token_bytes(3), "今");
}

TEST(Tokenizer, LongestMatchPrefersMultiCharacterToken) {
  const Tokenizer tok(
      Vocab::from_tokens({"<pad>", "<bos>", "<eos>", "学", "习", "学习", "我", "学习者", "们"}));
  EXPECT_EQ(tok.encode("我学习"), (std::vector<int32_t>{6, 5}));
  EXPECT_EQ(tok.encode("学学习习"), (std::vector<int32_t>{3, 5, 4}));
  EXPECT_EQ(tok.encode("学习者们"), (std::vector<int32_t>{7, 8}));
  EXPECT_EQ(tok.encode("学习们"), (std::vector<int32_t>{5, 8}));  // 学习者 needs the 者
  EXPECT_EQ(tok.decode(tok.encode("我学习")), "我学习");
}

TEST(Tokenizer, SpecialNamesInTextArePlainCharacters) {
  const Tokenizer tok(Vocab::build({"<eos>x"}));
  const std::vector<int32_t> ids = tok.encode("<eos>");
  ASSERT_EQ(ids.size(), 5u);
  for (int32_t id : ids) EXPECT_FALSE(tok.vocab().is_special(id));
  EXPECT_EQ(tok.decode(ids), "<eos>");
}

TEST(Tokenizer, UnknownCharacterMapsToUnk) {
  const Tokenizer tok(Vocab::build({"今天很好"}));
  const int32_t unk = *tok.vocab().unk_id();
  const std::vector<int32_t> ids = tok.encode("今天下雨");
  ASSERT_EQ(ids.size(), 4u);
  EXPECT_EQ(ids[0], *tok.vocab().find("今"));
  EXPECT_EQ(ids[2], unk);
  EXPECT_EQ(ids[3], unk);
  EXPECT_EQ(tok.decode(ids), "今天<unk><unk>");
}

TEST(Tokenizer, UnknownCharacterWithoutUnkIsAnErrorNamingCharAndPlace) {
  const Tokenizer tok(Vocab::load(kRefVocab));
  const std::string msg = error_of([&] { tok.encode("今天下雨", "data.tsv:12"); });
  EXPECT_HAS(msg, "data.tsv:12");
  EXPECT_HAS(msg, "character 3");
  EXPECT_HAS(msg, "'下'");
  EXPECT_HAS(msg, "U+4E0B");
}

TEST(Tokenizer, InvalidUtf8InTextIsAnError) {
  const Tokenizer tok(Vocab::load(kRefVocab));
  const std::string msg = error_of([&] { tok.encode("今\xED\xA0\x80", "x.tsv:2"); });
  EXPECT_HAS(msg, "x.tsv:2");
  EXPECT_HAS(msg, "surrogate");
}

TEST(Tokenizer, DecodeRejectsOutOfRangeIds) {
  const Tokenizer tok(Vocab::load(kRefVocab));
  EXPECT_HAS(error_of([&] { tok.decode(std::vector<int32_t>{3, 10}); }), "id 10");
  EXPECT_HAS(error_of([&] { tok.decode(std::vector<int32_t>{-1}); }), "id -1");
  EXPECT_THROW(tok.token_bytes(10), Error);
}

TEST(Utf8StreamBuffer, WholeCharacterTokensPassStraightThrough) {
  Utf8StreamBuffer s;
  s.feed("学习");
  EXPECT_EQ(s.take_complete(), "学习");
  s.feed("！");
  EXPECT_EQ(s.take_complete(), "！");
  EXPECT_EQ(s.finish(), "");
}

TEST(Utf8StreamBuffer, HoldsBackSplitCharactersUntilComplete) {
  // 今 = E4 BB 8A, 😀 = F0 9F 98 80: tokens cut inside both.
  const std::vector<std::string> tokens = {"a\xE4", "\xBB", "\x8A\xF0\x9F", "\x98", "\x80z"};
  const std::vector<std::string> shown = {"a", "", "今", "", "😀z"};
  Utf8StreamBuffer s;
  std::string all;
  for (size_t i = 0; i < tokens.size(); ++i) {
    s.feed(tokens[i]);
    const std::string out = s.take_complete();
    EXPECT_EQ(out, shown[i]) << "after token " << i;
    EXPECT_EQ(utf8_find_invalid(out), std::string::npos);
    all += out;
  }
  all += s.finish();
  EXPECT_EQ(all, "a今😀z");
}

TEST(Utf8StreamBuffer, EveryByteSplitOfATextReassemblesExactly) {
  const std::string text = "x今天\xF0\x9F\x98\x80好é";
  for (size_t step = 1; step <= 5; ++step) {
    Utf8StreamBuffer s;
    std::string all;
    for (size_t i = 0; i < text.size(); i += step) {
      s.feed(std::string_view(text).substr(i, step));
      const std::string out = s.take_complete();
      EXPECT_EQ(utf8_find_invalid(out), std::string::npos) << "step " << step;
      all += out;
    }
    EXPECT_EQ(s.pending_bytes(), 0u);
    all += s.finish();
    EXPECT_EQ(all, text);
  }
}

TEST(Utf8StreamBuffer, FinishFlushesAnIncompleteTailAndInvalidBytesPassThrough) {
  Utf8StreamBuffer s;
  s.feed("ok\xE4\xBB");
  EXPECT_EQ(s.take_complete(), "ok");
  EXPECT_EQ(s.finish(), "\xE4\xBB");
  s.feed("\x80\x80\xFF");  // can never complete: not held back
  EXPECT_EQ(s.take_complete(), "\x80\x80\xFF");
}

}  // namespace
}  // namespace seqtape

namespace seqtape {
namespace {

// Issue 11: with a very long token in the vocabulary, longest match used to build and hash
// every candidate substring up to that length at every position (cubic in the line length:
// a 100k-character line ran past 60 s). The trie walk stops at the first byte no token
// continues with, so this line of 5000 'a' against a 5000-character token ending in 'b' costs
// about 5000^2 / 2 trie steps.
TEST(Tokenizer, LongTokenKeepsEncodingLinearInLengthTimesLongestToken) {
  std::vector<std::string> tokens = {"<pad>", "<bos>", "<eos>", "<unk>", "a", "aa"};
  tokens.push_back(std::string(4999, 'a') + "b");
  const Tokenizer tok(Vocab::from_tokens(tokens, "test"));
  EXPECT_EQ(tok.max_token_chars(), 5000u);
  const std::vector<int32_t> ids = tok.encode(std::string(5001, 'a'));
  ASSERT_EQ(ids.size(), 2501u);  // 2500 x "aa", then "a"
  EXPECT_EQ(ids.front(), 5);
  EXPECT_EQ(ids.back(), 4);
  // ... and the long token still wins where it matches.
  const std::vector<int32_t> one = tok.encode(std::string(4999, 'a') + "ba");
  ASSERT_EQ(one.size(), 2u);
  EXPECT_EQ(one[0], 6);
  EXPECT_EQ(one[1], 4);
}

// ---- tokenizers per side (text/text_codec.h) -------------------------------------------------

// A grapheme-to-phoneme vocabulary: the letters of the sources, the phonemes of the targets. The
// phoneme "ae" is also two letters, so a character side must not read "ae" as one token.
Vocab g2p_vocab() {
  return build_sided_vocab("chars", {"cat", "maet"}, "words", {"k ae t", "m ae t"});
}

TEST(WordCodec, SplitsAtBlanksAndJoinsWithOneSpace) {
  const Vocab v = g2p_vocab();
  EXPECT_EQ(v.tokens(), (std::vector<std::string>{"<pad>", "<bos>", "<eos>", "<unk>", "<sep>", "a",
                                                  "ae", "c", "e", "k", "m", "t"}));
  const WordCodec w(v);
  const std::vector<int32_t> ids = w.encode("  k\tae   t ", "t");
  EXPECT_EQ(ids, (std::vector<int32_t>{*v.find("k"), *v.find("ae"), *v.find("t")}));
  EXPECT_EQ(w.decode(ids, false), "k ae t");
  EXPECT_EQ(w.encode(w.decode(ids, false), "t"), ids);  // round trip
  EXPECT_TRUE(w.encode(" \t ", "t").empty());
  // An unknown word, or one that spells a special name, is <unk>; decode names it.
  EXPECT_EQ(w.encode("k zh <eos>", "t"),
            (std::vector<int32_t>{*v.find("k"), *v.unk_id(), *v.unk_id()}));
  // Streaming: token_text over the ids, <bos>/<eos> silent, gives decode's text.
  const std::vector<int32_t> out = {v.bos_id(), ids[0], ids[1], ids[2], v.eos_id()};
  std::string streamed;
  bool first = true;
  for (int32_t id : out) {
    streamed += w.token_text(id, first);
    if (!is_control_token(v, id)) first = false;
  }
  EXPECT_EQ(streamed, w.decode(out, false));
  EXPECT_EQ(streamed, "k ae t");
  EXPECT_EQ(w.max_token_chars(), 3u);  // "ae" and a space
}

TEST(WordCodec, AnUnknownWordWithoutUnkIsAnErrorNamingIt) {
  const WordCodec w(Vocab::from_tokens({"<pad>", "<bos>", "<eos>", "k", "ae"}));
  EXPECT_ERROR_HAS(w.encode("k ae zh", "data.tsv:7 (target)"),
                   "data.tsv:7 (target): word 3 'zh' is not in the vocabulary");
  EXPECT_ERROR_HAS(w.encode("k \xFF", "data.tsv:8"), "data.tsv:8: invalid UTF-8");
}

TEST(SidedCodec, EachSideReadsItsOwnWayOverOneVocabulary) {
  const Vocab v = g2p_vocab();
  const auto codec = codec_from_parts("chars/words", v, "", "test");
  EXPECT_EQ(codec->kind(), "chars/words");
  // The source: characters only, never the phoneme "ae".
  EXPECT_EQ(codec->encode("maet", "s"),
            (std::vector<int32_t>{*v.find("m"), *v.find("a"), *v.find("e"), *v.find("t")}));
  EXPECT_EQ(codec->max_token_chars(), 1u);
  // The target, and the output: words.
  const std::vector<int32_t> tgt = codec->encode_target("m ae t", "t");
  EXPECT_EQ(tgt, (std::vector<int32_t>{*v.find("m"), *v.find("ae"), *v.find("t")}));
  EXPECT_EQ(codec->decode(tgt, false), "m ae t");
  EXPECT_EQ(codec->token_text(*v.find("ae"), false), " ae");
  // Training examples: the source as characters, the target as words.
  const Example e = encode_example(*codec, {"maet", "m ae t", 1}, "data.tsv:1");
  EXPECT_EQ(e.enc.size(), 5u);  // four letters and <eos>
  EXPECT_EQ(e.labels,
            (std::vector<int32_t>{*v.find("m"), *v.find("ae"), *v.find("t"), v.eos_id()}));
  // The other way round, and one kind for both sides.
  EXPECT_EQ(codec_from_parts("words/chars", v, "", "test")->encode_target("ae", "t"),
            (std::vector<int32_t>{*v.find("a"), *v.find("e")}));
  EXPECT_EQ(codec_from_parts("words", v, "", "test")->encode("ae", "s"),
            (std::vector<int32_t>{*v.find("ae")}));
  EXPECT_EQ(sided_kind("chars", "words"), "chars/words");
  EXPECT_EQ(sided_kind("words", "words"), "words");
  EXPECT_ERROR_HAS(sided_kind("chars", "spm"), "'spm' cannot be chosen for one side");
  EXPECT_ERROR_HAS(codec_from_parts("chars/phones", v, "", "ck.bin"),
                   "ck.bin: unknown tokenizer 'phones'");
  EXPECT_ERROR_HAS(codec_from_parts("words", v, "xyz", "ck.bin"),
                   "has no model, but 3 model bytes");
}

}  // namespace
}  // namespace seqtape
