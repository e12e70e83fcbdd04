// Checkpoint and envelope: round trips, and every kind of damage (truncation, bit flips,
// crafted sizes behind a valid checksum, a disk that fills mid-save) must end in a
// seqtape::Error, never a crash or a huge allocation.

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>

#include "io/checkpoint.h"
#include "io/envelope.h"
#include "tensor/rng.h"
#include "tests/test_util.h"

namespace seqtape {
namespace {

namespace fs = std::filesystem;

using test_util::error_of;
using test_util::read_bytes;
using test_util::TempDir;
using test_util::write_bytes;

Checkpoint make_checkpoint(int64_t step = 42) {
  Checkpoint c;
  c.config_json = R"({"d_model":4,"layers":1})";
  c.vocab = {"<pad>", "<s>", "</s>", "a", "", "ü"};
  c.params.push_back(
      {"enc.w", Tensor::from(std::vector<float>{1, -2, 3.5f, 0, -0.0f, 1e-30f}, {2, 3})});
  c.params.push_back({"enc.b", Tensor::from(std::vector<double>{0.1, -0.2, 1e300}, {3})});
  c.params.push_back({"scale", Tensor::from(std::vector<float>{2.5f}, {})});  // 0-d scalar
  c.params.push_back({"empty", Tensor::zeros({0, 4}, DType::F32)});
  c.params.push_back(
      {"odd", Tensor::from(std::vector<double>{std::numeric_limits<double>::infinity(),
                                               -std::numeric_limits<double>::quiet_NaN()},
                           {1, 1, 2, 1})});
  c.optimizer_name = "adam";
  c.optimizer_state.push_back({"m.enc.w", Tensor::full({2, 3}, 0.25, DType::F32)});
  c.optimizer_state.push_back({"v.enc.b", Tensor::full({3}, 1e-8, DType::F64)});
  c.step = step;
  c.rng_state = std::string("rng\0state\xff", 10);
  c.loader_state_json = R"({"epoch":1,"offset":17})";
  c.metrics_json = R"({"loss":[2.5,2.1]})";
  c.tokenizer_kind = "sentencepiece";
  c.tokenizer_model = std::string("model\0bytes", 11);
  return c;
}

void expect_tensors_equal(const std::vector<NamedTensor>& a, const std::vector<NamedTensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].name, b[i].name);
    EXPECT_EQ(a[i].value.dtype(), b[i].value.dtype()) << a[i].name;
    EXPECT_EQ(a[i].value.shape(), b[i].value.shape()) << a[i].name;
    ASSERT_EQ(a[i].value.nbytes(), b[i].value.nbytes()) << a[i].name;
    // Bitwise, so that -0.0 and NaN payloads count too.
    EXPECT_EQ(0, std::memcmp(a[i].value.raw(), b[i].value.raw(), a[i].value.nbytes())) << a[i].name;
  }
}

void expect_equal(const Checkpoint& a, const Checkpoint& b) {
  EXPECT_EQ(a.config_json, b.config_json);
  EXPECT_EQ(a.vocab, b.vocab);
  expect_tensors_equal(a.params, b.params);
  EXPECT_EQ(a.optimizer_name, b.optimizer_name);
  expect_tensors_equal(a.optimizer_state, b.optimizer_state);
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.rng_state, b.rng_state);
  EXPECT_EQ(a.loader_state_json, b.loader_state_json);
  EXPECT_EQ(a.metrics_json, b.metrics_json);
  EXPECT_EQ(a.tokenizer_kind, b.tokenizer_kind);
  EXPECT_EQ(a.tokenizer_model, b.tokenizer_model);
}

