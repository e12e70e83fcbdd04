// safetensors: round trip, an exact byte layout checked by hand, and malformed files that
// must each be refused with a message naming the problem.

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "io/envelope.h"
#include "io/safetensors.h"
#include "tests/test_util.h"

namespace seqtape {
namespace {

namespace fs = std::filesystem;

using test_util::error_of;
using test_util::read_bytes;
using test_util::TempDir;

std::string u64le(uint64_t v) {
  std::string s;
  for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  return s;
}

// A file with the given header text and data section.
std::string craft(const std::string& json, size_t data_bytes) {
  return u64le(json.size()) + json + std::string(data_bytes, '\0');
}

void expect_same(const std::vector<NamedTensor>& a, const std::vector<NamedTensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].name, b[i].name);
    EXPECT_EQ(a[i].value.dtype(), b[i].value.dtype());
    EXPECT_EQ(a[i].value.shape(), b[i].value.shape());
    ASSERT_EQ(a[i].value.nbytes(), b[i].value.nbytes());
    EXPECT_EQ(0, std::memcmp(a[i].value.raw(), b[i].value.raw(), a[i].value.nbytes()));
  }
}

std::vector<NamedTensor> sample() {
  return {{"enc.w", Tensor::from(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3})},
          {"enc.b", Tensor::from(std::vector<double>{-1.5, 2.25}, {2})},
          {"a.scalar", Tensor::from(std::vector<float>{7}, {})},
          {"empty", Tensor::zeros({3, 0}, DType::F64)},
          {"cube", Tensor::full({2, 1, 2}, 0.5, DType::F64)}};
}

TEST(Safetensors, RoundTripThroughFile) {
  TempDir dir;
  const auto ts = sample();
  const std::map<std::string, std::string> meta{{"format", "pt"}, {"step", "12"}};
  write_safetensors(dir.file("w.safetensors"), ts, meta);
  const SafetensorsFile f = read_safetensors(dir.file("w.safetensors"));
  expect_same(ts, f.tensors);  // data order == given order
  EXPECT_EQ(f.metadata, meta);
  EXPECT_EQ(dir.entries().size(), 1u);
  const std::string bytes = read_bytes(dir.file("w.safetensors"));
  EXPECT_EQ(bytes, safetensors_to_bytes(ts, meta));
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), 8);
  EXPECT_EQ((8 + n) % 8, 0u);  // data section aligned
  expect_same(ts, read_safetensors_from_memory(bytes, "mem").tensors);
}

TEST(Safetensors, EmptyFile) {
  const SafetensorsFile f = read_safetensors_from_memory(safetensors_to_bytes({}), "mem");
  EXPECT_TRUE(f.tensors.empty());
  EXPECT_TRUE(f.metadata.empty());
  EXPECT_EQ(safetensors_to_bytes({}), u64le(8) + "{}      ");
}

TEST(Safetensors, GoldenByteLayout) {
  const std::vector<NamedTensor> ts{{"w", Tensor::from(std::vector<float>{1.0f, -2.0f}, {2})}};
  // 54 bytes of JSON, padded with 2 spaces to 56 = 0x38.
  const std::string expected = std::string("\x38\0\0\0\0\0\0\0", 8) +
                               R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})" + "  " +
                               std::string("\x00\x00\x80\x3f\x00\x00\x00\xc0", 8);
  EXPECT_EQ(safetensors_to_bytes(ts), expected);

  // With metadata: 85 bytes of JSON + 3 spaces = 88 = 0x58.
  const std::string with_meta =
      std::string("\x58\0\0\0\0\0\0\0", 8) +
      R"({"__metadata__":{"format":"pt"},"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})" +
      "   " + std::string("\x00\x00\x80\x3f\x00\x00\x00\xc0", 8);
  EXPECT_EQ(safetensors_to_bytes(ts, {{"format", "pt"}}), with_meta);

  const SafetensorsFile f = read_safetensors_from_memory(with_meta, "golden");
  ASSERT_EQ(f.tensors.size(), 1u);
  EXPECT_EQ(f.tensors[0].value.to_floats(), (std::vector<float>{1.0f, -2.0f}));
  EXPECT_EQ(f.metadata.at("format"), "pt");
}

