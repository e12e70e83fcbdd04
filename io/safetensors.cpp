#include "io/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <functional>
#include <new>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "io/envelope.h"

namespace seqtape {

// Tensor data is written and read as raw memory, which is the file's byte order only here.
static_assert(std::endian::native == std::endian::little,
              "safetensors I/O assumes a little-endian host");

namespace {

using OrderedJson = nlohmann::ordered_json;

const char* st_dtype(DType d) {
  return d == DType::F32 ? "F32" : "F64";
}

// One tensor of the header: its name, dtype, shape and bytes.
struct Part {
  const std::string& name;
  const char* dtype;
  const Shape& shape;
  std::string_view bytes;
};

std::vector<Part> parts_of(const std::vector<NamedTensor>& tensors,
                           const std::vector<StoredTensor>& stored, const std::string& where) {
  std::vector<Part> parts;
  for (const auto& nt : tensors) {
    if (!nt.value.defined()) fail(where, "tensor \"" + nt.name + "\" is undefined");
    parts.push_back({nt.name,
                     st_dtype(nt.value.dtype()),
                     nt.value.shape(),
                     {static_cast<const char*>(nt.value.raw()), nt.value.nbytes()}});
  }
  for (const auto& st : stored) {
    if (st.bytes.size() != size_t(shape_numel(st.shape)) * stored_dtype_size(st.dtype))
      fail(where, "tensor \"" + st.name + "\" has " + std::to_string(st.bytes.size()) +
                      " bytes, not those of " + to_string(st.dtype) + " " + shape_str(st.shape));
    parts.push_back({st.name,
                     to_string(st.dtype),
                     st.shape,
                     {reinterpret_cast<const char*>(st.bytes.data()), st.bytes.size()}});
  }
  return parts;
}

// The header, padded with spaces so that the data section starts 8-byte aligned, preceded by
// its u64 length. `where` names the destination in errors.
std::string build_header(const std::vector<Part>& parts,
                         const std::map<std::string, std::string>& metadata,
                         const std::string& where) {
  OrderedJson h = OrderedJson::object();
  if (!metadata.empty()) {
    OrderedJson m = OrderedJson::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    h["__metadata__"] = std::move(m);
  }
  std::set<std::string_view> seen;
  uint64_t offset = 0;
  for (const Part& p : parts) {
    if (p.name == "__metadata__") fail(where, "tensor name \"__metadata__\" is reserved");
    if (!seen.insert(p.name).second) fail(where, "duplicate tensor name \"" + p.name + "\"");
    const uint64_t end = offset + p.bytes.size();
    h[p.name] =
        OrderedJson{{"dtype", p.dtype}, {"shape", p.shape}, {"data_offsets", {offset, end}}};
    offset = end;
  }
  std::string json;
  try {
    json = h.dump();
  } catch (const nlohmann::json::exception& e) {
    fail(where, std::string("cannot encode the header (is every name valid UTF-8?): ") + e.what());
  }
  json.append((8 - json.size() % 8) % 8, ' ');
  std::string out;
  out.reserve(8 + json.size());
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((json.size() >> (8 * i)) & 0xff));
  out += json;
  return out;
}

std::vector<std::string_view> file_parts(const std::string& header,
                                         const std::vector<Part>& tensors) {
  std::vector<std::string_view> parts{header};
  for (const Part& p : tensors) parts.push_back(p.bytes);
  return parts;
}

// Where the bytes come from: a file or memory. read(offset, dst, n) must deliver n bytes.
struct Source {
  uint64_t size;
  std::function<void(uint64_t, char*, size_t)> read;
};

struct Entry {
  std::string name;
  DType dtype;
  std::optional<StoredDType> stored;  // I8 or BF16 (then dtype is unused)
  Shape shape;
  uint64_t begin, end;
};

uint64_t get_u64(const OrderedJson& v, const std::string& name, const std::string& what) {
  if (!v.is_number_unsigned()) fail(name, what + " is not a non-negative integer: " + v.dump());
  return v.get<uint64_t>();
}

void parse_dtype(const std::string& s, Entry& e, const std::string& name, const std::string& t) {
  if (s == "F32" || s == "F64") {
    e.dtype = s == "F32" ? DType::F32 : DType::F64;
    return;
  }
  if (s == "I8" || s == "BF16") {
    e.stored = s == "I8" ? StoredDType::I8 : StoredDType::BF16;
    return;
  }
  static const std::set<std::string> known = {"BOOL", "U8",  "I16", "U16",     "F16",
                                              "I32",  "U32", "I64", "F8_E4M3", "F8_E5M2"};
  if (known.count(s))
    fail(name, t + ": dtype " + s + " is not supported (seqtape reads F32, F64, I8 and BF16)");
  fail(name, t + ": unknown dtype \"" + s + "\"");
}

// The span must be numel x dtype size. Any zero dimension makes an empty tensor; otherwise
// the product is checked for overflow, so crafted huge dimensions cannot wrap to a match.
void check_span(const Entry& e, const std::string& s, const std::string& offs,
                const std::string& name, const std::string& t) {
  const uint64_t span = e.end - e.begin;
  const bool empty = std::find(e.shape.begin(), e.shape.end(), 0) != e.shape.end();
  uint64_t need = empty ? 0 : e.stored ? stored_dtype_size(*e.stored) : dtype_size(e.dtype);
  bool overflow = false;
  for (int64_t d : e.shape)
    if (!empty)
      overflow = overflow || __builtin_mul_overflow(need, static_cast<uint64_t>(d), &need);
  if (overflow)
    fail(name, t + ": span mismatch: " + s + " " + shape_str(e.shape) +
                   " needs more than 2^64 bytes, data_offsets " + offs + " span " +
                   std::to_string(span));
  if (need != span)
    fail(name, t + ": span mismatch: " + s + " " + shape_str(e.shape) + " needs " +
                   std::to_string(need) + " bytes, data_offsets " + offs + " span " +
                   std::to_string(span));
}

Entry parse_entry(const std::string& key, const OrderedJson& v, uint64_t data_size,
                  const std::string& name) {
  const std::string t = "tensor \"" + key + "\"";
  if (!v.is_object()) fail(name, t + ": header entry is not a JSON object");
  for (const char* field : {"dtype", "shape", "data_offsets"})
    if (!v.contains(field)) fail(name, t + ": header entry has no \"" + field + "\"");
  Entry e;
  e.name = key;

  const auto& dt = v["dtype"];
  if (!dt.is_string()) fail(name, t + ": dtype is not a string");
  const auto& s = dt.get_ref<const std::string&>();
  parse_dtype(s, e, name, t);

  const auto& shape = v["shape"];
  if (!shape.is_array()) fail(name, t + ": shape is not an array");
  for (const auto& d : shape) {
    if (d.is_number_integer() && !d.is_number_unsigned())
      fail(name, t + ": shape " + shape.dump() + " has a negative dimension");
    const uint64_t dim = get_u64(d, name, t + ": shape dimension");
    if (dim > static_cast<uint64_t>(INT64_MAX)) fail(name, t + ": shape dimension is too large");
    e.shape.push_back(static_cast<int64_t>(dim));
  }

  const auto& offs = v["data_offsets"];
  if (!offs.is_array() || offs.size() != 2)
    fail(name, t + ": data_offsets is not an array [begin, end]");
  e.begin = get_u64(offs[0], name, t + ": data_offsets begin");
  e.end = get_u64(offs[1], name, t + ": data_offsets end");
  if (e.begin > e.end) fail(name, t + ": data_offsets " + offs.dump() + " end before they begin");
  if (e.end > data_size)
    fail(name, t + ": data_offsets " + offs.dump() + " run past the " + std::to_string(data_size) +
                   "-byte data section");

  check_span(e, s, offs.dump(), name, t);
  return e;
}

// The header: its length (n, from the first 8 bytes) and its JSON.
struct Header {
  uint64_t n = 0;
  OrderedJson json;
};

Header read_header(const Source& src, const std::string& name) {
  if (src.size < 8)
    fail(name,
         "truncated: " + std::to_string(src.size) + " bytes, fewer than the 8-byte header length");
  char len_bytes[8];
  src.read(0, len_bytes, 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(len_bytes[i]);
  if (n > kMaxSafetensorsHeaderBytes)
    fail(name, "header length " + std::to_string(n) + " is over the limit of " +
                   std::to_string(kMaxSafetensorsHeaderBytes) + " bytes");
  if (n > src.size - 8)
    fail(name, "header length " + std::to_string(n) + " exceeds the " +
                   std::to_string(src.size - 8) + " bytes after it in the file");
  std::string header(static_cast<size_t>(n), '\0');
  src.read(8, header.data(), header.size());

  // A valid header nests at most 3 deep (root > entry > shape > dimension); refusing deeper
  // input early bounds the parser's work on crafted files.
  OrderedJson h;
  try {
    h = OrderedJson::parse(header, [&](int depth, nlohmann::json::parse_event_t, OrderedJson&) {
      if (depth > 3) fail(name, "header JSON is nested deeper than a safetensors header");
      return true;
    });
  } catch (const nlohmann::json::exception& e) {
    fail(name, std::string("header is not valid JSON: ") + e.what());
  }
  if (!h.is_object()) fail(name, "header is not a JSON object");
  return {n, std::move(h)};
}

// Sorted by offset the spans must tile the data section: no gap, no overlap.
void check_tiling(std::vector<Entry>& entries, uint64_t data_size, const std::string& name) {
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t pos = 0;
  std::string prev = "the start of the data section";
  for (const auto& e : entries) {
    const std::string t = "tensor \"" + e.name + "\"";
    if (e.begin < pos)
      fail(name, t + ": data_offsets [" + std::to_string(e.begin) + "," + std::to_string(e.end) +
                     "] overlap " + prev + " (ends at " + std::to_string(pos) + ")");
    if (e.begin > pos)
      fail(name, t + ": gap of " + std::to_string(e.begin - pos) + " bytes between " + prev +
                     " (ends at " + std::to_string(pos) + ") and this tensor (starts at " +
                     std::to_string(e.begin) + ")");
    pos = e.end;
    prev = t;
  }
  if (pos != data_size)
    fail(name, "the data section has " + std::to_string(data_size) + " bytes but the tensors " +
                   "cover " + std::to_string(pos) + " (" + std::to_string(data_size - pos) +
                   " trailing bytes)");
}

SafetensorsFile parse(const Source& src, const std::string& name) {
  const Header header = read_header(src, name);
  const uint64_t n = header.n;
  const uint64_t data_size = src.size - 8 - n;
  SafetensorsFile out;
  std::vector<Entry> entries;
  for (const auto& [key, v] : header.json.items()) {
    if (key == "__metadata__") {
      if (!v.is_object()) fail(name, "__metadata__ is not a JSON object");
      for (const auto& [mk, mv] : v.items()) {
        if (!mv.is_string()) fail(name, "__metadata__ value of \"" + mk + "\" is not a string");
        out.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(key, v, data_size, name));
  }

  check_tiling(entries, data_size, name);

  // All spans are inside the file and disjoint, so these allocations sum to at most its size.
  out.tensors.reserve(entries.size());
  for (auto& e : entries) {
    if (e.stored) {
      StoredTensor st{std::move(e.name), *e.stored, std::move(e.shape), {}};
      st.bytes.resize(e.end - e.begin);
      src.read(8 + n + e.begin, reinterpret_cast<char*>(st.bytes.data()), st.bytes.size());
      out.stored.push_back(std::move(st));
      continue;
    }
    Tensor t = Tensor::empty(e.shape, e.dtype);
    src.read(8 + n + e.begin, static_cast<char*>(t.raw()), t.nbytes());
    out.tensors.push_back({std::move(e.name), std::move(t)});
  }
  return out;
}

// A 100 MB header can still parse into a large JSON tree; running out of memory is an Error
// naming the file like every other failure.
SafetensorsFile parse_guarded(const Source& src, const std::string& name) {
  try {
    return parse(src, name);
  } catch (const std::bad_alloc&) {
    fail(name, "out of memory while reading safetensors");
  }
}

}  // namespace

const char* to_string(StoredDType d) {
  return d == StoredDType::I8 ? "I8" : "BF16";
}
size_t stored_dtype_size(StoredDType d) {
  return d == StoredDType::I8 ? 1 : 2;
}

std::string safetensors_to_bytes(const std::vector<NamedTensor>& tensors,
                                 const std::map<std::string, std::string>& metadata,
                                 const std::vector<StoredTensor>& stored) {
  const std::vector<Part> parts = parts_of(tensors, stored, "safetensors");
  const std::string header = build_header(parts, metadata, "safetensors");
  std::string out;
  for (std::string_view part : file_parts(header, parts)) out += part;
  return out;
}

void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata,
                       const std::vector<StoredTensor>& stored) {
  const std::string where = path + ": cannot save safetensors";
  const std::vector<Part> parts = parts_of(tensors, stored, where);
  write_file_atomic(path, file_parts(build_header(parts, metadata, where), parts));
}

SafetensorsFile read_safetensors(const std::string& path) {
  const ReadOnlyFile file(path);
  const Source src{file.size(),
                   [&](uint64_t offset, char* dst, size_t n) { file.read_at(offset, dst, n); }};
  return parse_guarded(src, path);
}

SafetensorsFile read_safetensors_from_memory(std::string_view bytes, const std::string& name) {
  const Source src{bytes.size(), [&](uint64_t offset, char* dst, size_t n) {
                     if (n) std::memcpy(dst, bytes.data() + offset, n);
                   }};
  return parse_guarded(src, name);
}

}  // namespace seqtape