// Little-endian builders for crafting payloads field by field.
void put_u64(std::string& s, uint64_t v) {
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_str(std::string& s, std::string_view v) {
  put_u64(s, v.size());
  s += v;
}
// A full envelope around `payload` with a valid checksum, so only the payload checks can
// catch what is wrong with it.
std::string wrap(std::string_view payload, uint32_t version = kCheckpointVersion,
                 EnvelopeKind kind = EnvelopeKind::Checkpoint) {
  return make_envelope_header(kind, version, payload) + std::string(payload);
}
// Payload prefix up to and including the params count.
std::string payload_head(uint64_t nparams) {
  std::string p(1, '\x01');
  put_str(p, "{}");
  put_u64(p, 0);  // vocab
  put_u64(p, nparams);
  return p;
}
// Everything after the params list, for an empty optimizer state.
std::string payload_tail(int64_t step = 0) {
  std::string p;
  put_str(p, "sgd");
  put_u64(p, 0);
  put_u64(p, static_cast<uint64_t>(step));
  put_str(p, "");
  put_str(p, "");
  put_str(p, "");
  put_str(p, "chars");  // tokenizer_kind (version 2)
  put_str(p, "");       // tokenizer_model
  return p;
}
std::string tensor_record(std::string_view name, uint8_t dtype, const std::vector<int64_t>& dims,
                          size_t data_bytes) {
  std::string p;
  put_str(p, name);
  p.push_back(static_cast<char>(dtype));
  put_u64(p, dims.size());
  for (int64_t d : dims) put_u64(p, static_cast<uint64_t>(d));
  p.append(data_bytes, '\0');
  return p;
}

TEST(Checkpoint, RoundTripThroughFile) {
  TempDir dir;
  const Checkpoint c = make_checkpoint();
  save_checkpoint(dir.file("ckpt.bin"), c);
  expect_equal(c, load_checkpoint(dir.file("ckpt.bin")));
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"ckpt.bin"});
  EXPECT_EQ(read_bytes(dir.file("ckpt.bin")), checkpoint_to_bytes(c));
}

TEST(Checkpoint, RoundTripInMemoryAndEmpty) {
  const Checkpoint c = make_checkpoint();
  expect_equal(c, load_checkpoint_from_memory(checkpoint_to_bytes(c), "mem"));
  const Checkpoint empty;
  expect_equal(empty, load_checkpoint_from_memory(checkpoint_to_bytes(empty), "mem"));
}

TEST(Checkpoint, OverwritesPreviousFile) {
  TempDir dir;
  save_checkpoint(dir.file("c"), make_checkpoint(1));
  save_checkpoint(dir.file("c"), make_checkpoint(2));
  EXPECT_EQ(load_checkpoint(dir.file("c")).step, 2);
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"c"});
}

TEST(Checkpoint, HeaderLayout) {
  const std::string bytes = checkpoint_to_bytes(Checkpoint{});
  ASSERT_GE(bytes.size(), kEnvelopeHeaderSize);
  EXPECT_EQ(bytes.substr(0, 8), std::string("SEQTAPE\0", 8));
  EXPECT_EQ(bytes.substr(8, 4), std::string("\x02\0\0\0", 4));   // version 2
  EXPECT_EQ(bytes.substr(12, 4), std::string("\x01\0\0\0", 4));  // kind checkpoint
  std::string len;
  put_u64(len, bytes.size() - kEnvelopeHeaderSize);
  EXPECT_EQ(bytes.substr(16, 8), len);
  EXPECT_EQ(bytes[32], '\x01');  // cereal's little-endian flag
  uint32_t version = 0;
  EXPECT_EQ(parse_envelope(bytes, "mem", EnvelopeKind::Checkpoint, 2, &version).size(),
            bytes.size() - kEnvelopeHeaderSize);
  EXPECT_EQ(version, 2u);
}

TEST(Checkpoint, EveryTruncationThrows) {
  const std::string bytes = checkpoint_to_bytes(make_checkpoint());
  for (size_t len = 0; len < bytes.size(); ++len)
    EXPECT_THROW(load_checkpoint_from_memory(std::string_view(bytes).substr(0, len), "mem"), Error)
        << "length " << len;
}