TEST(Safetensors, ReadsHeaderInAnyOrderAndReturnsOffsetOrder) {
  // A scalar F64 at [8,16] listed first, an F32 pair at [0,8] second; no padding, as other
  // writers may produce.
  const std::string json = R"({"b":{"dtype":"F64","shape":[],"data_offsets":[8,16]},)"
                           R"("a":{"shape":[2],"data_offsets":[0,8],"dtype":"F32","extra":1}})";
  const SafetensorsFile f = read_safetensors_from_memory(craft(json, 16), "m");
  ASSERT_EQ(f.tensors.size(), 2u);
  EXPECT_EQ(f.tensors[0].name, "a");
  EXPECT_EQ(f.tensors[1].name, "b");
  EXPECT_EQ(f.tensors[1].value.shape(), Shape{});
}

TEST(Safetensors, EveryTruncationThrows) {
  const std::string bytes = safetensors_to_bytes(sample(), {{"k", "v"}});
  for (size_t len = 0; len < bytes.size(); ++len)
    EXPECT_THROW(read_safetensors_from_memory(std::string_view(bytes).substr(0, len), "m"), Error)
        << "length " << len;
}

// I8 and BF16 tensors (a quantized export's matrices) are kept as their bytes, beside the F32
// and F64 ones, and written back to the same file.
TEST(Safetensors, Int8AndBf16RoundTripAsBytes) {
  const std::vector<StoredTensor> stored = {
      {"q", StoredDType::I8, {2, 3}, {1, 0xff, 0x7f, 0x81, 0, 2}},
      {"h", StoredDType::BF16, {2}, {0x80, 0x3f, 0x00, 0xc0}}};  // 1.0, -2.0
  const std::string bytes = safetensors_to_bytes(sample(), {{"compute_type", "int8"}}, stored);
  const SafetensorsFile f = read_safetensors_from_memory(bytes, "mem");
  expect_same(sample(), f.tensors);
  ASSERT_EQ(f.stored.size(), 2u);
  for (size_t i = 0; i < stored.size(); ++i) {
    EXPECT_EQ(f.stored[i].name, stored[i].name);
    EXPECT_EQ(f.stored[i].dtype, stored[i].dtype);
    EXPECT_EQ(f.stored[i].shape, stored[i].shape);
    EXPECT_EQ(f.stored[i].bytes, stored[i].bytes);
  }
  EXPECT_NE(bytes.find(R"("q":{"dtype":"I8","shape":[2,3])"), std::string::npos);
  EXPECT_NE(bytes.find(R"("h":{"dtype":"BF16","shape":[2])"), std::string::npos);
  EXPECT_EQ(safetensors_to_bytes(f.tensors, f.metadata, f.stored), bytes);
  EXPECT_ERROR_HAS(safetensors_to_bytes({}, {}, {{"q", StoredDType::BF16, {2}, {1, 2, 3}}}),
                   "tensor \"q\" has 3 bytes, not those of BF16 [2]");
}

