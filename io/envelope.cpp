#include "io/envelope.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "tensor/tensor.h"

namespace seqtape {

namespace {

constexpr char kMagic[8] = {'S', 'E', 'Q', 'T', 'A', 'P', 'E', '\0'};
const std::string_view kMagicView(kMagic, sizeof kMagic);

uint64_t get_le(const char* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | static_cast<unsigned char>(p[i]);
  return v;
}

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

std::string hex(uint64_t v) {
  char buf[19];
  std::snprintf(buf, sizeof buf, "0x%016llx", static_cast<unsigned long long>(v));
  return buf;
}

struct Header {
  uint32_t version = 0;
  uint64_t payload_size = 0;
  uint64_t checksum = 0;
};

// Validates everything that can be checked without the payload. `head` holds the first
// min(file_size, 32) bytes of the file.
Header check_header(std::string_view head, uint64_t file_size, const std::string& name,
                    EnvelopeKind expected_kind, uint32_t max_supported_version) {
  const std::string expected = envelope_kind_name(static_cast<uint32_t>(expected_kind));
  if (file_size == 0) fail(name, "not a seqtape " + expected + ": the file is empty");
  const size_t magic_len = std::min<size_t>(head.size(), kMagicView.size());
  if (head.substr(0, magic_len) != kMagicView.substr(0, magic_len))
    fail(name, "not a seqtape " + expected + " (wrong magic bytes)");
  if (file_size < kEnvelopeHeaderSize)
    fail(name, "truncated: the file has " + std::to_string(file_size) + " bytes, fewer than the " +
                   std::to_string(kEnvelopeHeaderSize) + "-byte header");
  Header h;
  h.version = static_cast<uint32_t>(get_le(head.data() + 8, 4));
  const auto kind = static_cast<uint32_t>(get_le(head.data() + 12, 4));
  h.payload_size = get_le(head.data() + 16, 8);
  h.checksum = get_le(head.data() + 24, 8);
  if (h.version == 0) fail(name, "corrupted: invalid format version 0");
  if (h.version > max_supported_version)
    fail(name, "written by a newer seqtape (version " + std::to_string(h.version) +
                   ", this build reads up to " + std::to_string(max_supported_version) + ")");
  if (kind != static_cast<uint32_t>(expected_kind))
    fail(name, "is a seqtape " + envelope_kind_name(kind) + " file, not a " + expected);
  const uint64_t actual = file_size - kEnvelopeHeaderSize;
  if (h.payload_size > actual)
    fail(name, "truncated: header says " + std::to_string(h.payload_size) +
                   " payload bytes, file has " + std::to_string(actual));
  if (h.payload_size < actual)
    fail(name, "trailing bytes: header says " + std::to_string(h.payload_size) +
                   " payload bytes, file has " + std::to_string(actual));
  return h;
}

void check_checksum(std::string_view payload, const Header& h, const std::string& name) {
  const uint64_t got = XXH3_64bits(payload.data(), payload.size());
  if (got != h.checksum)
    fail(name, "corrupted: checksum mismatch (header says " + hex(h.checksum) +
                   ", payload hashes to " + hex(got) + ")");
}

// Closes the descriptor on every exit path.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

std::atomic<bool> g_fault_armed{false};
std::atomic<size_t> g_fault_after{0};
std::atomic<uint64_t> g_temp_counter{0};

}  // namespace

std::string envelope_kind_name(uint32_t kind) {
  if (kind == static_cast<uint32_t>(EnvelopeKind::Checkpoint)) return "checkpoint";
  return "kind " + std::to_string(kind);
}

std::string_view parse_envelope(std::string_view bytes, const std::string& name,
                                EnvelopeKind expected_kind, uint32_t max_supported_version,
                                uint32_t* version_out) {
  const Header h = check_header(bytes.substr(0, kEnvelopeHeaderSize), bytes.size(), name,
                                expected_kind, max_supported_version);
  const std::string_view payload = bytes.substr(kEnvelopeHeaderSize);
  check_checksum(payload, h, name);
  if (version_out) *version_out = h.version;
  return payload;
}

std::string read_envelope(const std::string& path, EnvelopeKind expected_kind,
                          uint32_t max_supported_version, uint32_t* version_out) {
  const ReadOnlyFile file(path);
  char head[kEnvelopeHeaderSize];
  const size_t head_len = static_cast<size_t>(std::min<uint64_t>(file.size(), sizeof head));
  file.read_at(0, head, head_len);
  const Header h = check_header(std::string_view(head, head_len), file.size(), path, expected_kind,
                                max_supported_version);
  // payload_size == file size - 32 here, so this allocation is bounded by the file.
  std::string payload(static_cast<size_t>(h.payload_size), '\0');
  file.read_at(kEnvelopeHeaderSize, payload.data(), payload.size());
  check_checksum(payload, h, path);
  if (version_out) *version_out = h.version;
  return payload;
}

std::string read_user_file(const std::string& path, const std::string& what, uint64_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) fail(path, what + " does not exist (cannot open it)");
    if (err == ELOOP) fail(path, "cannot open the " + what + ": a symbolic link loop (ELOOP)");
    fail(path, "cannot open the " + what + ": " + std::strerror(err));
  }
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) fail(path, std::string("cannot stat: ") + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) fail(path, "is a directory, not a " + what);
  if (S_ISFIFO(st.st_mode)) fail(path, "is a FIFO (named pipe), not a regular " + what);
  if (!S_ISREG(st.st_mode)) fail(path, "is a device or socket, not a regular " + what);
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size > max_bytes)
    fail(path, "the " + what + " has " + std::to_string(size) + " bytes, more than the limit of " +
                   std::to_string(max_bytes));
  std::string text(static_cast<size_t>(size), '\0');
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t r = ::read(fd, text.data() + done, text.size() - done);
    if (r < 0) {
      if (errno == EINTR) continue;
      fail(path, std::string("read failed: ") + std::strerror(errno));
    }
    if (r == 0) break;  // shrank meanwhile: parse what is there
    done += static_cast<size_t>(r);
  }
  text.resize(done);
  return text;
}

