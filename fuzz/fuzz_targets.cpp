#include "fuzz/fuzz_targets.h"

#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <nlohmann/json.hpp>

#include "infer/quant_io.h"
#include "io/checkpoint.h"
#include "io/envelope.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "text/subword.h"
#include "text/tokenizer.h"
#include "train/dataset.h"

namespace seqtape::fuzz {

namespace {

[[noreturn]] void violated(const std::string& what) {
  throw InvariantViolation("fuzz invariant violated: " + what);
}

// An anonymous in-memory file with a path, for the readers and writers that take a path:
// no disk traffic per input, nothing left behind.
class MemFile {
 public:
  MemFile() {
    fd_ = ::memfd_create("seqtape-fuzz", MFD_CLOEXEC);
    if (fd_ < 0) throw std::runtime_error("memfd_create failed");
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemFile() { ::close(fd_); }
  MemFile(const MemFile&) = delete;
  MemFile& operator=(const MemFile&) = delete;

  const std::string& path() const { return path_; }
  void set(std::string_view bytes) const {
    if (::ftruncate(fd_, 0) != 0) throw std::runtime_error("ftruncate failed");
    size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t w =
          ::pwrite(fd_, bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
      if (w <= 0) throw std::runtime_error("pwrite failed");
      done += static_cast<size_t>(w);
    }
  }
  std::string get() const {
    struct stat st {};
    if (::fstat(fd_, &st) != 0) throw std::runtime_error("fstat failed");
    std::string out(static_cast<size_t>(st.st_size), '\0');
    size_t done = 0;
    while (done < out.size()) {
      const ssize_t r =
          ::pread(fd_, out.data() + done, out.size() - done, static_cast<off_t>(done));
      if (r <= 0) throw std::runtime_error("pread failed");
      done += static_cast<size_t>(r);
    }
    return out;
  }

 private:
  int fd_ = -1;
  std::string path_;
};

const MemFile& mem_file() {
  static const MemFile f;
  return f;
}

bool same_stored(const std::vector<StoredTensor>& a, const std::vector<StoredTensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].name != b[i].name || a[i].dtype != b[i].dtype || a[i].shape != b[i].shape ||
        a[i].bytes != b[i].bytes)
      return false;
  return true;
}

bool same_tensors(const std::vector<NamedTensor>& a, const std::vector<NamedTensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    const Tensor &x = a[i].value, &y = b[i].value;
    if (a[i].name != b[i].name || x.dtype() != y.dtype() || x.shape() != y.shape()) return false;
    if (x.nbytes() && std::memcmp(x.raw(), y.raw(), x.nbytes()) != 0) return false;
  }
  return true;
}

}  // namespace

void reseal_envelope(uint8_t* data, size_t size) {
  if (size < kEnvelopeHeaderSize) return;
  const uint64_t payload = size - kEnvelopeHeaderSize;
  const uint64_t sum = XXH3_64bits(data + kEnvelopeHeaderSize, payload);
  for (int i = 0; i < 8; ++i) {
    data[16 + i] = static_cast<uint8_t>(payload >> (8 * i));
    data[24 + i] = static_cast<uint8_t>(sum >> (8 * i));
  }
}

void checkpoint_input(std::string_view bytes) {
  Checkpoint c;
  try {
    c = load_checkpoint_from_memory(bytes, "fuzz.ckpt");
  } catch (const Error&) {
    return;
  }
  // The format has one encoding per checkpoint, so an accepted file re-encodes to itself.
  std::string again;
  try {
    again = checkpoint_to_bytes(c);
  } catch (const Error& e) {
    violated(std::string("an accepted checkpoint cannot be written back: ") + e.what());
  }
  // A version-1 file (no tokenizer fields) is written back as the current version: then the
  // re-encoding must load to the same checkpoint and re-encode to itself.
  uint32_t version = 0;
  parse_envelope(bytes, "fuzz.ckpt", EnvelopeKind::Checkpoint, kCheckpointVersion, &version);
  if (version != kCheckpointVersion) {
    if (c.tokenizer_kind != "chars" || !c.tokenizer_model.empty())
      violated("a version-1 checkpoint did not load as a character vocabulary");
    if (checkpoint_to_bytes(load_checkpoint_from_memory(again, "fuzz.ckpt")) != again)
      violated("an upgraded version-1 checkpoint does not re-encode to itself");
    return;
  }
  if (again != bytes) violated("checkpoint re-encodes to different bytes");
  // What a resumed run does next with the loaded strings.
  try {
    Tokenizer tok(Vocab::from_tokens(c.vocab, "fuzz.ckpt"));
    (void)tok;
  } catch (const Error&) {
  }
  try {
    (void)ModelConfig::from_json(nlohmann::json::parse(c.config_json));
  } catch (const Error&) {
  } catch (const nlohmann::json::exception&) {  // the parser's; the trainer reports them
  }
}

void safetensors_input(std::string_view bytes) {
  SafetensorsFile f;
  try {
    f = read_safetensors_from_memory(bytes, "fuzz.safetensors");
  } catch (const Error&) {
    return;
  }
  std::string again;
  try {
    again = safetensors_to_bytes(f.tensors, f.metadata, f.stored);
  } catch (const Error& e) {
    violated(std::string("accepted safetensors cannot be written back: ") + e.what());
  }
  SafetensorsFile g;
  try {
    g = read_safetensors_from_memory(again, "fuzz.safetensors (rewritten)");
  } catch (const Error& e) {
    violated(std::string("rewritten safetensors do not read back: ") + e.what());
  }
  if (!same_tensors(f.tensors, g.tensors) || !same_stored(f.stored, g.stored) ||
      f.metadata != g.metadata)
    violated("safetensors change in a write/read round trip");
  try {
    (void)read_quantized(std::move(f), "fuzz.safetensors");
  } catch (const Error&) {
  }
}

