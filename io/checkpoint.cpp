#include "io/checkpoint.h"

#include <cereal/archives/portable_binary.hpp>
#include <cmath>
#include <filesystem>
#include <istream>
#include <limits>
#include <new>
#include <nlohmann/json.hpp>
#include <ostream>
#include <set>
#include <streambuf>

#include "io/envelope.h"

namespace seqtape {

namespace {

// An input stream over bytes we already hold (no copy, unlike istringstream), which can tell
// how many bytes are left: the bound every size read from the payload is checked against.
class SpanBuf : public std::streambuf {
 public:
  explicit SpanBuf(std::string_view bytes) {
    // streambuf wants char*, but nothing here ever writes through the get area.
    char* b = const_cast<char*>(bytes.data());
    setg(b, b, b + bytes.size());
  }
  size_t remaining() const { return static_cast<size_t>(egptr() - gptr()); }
};

// An output stream appending to a std::string, so the payload is built in place.
class StringBuf : public std::streambuf {
 public:
  explicit StringBuf(std::string& out) : out_(out) {}

 protected:
  int_type overflow(int_type c) override {
    if (!traits_type::eq_int_type(c, traits_type::eof())) out_.push_back(static_cast<char>(c));
    return traits_type::not_eof(c);
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    out_.append(s, static_cast<size_t>(n));
    return n;
  }

 private:
  std::string& out_;
};

// ---- writing --------------------------------------------------------------------------

void check_names(const std::vector<NamedTensor>& ts, const char* what, const std::string& where) {
  std::set<std::string_view> seen;
  for (const auto& t : ts) {
    if (!t.value.defined())
      fail(where, std::string(what) + " \"" + t.name + "\" is an undefined tensor");
    if (t.value.ndim() > kMaxCheckpointTensorRank)
      fail(where, std::string(what) + " \"" + t.name + "\" has rank " +
                      std::to_string(t.value.ndim()) + ", more than " +
                      std::to_string(kMaxCheckpointTensorRank));
    if (!seen.insert(t.name).second)
      fail(where, std::string("duplicate ") + what + " name \"" + t.name + "\"");
  }
}

class PayloadWriter {
 public:
  explicit PayloadWriter(std::string& out)
      : buf_(out),
        os_(&buf_),
        ar_(os_, cereal::PortableBinaryOutputArchive::Options::LittleEndian()) {}

  void u64(uint64_t v) { ar_(v); }
  void str(std::string_view s) {
    ar_(static_cast<uint64_t>(s.size()));
    ar_(cereal::binary_data(s.data(), s.size()));
  }
  void tensors(const std::vector<NamedTensor>& ts) {
    u64(ts.size());
    for (const auto& nt : ts) {
      const Tensor& t = nt.value;
      str(nt.name);
      ar_(static_cast<uint8_t>(t.dtype()));
      u64(static_cast<uint64_t>(t.ndim()));
      for (int64_t d : t.shape()) ar_(d);
      // Typed binary_data, so a big-endian host would swap per element, not per byte.
      if (t.dtype() == DType::F32)
        ar_(cereal::binary_data(t.data<float>(), t.nbytes()));
      else
        ar_(cereal::binary_data(t.data<double>(), t.nbytes()));
    }
  }
  void i64(int64_t v) { ar_(v); }