TEST(Checkpoint, EveryTruncatedFileThrowsNamingThePath) {
  TempDir dir;
  const std::string bytes = checkpoint_to_bytes(make_checkpoint());
  const std::string path = dir.file("cut.bin");
  for (size_t len = 0; len < bytes.size(); len += 7) {
    write_bytes(path, std::string_view(bytes).substr(0, len));
    EXPECT_ERROR_HAS(load_checkpoint(path), path);
  }
}

TEST(Checkpoint, ThousandRandomBitFlipsAllThrow) {
  const std::string bytes = checkpoint_to_bytes(make_checkpoint());
  Rng rng(20240611);
  auto bit = [&](Rng& r) { return static_cast<size_t>(r.below(bytes.size() * 8)); };
  for (int i = 0; i < 1000; ++i) {
    std::string damaged = bytes;
    const size_t b = bit(rng);
    damaged[b / 8] = static_cast<char>(damaged[b / 8] ^ (1 << (b % 8)));
    EXPECT_THROW(load_checkpoint_from_memory(damaged, "mem"), Error) << "bit " << b;
  }
}

TEST(Checkpoint, BitFlipsInFilesThrowNamingThePath) {
  TempDir dir;
  const std::string bytes = checkpoint_to_bytes(make_checkpoint());
  const std::string path = dir.file("flip.bin");
  Rng rng(7);
  auto bit = [&](Rng& r) { return static_cast<size_t>(r.below(bytes.size() * 8)); };
  for (int i = 0; i < 50; ++i) {
    std::string damaged = bytes;
    const size_t b = bit(rng);
    damaged[b / 8] = static_cast<char>(damaged[b / 8] ^ (1 << (b % 8)));
    write_bytes(path, damaged);
    EXPECT_ERROR_HAS(load_checkpoint(path), path);
  }
}

TEST(Checkpoint, WrongMagic) {
  std::string bytes = checkpoint_to_bytes(make_checkpoint());
  bytes[0] = 'X';
  EXPECT_ERROR_HAS(load_checkpoint_from_memory(bytes, "run/ckpt.bin"),
                   "run/ckpt.bin: not a seqtape checkpoint");
  EXPECT_ERROR_HAS(load_checkpoint_from_memory("hello", "x"), "not a seqtape checkpoint");
  EXPECT_ERROR_HAS(load_checkpoint_from_memory("", "x"), "file is empty");
  EXPECT_ERROR_HAS(load_checkpoint_from_memory(bytes.substr(0, 0) + "SEQT", "x"), "truncated");
}

TEST(Checkpoint, FutureVersionMessage) {
  const std::string payload = checkpoint_to_bytes(Checkpoint{}).substr(kEnvelopeHeaderSize);
  EXPECT_ERROR_HAS(load_checkpoint_from_memory(wrap(payload, 7), "new.bin"),
                   "new.bin: written by a newer seqtape (version 7, this build reads up to 2)");
  EXPECT_ERROR_HAS(load_checkpoint_from_memory(wrap(payload, 1).replace(8, 1, 1, '\0'), "z.bin"),
                   "invalid format version 0");
}

// A version-1 file (no tokenizer fields) still loads, as a character vocabulary.
TEST(Checkpoint, VersionOneLoadsAsCharacters) {
  std::string tail_v1 = payload_tail(3);
  tail_v1.resize(tail_v1.size() - (8 + 5) - 8);  // drop tokenizer_kind "chars" and the model
  const Checkpoint c = load_checkpoint_from_memory(wrap(payload_head(0) + tail_v1, 1), "old.bin");
  EXPECT_EQ(c.step, 3);
  EXPECT_EQ(c.tokenizer_kind, "chars");
  EXPECT_EQ(c.tokenizer_model, "");
  // The same payload as version 2 lacks the tokenizer fields: an error, not a guess.
  EXPECT_ERROR_HAS(load_checkpoint_from_memory(wrap(payload_head(0) + tail_v1, 2), "new.bin"),
                   "new.bin: corrupted: payload ends inside tokenizer_kind");
}

