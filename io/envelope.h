#pragma once
// The envelope every seqtape file is wrapped in, and the file I/O behind it: a bounded reader
// and an atomic writer, shared with safetensors.h.
//
// Deserializers (cereal above all) trust the sizes they read and allocate before reading, so
// no byte of a file reaches them before the envelope has proved that the file is complete and
// unchanged: right magic, a version this build understands, the promised length, and a
// matching checksum.
//
// Byte layout, all integers little-endian, 32-byte header then payload:
//
//   offset size  field
//        0    8  magic "SEQTAPE\0" (53 45 51 54 41 50 45 00)
//        8    4  u32 format version of the payload (1, 2, ...; 0 is never written)
//       12    4  u32 kind: 1 = checkpoint
//       16    8  u64 payload length P in bytes
//       24    8  u64 XXH3-64 (seed 0) of the payload bytes
//       32    P  payload
//
// The file is exactly 32 + P bytes long: shorter is "truncated", longer is "trailing bytes".
// Reading allocates only the payload, after the length has been checked against the file size.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace seqtape {

enum class EnvelopeKind : uint32_t { Checkpoint = 1 };

inline constexpr size_t kEnvelopeHeaderSize = 32;

// "checkpoint" for Checkpoint, "kind N" for a number this build does not know.
std::string envelope_kind_name(uint32_t kind);

// Reads and validates the envelope at `path` and returns its payload. Throws Error naming the
// path if the file is missing, not a seqtape file of `expected_kind`, written by a newer
// format version than `max_supported_version`, truncated, followed by trailing bytes, or
// corrupted (checksum mismatch). Never allocates more than the file's size.
std::string read_envelope(const std::string& path, EnvelopeKind expected_kind,
                          uint32_t max_supported_version, uint32_t* version_out);

// The same checks on a whole file held in memory; `name` stands for the path in messages.
// Returns a view into `bytes` (no copy).
std::string_view parse_envelope(std::string_view bytes, const std::string& name,
                                EnvelopeKind expected_kind, uint32_t max_supported_version,
                                uint32_t* version_out);

// The 32 header bytes for `payload`; header + payload is a complete envelope file.
std::string make_envelope_header(EnvelopeKind kind, uint32_t version, std::string_view payload);

// Writes header + payload to `path` with write_file_atomic.
void write_envelope_atomic(const std::string& path, EnvelopeKind kind, uint32_t version,
                           std::string_view payload);

// Writes the concatenation of `parts` to `path` so that a reader sees either the old file or
// the complete new one, never a mix: the bytes go to "<path>.tmp.<pid>.<n>" in the same
// directory, are fsync'ed, renamed over `path`, and the directory is fsync'ed. On any error
// (short write, ENOSPC, failed fsync/rename) the temp file is removed, the previous file at
// `path` is left untouched, and an Error naming the path and strerror is thrown. A symbolic
// link is followed (the file it names is replaced, the link stays); a character device or FIFO
// is written into as it is (renaming over it would replace the node); a block device or socket
// is refused.
void write_file_atomic(const std::string& path, const std::vector<std::string_view>& parts);

// Throws the Error write_file_atomic(path, ...) would throw at its start (a missing or
// unwritable directory, or `path` a directory) by creating and removing its temp file: a
// command checks its output before long work rather than after it.
void check_can_save(const std::string& path);

// A file opened for reading whose size is taken from the open descriptor (so it describes the
// very file being read). Errors name the path.
class ReadOnlyFile {
 public:
  explicit ReadOnlyFile(const std::string& path);  // throws if missing or not a regular file
  ~ReadOnlyFile();
  ReadOnlyFile(const ReadOnlyFile&) = delete;
  ReadOnlyFile& operator=(const ReadOnlyFile&) = delete;

  uint64_t size() const { return size_; }
  // Reads exactly n bytes at offset; throws "truncated" if the file has shrunk meanwhile.
  void read_at(uint64_t offset, char* dst, size_t n) const;

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

// Reads the whole file a user named as `what` ("TSV file", "vocabulary file", ...), refusing
// with an Error naming the path: a missing file, a symlink loop, a directory, anything that is
// not a regular file (a FIFO, /dev/zero: opened with O_NONBLOCK and checked before any read, so
// nothing blocks), and a file larger than `max_bytes` (checked before allocating).
std::string read_user_file(const std::string& path, const std::string& what, uint64_t max_bytes);

// Size limits of the text files a user hands to seqtape.
inline constexpr uint64_t kMaxTsvBytes = uint64_t{1} << 30;     // 1 GiB
inline constexpr uint64_t kMaxVocabBytes = uint64_t{64} << 20;  // 64 MiB
inline constexpr uint64_t kMaxConfigBytes = uint64_t{1} << 20;  // 1 MiB

// Test hook simulating a full disk: every later write_file_atomic fails with ENOSPC once it
// has written `fail_after_bytes` bytes of its temp file (a value >= the file size makes the
// final fsync fail instead, as a delayed ENOSPC does). Stays armed until cleared.
void set_write_fault_for_testing(size_t fail_after_bytes);
void clear_write_fault_for_testing();

}  // namespace seqtape