ReadOnlyFile::ReadOnlyFile(const std::string& path) : path_(path) {
  // O_NONBLOCK: a FIFO at `path` must not hang the open; regular files ignore it.
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd_ < 0 && errno == ELOOP) fail(path, "cannot open: a symbolic link loop (ELOOP)");
  if (fd_ < 0) fail(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd_, &st) != 0) {
    const int err = errno;
    ::close(fd_);
    fail(path, std::string("cannot stat: ") + std::strerror(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd_);
    fail(path, "not a regular file");
  }
  size_ = static_cast<uint64_t>(st.st_size);
}

ReadOnlyFile::~ReadOnlyFile() {
  if (fd_ >= 0) ::close(fd_);
}

void ReadOnlyFile::read_at(uint64_t offset, char* dst, size_t n) const {
  size_t done = 0;
  while (done < n) {
    const ssize_t r = ::pread(fd_, dst + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0) {
      if (errno == EINTR) continue;
      fail(path_, std::string("read failed: ") + std::strerror(errno));
    }
    if (r == 0) fail(path_, "truncated: the file shrank while it was being read");
    done += static_cast<size_t>(r);
  }
}

std::string make_envelope_header(EnvelopeKind kind, uint32_t version, std::string_view payload) {
  if (version == 0) fail("make_envelope_header", "format version 0 is reserved");
  std::string out(kMagicView);
  put_le(out, version, 4);
  put_le(out, static_cast<uint32_t>(kind), 4);
  put_le(out, payload.size(), 8);
  put_le(out, XXH3_64bits(payload.data(), payload.size()), 8);
  return out;
}

void write_envelope_atomic(const std::string& path, EnvelopeKind kind, uint32_t version,
                           std::string_view payload) {
  const std::string header = make_envelope_header(kind, version, payload);
  write_file_atomic(path, {header, payload});
}

void set_write_fault_for_testing(size_t fail_after_bytes) {
  g_fault_after = fail_after_bytes;
  g_fault_armed = true;
}

void clear_write_fault_for_testing() {
  g_fault_armed = false;
}

namespace {

// Creates write_file_atomic's temp file for `path` and returns its descriptor; `tmp` is its name.
int create_temp(const std::string& path, std::string& tmp) {
  // pid + counter: unique per process and per call, so concurrent saves never share a temp.
  tmp = path + ".tmp." + std::to_string(::getpid()) + "." +
        std::to_string(g_temp_counter.fetch_add(1));
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) fail(path, "cannot save: cannot create " + tmp + ": " + std::strerror(errno));
  return fd;
}

// What already sits at `path` (after symbolic links), for a save: a character device or a FIFO
// is written into (renaming over it would replace the node itself: /dev/null as a regular file),
// a block device or socket is refused, anything else is replaced atomically.
enum class SaveTarget { kFile, kStream };