TEST(Checkpoint, WrongKind) {
  const std::string payload = checkpoint_to_bytes(Checkpoint{}).substr(kEnvelopeHeaderSize);
  EXPECT_ERROR_HAS(
      load_checkpoint_from_memory(wrap(payload, 1, static_cast<EnvelopeKind>(9)), "k.bin"),
      "k.bin: is a seqtape kind 9 file, not a checkpoint");
}

TEST(Checkpoint, ChecksumMismatchMessage) {
  std::string bytes = checkpoint_to_bytes(make_checkpoint());
  bytes[bytes.size() / 2] ^= 0x10;
  EXPECT_ERROR_HAS(load_checkpoint_from_memory(bytes, "run/ckpt.bin"),
                   "run/ckpt.bin: corrupted: checksum mismatch");
}

TEST(Checkpoint, TruncatedAndTrailingMessages) {
  const std::string bytes = checkpoint_to_bytes(make_checkpoint());
  const std::string payload_len = std::to_string(bytes.size() - kEnvelopeHeaderSize);
  EXPECT_ERROR_HAS(load_checkpoint_from_memory(bytes.substr(0, bytes.size() - 10), "c"),
                   "c: truncated: header says " + payload_len + " payload bytes, file has " +
                       std::to_string(bytes.size() - kEnvelopeHeaderSize - 10));
  EXPECT_ERROR_HAS(load_checkpoint_from_memory(bytes + "junk", "c"),
                   "c: trailing bytes: header says " + payload_len);
  EXPECT_ERROR_HAS(load_checkpoint_from_memory(bytes.substr(0, 20), "c"),
                   "fewer than the 32-byte header");
}

TEST(Checkpoint, MissingFileAndDirectory) {
  TempDir dir;
  EXPECT_ERROR_HAS(load_checkpoint(dir.file("nope.bin")), dir.file("nope.bin") + ": cannot open");
  fs::create_directory(dir.file("sub"));
  EXPECT_ERROR_HAS(load_checkpoint(dir.file("sub")), "not a regular file");
}