 private:
  StringBuf buf_;
  std::ostream os_;
  cereal::PortableBinaryOutputArchive ar_;
};

size_t tensors_size(const std::vector<NamedTensor>& ts) {
  size_t n = 8;
  for (const auto& t : ts)
    n += 8 + t.name.size() + 1 + 8 + 8 * t.value.shape().size() + t.value.nbytes();
  return n;
}

// `where` names the destination in errors.
std::string encode_payload(const Checkpoint& c, const std::string& where) {
  check_names(c.params, "parameter", where);
  check_names(c.optimizer_state, "optimizer state", where);
  if (c.step < 0) fail(where, "step " + std::to_string(c.step) + " is negative");

  size_t size = 1 + 8 * 7 + c.config_json.size() + c.optimizer_name.size() + c.rng_state.size() +
                c.loader_state_json.size() + c.metrics_json.size() + 16 + c.tokenizer_kind.size() +
                c.tokenizer_model.size() + tensors_size(c.params) + tensors_size(c.optimizer_state);
  for (const auto& v : c.vocab) size += 8 + v.size();
  std::string out;
  out.reserve(size);
  {
    PayloadWriter w(out);  // writes cereal's endianness flag byte
    w.str(c.config_json);
    w.u64(c.vocab.size());
    for (const auto& v : c.vocab) w.str(v);
    w.tensors(c.params);
    w.str(c.optimizer_name);
    w.tensors(c.optimizer_state);
    w.i64(c.step);
    w.str(c.rng_state);
    w.str(c.loader_state_json);
    w.str(c.metrics_json);
    w.str(c.tokenizer_kind);
    w.str(c.tokenizer_model);
  }
  return out;
}

// ---- reading --------------------------------------------------------------------------

std::string_view check_endian_flag(std::string_view payload, const std::string& name) {
  // cereal reads this byte itself and would treat any non-1 value as "swap bytes".
  if (payload.empty() || payload[0] != 1)
    fail(name, "corrupted: payload does not start with cereal's little-endian flag");
  return payload;
}

// Reads the payload through cereal, checking every size against the remaining bytes before
// anything is allocated.
class PayloadReader {
 public:
  PayloadReader(std::string_view payload, const std::string& name)
      : name_(name), buf_(check_endian_flag(payload, name)), is_(&buf_), ar_(is_) {}

  size_t remaining() const { return buf_.remaining(); }

  uint64_t u64(const std::string& what) {
    need(8, what);
    uint64_t v = 0;
    ar_(v);
    return v;
  }
  int64_t i64(const std::string& what) {
    need(8, what);
    int64_t v = 0;
    ar_(v);
    return v;
  }
  uint8_t u8(const std::string& what) {
    need(1, what);
    uint8_t v = 0;
    ar_(v);
    return v;
  }
  std::string str(const std::string& what) {
    const uint64_t n = u64(what + " length");
    need(n, what);
    std::string s(static_cast<size_t>(n), '\0');
    ar_(cereal::binary_data(s.data(), s.size()));
    return s;
  }
  // A count of items that each take at least `min_item_bytes` bytes, bounded by what is left.
  uint64_t count(const std::string& what, size_t min_item_bytes) {
    const uint64_t n = u64(what + " count");
    if (n > remaining() / min_item_bytes)
      bad(what + " count " + std::to_string(n) + " cannot fit in the " +
          std::to_string(remaining()) + " bytes left");
    return n;
  }
  std::vector<NamedTensor> tensors(const std::string& what) {
    // Smallest tensor: name length + dtype + rank = 17 bytes.
    const uint64_t n = count(what, 17);
    std::vector<NamedTensor> out;
    out.reserve(static_cast<size_t>(n));
    std::set<std::string> seen;
    for (uint64_t i = 0; i < n; ++i) {
      const std::string label = what + " " + std::to_string(i);
      NamedTensor nt;
      nt.name = str(label + " name");
      const std::string named = label + " (\"" + nt.name + "\")";
      if (!seen.insert(nt.name).second) bad("duplicate " + what + " name \"" + nt.name + "\"");
      const uint8_t tag = u8(named + " dtype");
      if (tag > static_cast<uint8_t>(DType::F64))
        bad(named + " has unknown dtype tag " + std::to_string(tag));
      const auto dtype = static_cast<DType>(tag);
      const uint64_t rank = u64(named + " rank");
      if (rank > static_cast<uint64_t>(kMaxCheckpointTensorRank))
        bad(named + " has rank " + std::to_string(rank) + ", more than " +
            std::to_string(kMaxCheckpointTensorRank));
      Shape shape;
      for (uint64_t d = 0; d < rank; ++d) {
        const int64_t dim = i64(named + " shape");
        if (dim < 0) bad(named + " has negative dimension " + std::to_string(dim));
        shape.push_back(dim);
      }
      // numel x dtype size must fit in what is left; checked factor by factor so that the
      // product cannot overflow (a zero dimension makes the whole tensor empty).
      const uint64_t left = remaining();
      uint64_t bytes = dtype_size(dtype);
      bool empty = false;
      for (int64_t dim : shape) empty = empty || dim == 0;
      if (empty) bytes = 0;
      for (int64_t dim : shape) {
        if (empty) break;
        if (static_cast<uint64_t>(dim) > left / bytes)
          bad(named + " of shape " + shape_str(shape) + " needs more than the " +
              std::to_string(left) + " bytes left");
        bytes *= static_cast<uint64_t>(dim);
      }
      need(bytes, named + " data");
      nt.value = Tensor::empty(shape, dtype);
      if (dtype == DType::F32)
        ar_(cereal::binary_data(nt.value.data<float>(), nt.value.nbytes()));
      else
        ar_(cereal::binary_data(nt.value.data<double>(), nt.value.nbytes()));
      out.push_back(std::move(nt));
    }
    return out;
  }