SaveTarget save_target(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return SaveTarget::kFile;  // new, or a dangling link
  if (S_ISDIR(st.st_mode)) fail(path, "cannot save: is a directory");
  if (S_ISCHR(st.st_mode) || S_ISFIFO(st.st_mode)) return SaveTarget::kStream;
  if (S_ISBLK(st.st_mode)) fail(path, "cannot save: is a block device, not a file");
  if (S_ISSOCK(st.st_mode)) fail(path, "cannot save: is a socket, not a file");
  return SaveTarget::kFile;
}

// Writes `parts` to the open descriptor; on failure returns the errno (0 when all was written).
int write_all(int fd, const std::vector<std::string_view>& parts) {
  for (std::string_view part : parts) {
    size_t done = 0;
    while (done < part.size()) {
      const ssize_t w = ::write(fd, part.data() + done, part.size() - done);
      if (w < 0 && errno == EINTR) continue;
      if (w < 0) return errno;
      if (w == 0) return EIO;
      done += static_cast<size_t>(w);
    }
  }
  return 0;
}

// A character device or FIFO: opened as it is (no create, no truncate) and written in order. A
// FIFO's open waits for its reader, as a shell's `> fifo` does.
void write_stream(const std::string& path, const std::vector<std::string_view>& parts) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0)
    fail(path, std::string("cannot save: cannot open for writing: ") + std::strerror(errno));
  const int err = write_all(fd, parts);
  const int closed = ::close(fd);
  if (err != 0) fail(path, std::string("cannot save: writing failed: ") + std::strerror(err));
  if (closed != 0) fail(path, std::string("cannot save: closing failed: ") + std::strerror(errno));
}

}  // namespace

void check_can_save(const std::string& path) {
  if (save_target(path) == SaveTarget::kStream) {
    // Opening a FIFO would wait for its reader; whether it may be written is all to check.
    if (::access(path.c_str(), W_OK) != 0)
      fail(path, std::string("cannot save: ") + std::strerror(errno));
    return;
  }
  std::string tmp;
  ::close(create_temp(path, tmp));
  ::unlink(tmp.c_str());
}

void write_file_atomic(const std::string& link_or_path,
                       const std::vector<std::string_view>& parts) {
  if (save_target(link_or_path) == SaveTarget::kStream) return write_stream(link_or_path, parts);
  // A symbolic link is followed: the file it names is replaced and the link stays a link (the
  // rename would otherwise put a regular file in the link's place).
  std::error_code ec;
  const std::filesystem::path real = std::filesystem::is_symlink(link_or_path, ec)
                                         ? std::filesystem::canonical(link_or_path, ec)
                                         : std::filesystem::path(link_or_path);
  const std::string path = ec ? link_or_path : real.string();
  const std::filesystem::path target(path);
  const std::string dir =
      target.parent_path().empty() ? std::string(".") : target.parent_path().string();
  const bool fault = g_fault_armed.load();
  const size_t fault_after = g_fault_after.load();

  std::string tmp;
  int fd = create_temp(path, tmp);

  // Undo everything and report; the file at `path` has not been touched yet.
  auto abort_write = [&](const std::string& what, int err) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    fail(path, "cannot save: " + what + " " + tmp + " failed: " + std::strerror(err) +
                   " (the previous file is unchanged)");
  };

  size_t written = 0;
  for (std::string_view part : parts) {
    size_t done = 0;
    while (done < part.size()) {
      size_t n = part.size() - done;
      if (fault) {
        if (written >= fault_after) abort_write("writing", ENOSPC);
        n = std::min(n, fault_after - written);
      }
      const ssize_t w = ::write(fd, part.data() + done, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        abort_write("writing", errno);
      }
      if (w == 0) abort_write("writing", EIO);
      done += static_cast<size_t>(w);
      written += static_cast<size_t>(w);
    }
  }
  if (fault) abort_write("syncing", ENOSPC);  // the whole file fit under the limit
  if (::fsync(fd) != 0) abort_write("syncing", errno);
  const int closed = ::close(fd);
  fd = -1;
  if (closed != 0) abort_write("closing", errno);
  if (::rename(tmp.c_str(), path.c_str()) != 0) abort_write("renaming", errno);

  // Makes the rename itself durable; without it a crash can bring back the old directory entry.
  Fd d(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (d.fd < 0)
    fail(path, "saved, but cannot open directory " + dir + " to sync it: " + std::strerror(errno));
  // Some file systems cannot sync a directory (EINVAL); the data itself is already synced.
  if (::fsync(d.fd) != 0 && errno != EINVAL)
    fail(path, "saved, but syncing directory " + dir + " failed: " + std::strerror(errno));
}

}  // namespace seqtape