void vocab_input(std::string_view bytes) {
  const size_t split = bytes.find('\0');
  const std::string_view file = bytes.substr(0, split);
  const std::string_view text = split == std::string_view::npos ? bytes : bytes.substr(split + 1);
  const MemFile& mem = mem_file();
  mem.set(file);
  Vocab vocab;
  try {
    vocab = Vocab::load(mem.path());
  } catch (const Error&) {
    return;
  }
  // save() writes what load() reads.
  try {
    vocab.save(mem.path());
    if (Vocab::load(mem.path()).tokens() != vocab.tokens())
      violated("vocabulary changes in a save/load round trip");
  } catch (const Error& e) {
    violated(std::string("a saved vocabulary does not load: ") + e.what());
  }
  const Tokenizer tok(vocab);
  std::vector<int32_t> ids;
  try {
    ids = tok.encode(text, "fuzz text");
  } catch (const Error&) {
    return;  // invalid UTF-8, or a character the vocabulary cannot spell and no <unk>
  }
  for (int32_t id : ids)
    if (id < 0 || id >= vocab.size()) violated("encode returned an id outside the vocabulary");
  const auto unk = vocab.unk_id();
  if (unk && std::find(ids.begin(), ids.end(), *unk) != ids.end()) return;
  std::string back;
  try {
    back = tok.decode(ids);
  } catch (const Error& e) {
    violated(std::string("decode refuses what encode produced: ") + e.what());
  }
  if (back != text) violated("decode(encode(text)) != text");
}

void subword_input(std::string_view bytes) {
  std::unique_ptr<SubwordTokenizer> tok;
  try {
    tok = std::make_unique<SubwordTokenizer>(
        SubwordTokenizer::from_model_bytes(std::string(bytes), "fuzz.model"));
  } catch (const Error&) {
    return;
  }
  try {
    const SubwordTokenizer again =
        SubwordTokenizer::from_model_bytes(tok->model_bytes(), "fuzz.model (again)");
    if (again.vocab().tokens() != tok->vocab().tokens())
      violated("a SentencePiece model changes when rebuilt from its own bytes");
  } catch (const Error& e) {
    violated(std::string("a SentencePiece model does not rebuild from its own bytes: ") + e.what());
  }
  // The model's normalizer may rewrite text, so decode(encode(t)) == t is not required here;
  // ids inside the vocabulary and an error-free decode are.
  std::vector<std::string> texts = {"Hallo Welt", "今天天气很好", " a  b\tc ", "<sep><unk>", ""};
  std::string pieces;
  for (int32_t id = 0; id < std::min<int32_t>(tok->size(), 40); ++id)
    pieces += tok->token_text(id, id == 0);
  texts.push_back(pieces);
  for (const std::string& text : texts) {
    std::vector<int32_t> ids;
    try {
      ids = tok->encode(text, "fuzz text");
    } catch (const Error&) {
      continue;  // e.g. a text longer than the model's pieces allow
    }
    for (int32_t id : ids)
      if (id < 0 || id >= tok->size()) violated("encode returned an id outside the vocabulary");
    try {
      tok->decode(ids);
      tok->decode(ids, true);
      for (size_t i = 0; i < ids.size(); ++i) tok->token_text(ids[i], i == 0);
    } catch (const Error& e) {
      violated(std::string("decode refuses what encode produced: ") + e.what());
    }
  }
}

void tsv_input(std::string_view bytes) {
  std::vector<TextPair> pairs;
  try {
    pairs = parse_tsv(bytes, "fuzz.tsv");
  } catch (const Error&) {
    return;
  }
  // A file that parses must be trainable: every later step is an invariant, not a rejection.
  try {
    const Vocab vocab = build_vocab(pairs);
    const Tokenizer tok(vocab);
    const auto ex = encode_examples(tok, pairs, "fuzz.tsv");
    const auto lm = encode_lm_examples(tok, pairs, "fuzz.tsv");
    for (const Batch& b : batches_in_order(ex, 3, vocab.pad_id()))
      if (b.src.size() != static_cast<size_t>(b.B * b.S)) violated("batch src size");
    for (const Batch& b : lm_batches_in_order(lm, 3, vocab.pad_id()))
      if (b.tokens.size() != static_cast<size_t>(b.B * b.T)) violated("batch tokens size");
    const MemFile& mem = mem_file();
    write_tsv(mem.path(), pairs);
    const auto again = parse_tsv(mem.get(), "fuzz.tsv (rewritten)");
    if (again.size() != pairs.size()) violated("write_tsv/parse_tsv changes the pair count");
    for (size_t i = 0; i < pairs.size(); ++i)
      if (again[i].source != pairs[i].source || again[i].target != pairs[i].target)
        violated("write_tsv/parse_tsv changes pair " + std::to_string(i + 1));
  } catch (const Error& e) {
    violated(std::string("a TSV that parses fails later: ") + e.what());
  }
}

void config_input(std::string_view bytes) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(bytes);
  } catch (const nlohmann::json::exception&) {  // parse_error, or out_of_range for 1e999
    return;
  }
  ModelConfig c;
  try {
    c = ModelConfig::from_json(j);
  } catch (const Error&) {
    return;
  }
  const std::string dumped = c.to_json().dump();
  try {
    const ModelConfig back = ModelConfig::from_json(nlohmann::json::parse(dumped));
    if (back.to_json().dump() != dumped) violated("config changes in a to_json/from_json trip");
  } catch (const Error& e) {
    violated(std::string("to_json output does not load: ") + e.what());
  }
}

}  // namespace seqtape::fuzz