TEST(Safetensors, BadFilesNameTheProblem) {
  auto read = [](const std::string& bytes) {
    return read_safetensors_from_memory(bytes, "bad.st");
  };
  const std::string ok = R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  EXPECT_NO_THROW(read(craft(ok, 8)));

  EXPECT_ERROR_HAS(read("abc"), "bad.st: truncated");
  EXPECT_ERROR_HAS(read(u64le(uint64_t{1} << 62) + "{}"), "is over the limit");
  EXPECT_ERROR_HAS(read(u64le(1000) + "{}"), "bad.st: header length 1000 exceeds the 2 bytes");
  EXPECT_ERROR_HAS(read(craft("{\"w\":", 0)), "header is not valid JSON");
  EXPECT_ERROR_HAS(read(craft("[1,2]", 0)), "header is not a JSON object");
  EXPECT_ERROR_HAS(read(craft(std::string(10000, '[') + std::string(10000, ']'), 0)),
                   "nested deeper");
  EXPECT_ERROR_HAS(read(craft(R"({"w":{"dtype":"F32","shape":[2]}})", 8)),
                   "tensor \"w\": header entry has no \"data_offsets\"");
  EXPECT_ERROR_HAS(read(craft(R"({"w":{"dtype":"Q7","shape":[2],"data_offsets":[0,8]}})", 8)),
                   "tensor \"w\": unknown dtype \"Q7\"");
  EXPECT_ERROR_HAS(
      read(craft(R"({"w":{"dtype":"F16","shape":[4],"data_offsets":[0,8]}})", 8)),
      "tensor \"w\": dtype F16 is not supported (seqtape reads F32, F64, I8 and BF16)");
  EXPECT_ERROR_HAS(read(craft(R"({"w":{"dtype":"BF16","shape":[3],"data_offsets":[0,8]}})", 8)),
                   "tensor \"w\": span mismatch: BF16 [3] needs 6 bytes");
  EXPECT_ERROR_HAS(read(craft(R"({"w":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8)),
                   "tensor \"w\": shape [-2] has a negative dimension");
  EXPECT_ERROR_HAS(read(craft(R"({"w":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8)),
                   "tensor \"w\": span mismatch: F32 [3] needs 12 bytes");
  EXPECT_ERROR_HAS(read(craft(R"({"w":{"dtype":"F64","shape":[4294967296,4294967296,16],)"
                              R"("data_offsets":[0,8]}})",
                              8)),
                   "tensor \"w\": span mismatch");
  EXPECT_ERROR_HAS(read(craft(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                              R"("v":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
                              12)),
                   "tensor \"v\": data_offsets [4,12] overlap tensor \"w\"");
  EXPECT_ERROR_HAS(read(craft(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                              R"("v":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})",
                              16)),
                   "tensor \"v\": gap of 4 bytes");
  EXPECT_ERROR_HAS(read(craft(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 12)),
                   "tensor \"w\": gap of 4 bytes between the start of the data section");
  EXPECT_ERROR_HAS(read(craft(ok, 12)), "4 trailing bytes");
  EXPECT_ERROR_HAS(read(craft(ok, 4)), "tensor \"w\": data_offsets [0,8] run past the 4-byte");
  EXPECT_ERROR_HAS(read(craft(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8)),
                   "end before they begin");
  EXPECT_ERROR_HAS(read(craft(R"({"w":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8)),
                   "data_offsets is not an array [begin, end]");
  EXPECT_ERROR_HAS(read(craft(R"({"w":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", 8)),
                   "shape dimension is not a non-negative integer");
  EXPECT_ERROR_HAS(read(craft(R"({"__metadata__":{"k":1}})", 0)),
                   "__metadata__ value of \"k\" is not a string");
  EXPECT_ERROR_HAS(read(craft(R"({"w":[1]})", 0)),
                   "tensor \"w\": header entry is not a JSON object");
}

TEST(Safetensors, MissingFileNamesThePath) {
  TempDir dir;
  EXPECT_ERROR_HAS(read_safetensors(dir.file("none.safetensors")),
                   dir.file("none.safetensors") + ": cannot open");
}

TEST(Safetensors, WriteRejectsBadInput) {
  TempDir dir;
  const std::string path = dir.file("x.safetensors");
  auto ts = sample();
  ts.push_back({"enc.w", Tensor::zeros({1}, DType::F32)});
  EXPECT_ERROR_HAS(write_safetensors(path, ts), path + ": cannot save safetensors: duplicate");
  EXPECT_ERROR_HAS(write_safetensors(path, {{"__metadata__", Tensor::zeros({1}, DType::F32)}}),
                   "reserved");
  EXPECT_ERROR_HAS(write_safetensors(path, {{"u", Tensor()}}), "\"u\" is undefined");
  EXPECT_EQ(dir.entries().size(), 0u);
}

TEST(Safetensors, DiskFullKeepsPreviousFile) {
  TempDir dir;
  const std::string path = dir.file("w.safetensors");
  const auto old_ts = sample();
  write_safetensors(path, old_ts);
  const std::vector<NamedTensor> new_ts{{"x", Tensor::full({64}, 3.0, DType::F32)}};
  set_write_fault_for_testing(40);
  EXPECT_ERROR_HAS(write_safetensors(path, new_ts), "No space left on device");
  clear_write_fault_for_testing();
  expect_same(old_ts, read_safetensors(path).tensors);
  EXPECT_EQ(dir.entries().size(), 1u);
}

}  // namespace
}  // namespace seqtape