// Sizes inside a payload whose checksum is valid (a crafted file) are still bounded.
TEST(Checkpoint, CraftedPayloadsAreRejected) {
  auto load = [](const std::string& payload) {
    return load_checkpoint_from_memory(wrap(payload), "evil.bin");
  };
  // Sanity: the builders make a loadable checkpoint.
  {
    std::string p = payload_head(1) + tensor_record("w", 0, {2, 2}, 16) + payload_tail(5);
    const Checkpoint c = load(p);
    EXPECT_EQ(c.step, 5);
    ASSERT_EQ(c.params.size(), 1u);
    EXPECT_EQ(c.params[0].value.shape(), (Shape{2, 2}));
  }
  {
    std::string p(1, '\x01');
    put_u64(p, uint64_t{1} << 60);  // config_json length
    EXPECT_ERROR_HAS(load(p), "evil.bin: corrupted: payload ends inside config_json");
  }
  {
    std::string p(1, '\x01');
    put_str(p, "{}");
    put_u64(p, ~uint64_t{0});  // vocab count
    EXPECT_ERROR_HAS(load(p), "vocab count 18446744073709551615 cannot fit");
  }
  EXPECT_ERROR_HAS(load(payload_head(uint64_t{1} << 40) + payload_tail()),
                   "parameter count 1099511627776 cannot fit");
  EXPECT_ERROR_HAS(load(payload_head(1) + tensor_record("w", 0, {1, 1, 1, 1, 1, 1, 1, 1, 1}, 4) +
                        payload_tail()),
                   "parameter 0 (\"w\") has rank 9, more than 8");
  EXPECT_ERROR_HAS(
      load(payload_head(1) + tensor_record("w", 0, {int64_t{1} << 40, int64_t{1} << 40}, 0) +
           payload_tail()),
      "parameter 0 (\"w\") of shape [1099511627776,1099511627776] needs more than");
  EXPECT_ERROR_HAS(
      load(payload_head(1) + tensor_record("w", 1, {INT64_MAX, INT64_MAX, 2}, 0) + payload_tail()),
      "needs more than");
  EXPECT_ERROR_HAS(load(payload_head(1) + tensor_record("w", 0, {3, -1}, 0) + payload_tail()),
                   "has negative dimension -1");
  EXPECT_ERROR_HAS(load(payload_head(1) + tensor_record("w", 5, {1}, 4) + payload_tail()),
                   "unknown dtype tag 5");
  EXPECT_ERROR_HAS(load(payload_head(1) + tensor_record("w", 0, {4}, 8) + payload_tail()),
                   "corrupted");
  EXPECT_ERROR_HAS(load(payload_head(2) + tensor_record("w", 0, {1}, 4) +
                        tensor_record("w", 0, {1}, 4) + payload_tail()),
                   "duplicate parameter name \"w\"");
  EXPECT_ERROR_HAS(load(payload_head(0) + payload_tail(-3)), "step -3 is negative");
  EXPECT_ERROR_HAS(load(payload_head(0) + payload_tail() + "x"),
                   "1 unexpected bytes after the last field");
  std::string big_endian = payload_head(0) + payload_tail();
  big_endian[0] = 0;
  EXPECT_ERROR_HAS(load(big_endian), "little-endian flag");
  EXPECT_ERROR_HAS(load(""), "little-endian flag");
}

// Every prefix of a crafted-but-valid payload, re-wrapped with a correct checksum, exercises
// the inner bounds at every field boundary.
TEST(Checkpoint, EveryTruncatedPayloadWithValidChecksumThrows) {
  const std::string payload = checkpoint_to_bytes(make_checkpoint()).substr(kEnvelopeHeaderSize);
  for (size_t len = 0; len < payload.size(); ++len)
    EXPECT_THROW(load_checkpoint_from_memory(wrap(payload.substr(0, len)), "mem"), Error)
        << "length " << len;
}

// Random damage behind a valid checksum may even decode (e.g. a flipped tensor value), but it
// must never escape as anything other than a seqtape::Error.
TEST(Checkpoint, RandomPayloadDamageWithValidChecksumNeverCrashes) {
  const std::string payload = checkpoint_to_bytes(make_checkpoint()).substr(kEnvelopeHeaderSize);
  Rng rng(99);
  auto pos = [&](Rng& r) { return static_cast<size_t>(r.below(payload.size())); };
  auto byte = [](Rng& r) { return static_cast<int>(r.below(256)); };
  int rejected = 0;
  for (int i = 0; i < 2000; ++i) {
    std::string damaged = payload;
    for (int k = 0; k < 1 + i % 4; ++k) damaged[pos(rng)] = static_cast<char>(byte(rng));
    try {
      load_checkpoint_from_memory(wrap(damaged), "mem");
    } catch (const Error&) {
      ++rejected;
    }
  }
  EXPECT_GT(rejected, 0);
}

TEST(Checkpoint, SaveRejectsBadInput) {
  TempDir dir;
  Checkpoint c = make_checkpoint();
  c.params.push_back({"enc.w", Tensor::zeros({1}, DType::F32)});
  EXPECT_ERROR_HAS(save_checkpoint(dir.file("c"), c), "duplicate parameter name \"enc.w\"");
  c = make_checkpoint();
  c.optimizer_state.push_back({"undef", Tensor()});
  EXPECT_ERROR_HAS(save_checkpoint(dir.file("c"), c), "\"undef\" is an undefined tensor");
  c = make_checkpoint();
  c.params.push_back({"deep", Tensor::zeros(Shape(9, 1), DType::F32)});
  EXPECT_ERROR_HAS(save_checkpoint(dir.file("c"), c), "has rank 9");
  EXPECT_TRUE(dir.entries().empty());
  EXPECT_ERROR_HAS(save_checkpoint(dir.file("no/such/dir/c"), make_checkpoint()),
                   dir.file("no/such/dir/c") + ": cannot save");
}

