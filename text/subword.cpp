#include "text/subword.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <unordered_map>

#include "io/envelope.h"    // write_file_atomic
#include "tensor/tensor.h"  // fail

namespace seqtape {

namespace fs = std::filesystem;

SubwordType parse_subword_type(std::string_view name) {
  if (name == "unigram") return SubwordType::kUnigram;
  if (name == "bpe") return SubwordType::kBpe;
  if (name == "char") return SubwordType::kChar;
  fail("subword type", "'" + std::string(name) + "' is not one of unigram, bpe, char");
}

const char* subword_type_name(SubwordType t) {
  switch (t) {
    case SubwordType::kUnigram:
      return "unigram";
    case SubwordType::kBpe:
      return "bpe";
    case SubwordType::kChar:
      return "char";
  }
  return "unknown";
}

namespace {

// The sentences of a training run, handed to the library without a temporary file.
class VectorIterator : public sentencepiece::SentenceIterator {
 public:
  explicit VectorIterator(const std::vector<std::string>& v) : v_(v) {}
  bool done() const override { return i_ >= v_.size(); }
  void Next() override { ++i_; }
  const std::string& value() const override { return v_[i_]; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  const std::vector<std::string>& v_;
  size_t i_ = 0;
};

// Where seqtape's special tokens sit; from_model_bytes checks a model agrees.
struct SpecialId {
  std::string_view name;
  int32_t id;
};
constexpr SpecialId kSpecials[] = {
    {kPadToken, 0}, {kBosToken, 1}, {kEosToken, 2}, {kUnkToken, 3}, {kSepToken, 4}};

// U+2581 LOWER ONE EIGHTH BLOCK, SentencePiece's visible space.
constexpr std::string_view kSpaceMark = "\xE2\x96\x81";

std::string replace_space_marks(std::string_view piece) {
  std::string out;
  for (size_t i = 0; i < piece.size();) {
    if (piece.substr(i, kSpaceMark.size()) == kSpaceMark) {
      out += ' ';
      i += kSpaceMark.size();
    } else {
      out += piece[i++];
    }
  }
  return out;
}

// An Error unless id is in the vocabulary: sentencepiece's own accessors do not report it.
void check_id(const Vocab& vocab, int32_t id) {
  vocab.token(id);
}

}  // namespace

SubwordTokenizer::SubwordTokenizer()
    : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {}
SubwordTokenizer::SubwordTokenizer(SubwordTokenizer&&) noexcept = default;
SubwordTokenizer& SubwordTokenizer::operator=(SubwordTokenizer&&) noexcept = default;
SubwordTokenizer::~SubwordTokenizer() = default;  // here, where SentencePieceProcessor is complete

void check_subword_sentence(std::string_view text, const std::string& where) {
  if (text.size() > kMaxSubwordSentenceBytes)
    fail(where, "is " + std::to_string(text.size()) + " bytes long, more than the " +
                    std::to_string(kMaxSubwordSentenceBytes) +
                    " bytes a sentence may have to learn a vocabulary from (split or drop it)");
}

SubwordTokenizer SubwordTokenizer::train(const std::vector<std::string>& texts,
                                         const SubwordTrainOptions& opt, std::string_view where) {
  const std::string w(where);
  if (texts.empty()) fail(w, "no text to learn a vocabulary from");
  for (size_t i = 0; i < texts.size(); ++i)
    check_subword_sentence(texts[i], w + ": sentence " + std::to_string(i + 1));
  // 5 specials + at least a few pieces; the library refuses sizes it cannot reach anyway.
  if (opt.vocab_size < 8)
    fail(w, "vocabulary size " + std::to_string(opt.vocab_size) + " is below 8");
  const std::unordered_map<std::string, std::string> kwargs{
      {"model_type", subword_type_name(opt.type)},
      {"vocab_size", std::to_string(opt.vocab_size)},
      // A small corpus gives fewer pieces than asked for instead of failing.
      {"hard_vocab_limit", "false"},
      {"character_coverage", "1.0"},
      {"pad_id", "0"},
      {"bos_id", "1"},
      {"eos_id", "2"},
      {"unk_id", "3"},
      {"pad_piece", std::string(kPadToken)},
      {"bos_piece", std::string(kBosToken)},
      {"eos_piece", std::string(kEosToken)},
      {"unk_piece", std::string(kUnkToken)},
      {"control_symbols", std::string(kSepToken)},
      {"unk_surface", std::string(kUnkToken)},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"max_sentence_length", std::to_string(kMaxSubwordSentenceBytes)},
      {"num_threads", std::to_string(std::max(1, opt.threads))},
      {"minloglevel", "2"},  // no INFO or WARNING lines on stderr (errors come back as Status)
  };
  VectorIterator it(texts);
  std::string bytes;
  const auto st = sentencepiece::SentencePieceTrainer::Train(kwargs, &it, &bytes);
  if (!st.ok()) fail(w, "SentencePiece training failed: " + st.ToString());
  return from_model_bytes(std::move(bytes), w);
}

SubwordTokenizer SubwordTokenizer::from_model_bytes(std::string bytes, std::string_view where) {
  const std::string w(where);
  if (bytes.empty()) fail(w, "SentencePiece model is empty (0 bytes)");
  SubwordTokenizer t;
  sentencepiece::util::Status st;
  try {
    st = t.sp_->LoadFromSerializedProto(bytes);
  } catch (const std::exception& e) {
    // The library's trie builder throws on some malformed models (a zero-length piece:
    // "failed to insert key: zero-length key", found by fuzz_subword) instead of a Status.
    fail(w, "not a valid SentencePiece model (" + std::to_string(bytes.size()) +
                " bytes): " + e.what());
  }
  if (!st.ok())
    fail(w, "not a valid SentencePiece model (" + std::to_string(bytes.size()) +
                " bytes): " + st.ToString());
  const int n = t.sp_->GetPieceSize();
  for (const SpecialId& s : kSpecials) {
    if (s.id >= n || t.sp_->IdToPiece(s.id) != s.name)
      fail(w, "SentencePiece model lacks seqtape's special token " + std::string(s.name) +
                  " at id " + std::to_string(s.id) +
                  " (train the vocabulary with `seqtape vocab`)");
  }
  // Text must never produce <pad>/<bos>/<eos>/<sep>: they have to be control symbols.
  if (t.sp_->pad_id() != 0 || t.sp_->bos_id() != 1 || t.sp_->eos_id() != 2 ||
      t.sp_->unk_id() != 3 || !t.sp_->IsControl(4))
    fail(w,
         "SentencePiece model's pad/bos/eos/unk ids are not 0/1/2/3 or <sep> is not a control "
         "symbol (train it with `seqtape vocab`)");
  std::vector<std::string> pieces;
  pieces.reserve(n);
  for (int i = 0; i < n; ++i) {
    pieces.push_back(t.sp_->IdToPiece(i));
    if (t.sp_->IsControl(i) || t.sp_->IsUnknown(i)) continue;
    const std::string& p = pieces.back();  // characters: UTF-8 bytes that start one
    const auto chars = static_cast<size_t>(std::count_if(
        p.begin(), p.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
    t.max_piece_chars_ = std::max(t.max_piece_chars_, chars);
  }
  t.vocab_ = Vocab::from_tokens(std::move(pieces), w);
  t.model_bytes_ = std::move(bytes);
  return t;
}

SubwordTokenizer SubwordTokenizer::load(const std::string& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec)) fail(path, "is a directory, not a SentencePiece model file");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open the SentencePiece model file");
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  if (in.bad()) fail(path, "read error");
  return from_model_bytes(std::move(bytes), path);
}

std::vector<int32_t> SubwordTokenizer::encode(std::string_view text,
                                              std::string_view context) const {
  std::vector<int> ids;
  const auto st = sp_->Encode(text, &ids);
  if (!st.ok()) fail(std::string(context), "SentencePiece encoding failed: " + st.ToString());
  return std::vector<int32_t>(ids.begin(), ids.end());
}

std::string SubwordTokenizer::decode(std::span<const int32_t> ids, bool keep_specials) const {
  // The library decodes runs of ordinary pieces (and <unk>, whose surface is "<unk>"); control
  // tokens are written here by seqtape's rules. A run after ordinary text keeps its leading
  // space, which the library would drop as the dummy prefix of a text.
  std::string out;
  std::vector<int> run;
  bool wrote_text = false;  // an ordinary piece is in `out`
  const auto flush = [&] {
    if (run.empty()) return;
    std::string text;
    const auto st = sp_->Decode(run, &text);
    if (!st.ok()) fail("decode", "SentencePiece decoding failed: " + st.ToString());
    if (wrote_text && sp_->IdToPiece(run.front()).starts_with(kSpaceMark)) out += ' ';
    out += text;
    wrote_text = true;
    run.clear();
  };
  for (int32_t id : ids) {
    if (id < 0 || id >= size())
      fail("decode", "token id " + std::to_string(id) + " outside the vocabulary of " +
                         std::to_string(size()) + " pieces");
    const bool control = id == vocab_.pad_id() || id == vocab_.bos_id() || id == vocab_.eos_id() ||
                         vocab_.maybe_sep_id() == id;
    if (!control) {
      run.push_back(id);
      continue;
    }
    flush();
    if (keep_specials || vocab_.maybe_sep_id() == id) out += vocab_.token(id);
  }
  flush();
  return out;
}

std::string SubwordTokenizer::token_text(int32_t id, bool first) const {
  const std::string& piece = vocab_.token(id);  // Error when out of range
  if (id == vocab_.pad_id() || id == vocab_.bos_id() || id == vocab_.eos_id()) return {};
  if (vocab_.is_special(id)) return piece;  // <unk>, <sep> by name
  std::string text = replace_space_marks(piece);
  if (first && piece.starts_with(kSpaceMark)) text.erase(0, 1);
  return text;
}

float SubwordTokenizer::score(int32_t id) const {
  check_id(vocab_, id);
  return sp_->GetScore(id);
}

const char* SubwordTokenizer::piece_kind(int32_t id) const {
  check_id(vocab_, id);
  if (sp_->IsUnknown(id)) return "unknown";
  if (sp_->IsControl(id)) return "control";
  if (sp_->IsByte(id)) return "byte";
  if (sp_->IsUnused(id)) return "unused";
  return "normal";
}

std::string SubwordTokenizer::listing() const {
  std::string out = "id\tpiece\tscore\tkind\n";
  char buf[32];
  for (int32_t id = 0; id < size(); ++id) {
    std::snprintf(buf, sizeof buf, "%.6g", static_cast<double>(score(id)));
    out += std::to_string(id) + '\t' + vocab_.token(id) + '\t' + buf + '\t' + piece_kind(id) + '\n';
  }
  return out;
}

// ---- vocabulary directories ----------------------------------------------------------------

SubwordVocabs load_subword_dir(const std::string& dir) {
  std::error_code ec;
  if (!fs::exists(dir, ec)) fail(dir, "vocabulary directory does not exist");
  if (!fs::is_directory(dir, ec))
    fail(dir,
         "is not a directory (a subword vocabulary is a directory written by `seqtape vocab`)");
  const fs::path d(dir);
  const bool joint = fs::exists(d / kJointModelFile, ec);
  const bool src = fs::exists(d / kSourceModelFile, ec);
  const bool tgt = fs::exists(d / kTargetModelFile, ec);
  if (joint && (src || tgt))
    fail(dir, "holds both a joint " + std::string(kJointModelFile) +
                  " and separate models; keep one layout");
  SubwordVocabs v;
  if (joint) {
    v.source = std::make_shared<const SubwordTokenizer>(
        SubwordTokenizer::load((d / kJointModelFile).string()));
    v.target = v.source;
    return v;
  }
  if (!src && !tgt)
    fail(dir, "has no SentencePiece model: expected " + std::string(kJointModelFile) + ", or " +
                  std::string(kSourceModelFile) + " and " + std::string(kTargetModelFile) +
                  " (write them with `seqtape vocab`)");
  if (!src || !tgt)
    fail(dir, "has " + std::string(src ? kSourceModelFile : kTargetModelFile) + " but not " +
                  std::string(src ? kTargetModelFile : kSourceModelFile) +
                  " (separate vocabularies need both)");
  v.source = std::make_shared<const SubwordTokenizer>(
      SubwordTokenizer::load((d / kSourceModelFile).string()));
  v.target = std::make_shared<const SubwordTokenizer>(
      SubwordTokenizer::load((d / kTargetModelFile).string()));
  return v;
}

void prepare_subword_dir(const std::string& dir, bool overwrite) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec)) fail(dir, "exists and is not a directory");
  fs::create_directories(dir, ec);
  if (ec) fail(dir, "cannot create the directory: " + ec.message());
  if (overwrite) return;
  for (std::string_view name : {kJointModelFile, kSourceModelFile, kTargetModelFile})
    if (fs::exists(fs::path(dir) / name, ec))
      fail((fs::path(dir) / name).string(),
           "already exists (give --overwrite to replace the vocabulary)");
}

std::vector<std::string> write_subword_dir(const std::string& dir, const SubwordTokenizer& source,
                                           const SubwordTokenizer* target, bool overwrite) {
  prepare_subword_dir(dir, overwrite);
  std::error_code ec;
  const fs::path d(dir);
  std::vector<std::pair<std::string, const SubwordTokenizer*>> models;
  if (target) {
    models = {{"source", &source}, {"target", target}};
  } else {
    models = {{"spm", &source}};
  }
  if (overwrite) {
    // One layout per directory: a joint model next to separate ones would be ambiguous.
    for (std::string_view name : {kJointModelFile, kSourceModelFile, kTargetModelFile}) {
      fs::remove(d / name, ec);
      fs::remove(d / (std::string(name.substr(0, name.size() - 6)) + ".vocab.tsv"), ec);
    }
  }
  std::vector<std::string> written;
  for (const auto& [stem, tok] : models) {
    const std::string model = (d / (stem + ".model")).string();
    const std::string list = (d / (stem + ".vocab.tsv")).string();
    write_file_atomic(model, {tok->model_bytes()});
    const std::string text = tok->listing();
    write_file_atomic(list, {text});
    written.push_back(model);
    written.push_back(list);
  }
  return written;
}

}  // namespace seqtape