  [[noreturn]] void bad(const std::string& what) { fail(name_, "corrupted: " + what); }

 private:
  void need(uint64_t n, const std::string& what) {
    if (n > remaining())
      bad("payload ends inside " + what + " (needs " + std::to_string(n) + " bytes, " +
          std::to_string(remaining()) + " left)");
  }

  const std::string& name_;
  SpanBuf buf_;
  std::istream is_;
  cereal::PortableBinaryInputArchive ar_;
};

Checkpoint decode_payload(std::string_view payload, const std::string& name, uint32_t version) {
  try {
    PayloadReader r(payload, name);
    Checkpoint c;
    c.config_json = r.str("config_json");
    const uint64_t nvocab = r.count("vocab", 8);  // each token costs at least its length
    c.vocab.reserve(static_cast<size_t>(nvocab));
    for (uint64_t i = 0; i < nvocab; ++i)
      c.vocab.push_back(r.str("vocab entry " + std::to_string(i)));
    c.params = r.tensors("parameter");
    c.optimizer_name = r.str("optimizer_name");
    c.optimizer_state = r.tensors("optimizer state");
    c.step = r.i64("step");
    if (c.step < 0) r.bad("step " + std::to_string(c.step) + " is negative");
    c.rng_state = r.str("rng_state");
    c.loader_state_json = r.str("loader_state_json");
    c.metrics_json = r.str("metrics_json");
    if (version >= 2) {
      c.tokenizer_kind = r.str("tokenizer_kind");
      c.tokenizer_model = r.str("tokenizer_model");
    }
    if (r.remaining() != 0)
      r.bad(std::to_string(r.remaining()) + " unexpected bytes after the last field");
    return c;
  } catch (const Error&) {
    throw;
  } catch (const cereal::Exception& e) {
    fail(name, std::string("corrupted: ") + e.what());
  } catch (const std::bad_alloc&) {
    fail(name, "out of memory while loading the checkpoint");
  } catch (const std::exception& e) {
    fail(name, std::string("cannot load checkpoint: ") + e.what());
  }
}

}  // namespace

std::string checkpoint_to_bytes(const Checkpoint& ckpt) {
  const std::string payload = encode_payload(ckpt, "checkpoint");
  return make_envelope_header(EnvelopeKind::Checkpoint, kCheckpointVersion, payload) + payload;
}

void save_checkpoint(const std::string& path, const Checkpoint& ckpt) {
  const std::string where = path + ": cannot save checkpoint";
  std::string payload;
  try {
    payload = encode_payload(ckpt, where);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {  // out of memory for the payload
    fail(where, e.what());
  }
  write_envelope_atomic(path, EnvelopeKind::Checkpoint, kCheckpointVersion, payload);
}

std::string run_checkpoint(const std::string& path) {
  std::error_code ec;
  const std::filesystem::path in_run = std::filesystem::path(path) / "checkpoint.bin";
  return std::filesystem::is_directory(path, ec) && std::filesystem::is_regular_file(in_run, ec)
             ? in_run.string()
             : path;
}

Checkpoint load_checkpoint(const std::string& path) {
  uint32_t version = 0;
  const std::string payload =
      read_envelope(path, EnvelopeKind::Checkpoint, kCheckpointVersion, &version);
  return decode_payload(payload, path, version);
}

Checkpoint load_checkpoint_from_memory(std::string_view bytes, const std::string& name) {
  uint32_t version = 0;
  const std::string_view payload =
      parse_envelope(bytes, name, EnvelopeKind::Checkpoint, kCheckpointVersion, &version);
  return decode_payload(payload, name, version);
}

void check_finite(const Tensor& t, const std::string& name, const std::string& where,
                  const char* what) {
  for (int64_t j = 0, n = t.numel(); j < n; ++j)
    if (const double v = t.get(j); !std::isfinite(v))
      fail(where, std::string(what) + " '" + name + "' holds a non-finite value (" +
                      std::to_string(v) + " at index " + std::to_string(j) + ")");
}

void check_finite(const std::vector<NamedTensor>& ts, const std::string& where, const char* what) {
  for (const NamedTensor& t : ts) check_finite(t.value, t.name, where, what);
}

Checkpoint average_checkpoints(const std::vector<std::string>& paths) {
  if (paths.empty()) fail("average", "no checkpoint to average");
  Checkpoint first = load_checkpoint(paths[0]);
  std::vector<std::vector<double>> sums;
  for (const NamedTensor& t : first.params) sums.push_back(t.value.to_vector());
  int64_t last_step = first.step;
  for (size_t k = 1; k < paths.size(); ++k) {
    const std::string& path = paths[k];
    const Checkpoint c = load_checkpoint(path);
    if (c.config_json != first.config_json)
      fail(path, "has another model configuration than " + paths[0] +
                     "; only checkpoints of one run (or one configuration) can be averaged");
    if (c.vocab != first.vocab) fail(path, "has another vocabulary than " + paths[0]);
    if (c.params.size() != first.params.size())
      fail(path, "has " + std::to_string(c.params.size()) + " parameters, " + paths[0] + " has " +
                     std::to_string(first.params.size()));
    for (size_t i = 0; i < c.params.size(); ++i) {
      const NamedTensor& t = c.params[i];
      const NamedTensor& f = first.params[i];
      if (t.name != f.name || t.value.shape() != f.value.shape())
        fail(path, "parameter " + std::to_string(i) + " is " + t.name + " " +
                       shape_str(t.value.shape()) + ", in " + paths[0] + " " + f.name + " " +
                       shape_str(f.value.shape()));
      const std::vector<double> v = t.value.to_vector();
      for (size_t j = 0; j < v.size(); ++j) sums[i][j] += v[j];
    }
    last_step = std::max(last_step, c.step);
  }
  const double n = static_cast<double>(paths.size());
  for (size_t i = 0; i < first.params.size(); ++i) {
    Tensor avg = Tensor::zeros(first.params[i].value.shape(), first.params[i].value.dtype());
    for (size_t j = 0; j < sums[i].size(); ++j) avg.set(static_cast<int64_t>(j), sums[i][j] / n);
    first.params[i].value = avg;
  }
  first.optimizer_state.clear();
  first.step = last_step;
  first.loader_state_json = "{}";
  first.metrics_json = nlohmann::json{{"averaged_from", paths}}.dump();
  return first;
}

}  // namespace seqtape