// Clears the write fault however the test exits.
struct FaultGuard {
  explicit FaultGuard(size_t after) { set_write_fault_for_testing(after); }
  ~FaultGuard() { clear_write_fault_for_testing(); }
};

TEST(Checkpoint, DiskFullDuringSaveKeepsPreviousCheckpoint) {
  TempDir dir;
  const std::string path = dir.file("ckpt.bin");
  const Checkpoint old_ckpt = make_checkpoint(100);
  save_checkpoint(path, old_ckpt);
  const Checkpoint new_ckpt = make_checkpoint(200);
  const size_t size = checkpoint_to_bytes(new_ckpt).size();
  // Fail before any byte, inside the header, inside the payload, one byte short, and at the
  // final fsync (the whole file fit).
  for (size_t after :
       {size_t{0}, size_t{5}, kEnvelopeHeaderSize, size_t{100}, size - 1, size, size * 10}) {
    {
      FaultGuard fault(after);
      EXPECT_ERROR_HAS(save_checkpoint(path, new_ckpt), path + ": cannot save");
      EXPECT_ERROR_HAS(save_checkpoint(path, new_ckpt), "No space left on device");
    }
    expect_equal(old_ckpt, load_checkpoint(path));
    EXPECT_EQ(dir.entries(), std::vector<std::string>{"ckpt.bin"}) << "fault after " << after;
  }
  save_checkpoint(path, new_ckpt);
  expect_equal(new_ckpt, load_checkpoint(path));
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"ckpt.bin"});
}

TEST(Envelope, ReadReportsVersionAndRejectsNewer) {
  TempDir dir;
  const std::string path = dir.file("e.bin");
  write_envelope_atomic(path, EnvelopeKind::Checkpoint, 3, "payload");
  uint32_t version = 0;
  EXPECT_EQ(read_envelope(path, EnvelopeKind::Checkpoint, 3, &version), "payload");
  EXPECT_EQ(version, 3u);
  EXPECT_ERROR_HAS(read_envelope(path, EnvelopeKind::Checkpoint, 2, &version),
                   path + ": written by a newer seqtape (version 3, this build reads up to 2)");
  write_envelope_atomic(path, EnvelopeKind::Checkpoint, 1, "");
  EXPECT_EQ(read_envelope(path, EnvelopeKind::Checkpoint, 1, nullptr), "");
}

// check_can_save fails where write_file_atomic would (a missing directory, a directory in the
// way), with its message, and leaves nothing behind where it would succeed.
TEST(Envelope, CheckCanSaveFailsWhereTheSaveWouldAndLeavesNothing) {
  TempDir dir;
  const std::string missing = dir.file("no_such_dir/out.txt");
  EXPECT_ERROR_HAS(check_can_save(missing), missing + ": cannot save: cannot create");
  EXPECT_ERROR_HAS(write_file_atomic(missing, {"x"}), missing + ": cannot save: cannot create");
  EXPECT_ERROR_HAS(check_can_save(dir.path().string()), "cannot save: is a directory");
  const std::string ok = dir.file("out.txt");
  check_can_save(ok);
  EXPECT_TRUE(dir.entries().empty()) << "the probe file is removed";
  write_file_atomic(ok, {"x"});
  check_can_save(ok);  // an existing file: write_file_atomic replaces it
  EXPECT_EQ(dir.entries(), std::vector<std::string>{"out.txt"});
}

}  // namespace
}  // namespace seqtape
