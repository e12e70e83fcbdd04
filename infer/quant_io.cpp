// Quantized exports: the matrices as decoding quantizes them, written and read back.
//
// Dimension key: V vocabulary, C d_model.
#include "infer/quant_io.h"

#include <cmath>
#include <cstring>
#include <sstream>

#include "model/param_names.h"

namespace seqtape {

namespace pn = param_name;

namespace {

// The embedding is [out, in] (one row per token); every other matrix is [in, out].
bool out_in(const std::string& name) {
  return name == std::string(pn::kEmbed) + "." + pn::kWeight;
}

// How a matrix of file shape [d0, d1] holds (output j, input p): at j·stride_out + p·stride_in.
struct Orientation {
  int64_t out, in, stride_out, stride_in;
};
Orientation orientation(const std::string& name, const Shape& s) {
  if (out_in(name)) return {s[0], s[1], s[1], 1};
  return {s[1], s[0], 1, s[1]};
}

std::string quoted(const std::string& name) {
  return "tensor \"" + name + "\"";
}

std::string number(float v) {
  std::ostringstream os;
  os << v;
  return os.str();
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// The int8 values and scale tensor of one export matrix, from its quantized form.
void put_int8(const std::string& name, const Shape& shape, const QuantMatrix& m,
              QuantizedTensors& out) {
  const Orientation o = orientation(name, shape);
  StoredTensor st{name, StoredDType::I8, shape, std::vector<uint8_t>(size_t(m.out * m.in))};
  Tensor scale = Tensor::empty({m.out}, DType::F32);  // [out]
  for (int64_t j = 0; j < m.out; ++j) {
    scale.data<float>()[j] = m.scale[size_t(j)];
    for (int64_t p = 0; p < m.in; ++p)
      st.bytes[size_t(j * o.stride_out + p * o.stride_in)] = uint8_t(m.q_at(j, p));
  }
  out.stored.push_back(std::move(st));
  out.tensors.push_back({name + kScaleSuffix, std::move(scale)});
}

void put_bf16(const std::string& name, const Shape& shape, const QuantMatrix& m,
              QuantizedTensors& out) {
  const Orientation o = orientation(name, shape);
  StoredTensor st{name, StoredDType::BF16, shape, std::vector<uint8_t>(size_t(m.out * m.in) * 2)};
  for (int64_t j = 0; j < m.out; ++j)
    for (int64_t p = 0; p < m.in; ++p) {
      const uint16_t b = m.bf16_at(j, p);
      std::memcpy(st.bytes.data() + 2 * (j * o.stride_out + p * o.stride_in), &b, 2);
    }
  out.stored.push_back(std::move(st));
}

// The scale of int8 matrix `name` with `out` outputs: F32 [out], every value finite and > 0.
const float* checked_scale(const std::map<std::string, const Tensor*>& scales,
                           const std::string& name, int64_t out, const std::string& where) {
  const std::string s = name + kScaleSuffix;
  const auto it = scales.find(s);
  if (it == scales.end())
    fail(where, quoted(name) + " is I8 but its scale " + quoted(s) + " (F32 [" +
                    std::to_string(out) + "]) is missing");
  const Tensor& t = *it->second;
  if (t.dtype() != DType::F32)
    fail(where, quoted(s) + " is " + (t.dtype() == DType::F64 ? "F64" : "?") +
                    "; the scales of an int8 export are F32");
  if (t.shape() != Shape{out})
    fail(where, quoted(s) + " has shape " + shape_str(t.shape()) + "; the scales of " +
                    quoted(name) + " are one per output: [" + std::to_string(out) + "]");
  const float* v = t.data<float>();
  for (int64_t j = 0; j < out; ++j)
    if (!std::isfinite(v[j]) || v[j] <= 0)
      fail(where, quoted(s) + " holds " + number(v[j]) + " at index " + std::to_string(j) +
                      "; a scale is finite and > 0");
  return v;
}

// One stored matrix as decoding holds it, checked: its dtype is the export's, its shape 2-D
// with 1 to kQuantMaxIn inputs, its int8 values in [-127, 127] and its scales sound.
QuantWeight read_matrix(const StoredTensor& st, ComputeType type,
                        const std::map<std::string, const Tensor*>& scales,
                        const std::string& where) {
  const StoredDType want = type == ComputeType::Int8 ? StoredDType::I8 : StoredDType::BF16;
  if (st.dtype != want)
    fail(where, quoted(st.name) + " is " + to_string(st.dtype) + ", but the file's " +
                    kComputeTypeKey + " is " + to_string(type) + " (its matrices are " +
                    to_string(want) + ")");
  if (st.shape.size() != 2 || st.shape[0] < 1 || st.shape[1] < 1)
    fail(where, quoted(st.name) + " has shape " + shape_str(st.shape) + "; a matrix is 2-D");
  const Orientation o = orientation(st.name, st.shape);
  if (o.in > kQuantMaxIn)
    fail(where, quoted(st.name) + " has " + std::to_string(o.in) + " inputs; " + to_string(type) +
                    " takes at most " + std::to_string(kQuantMaxIn));
  if (type == ComputeType::Bf16) {
    std::vector<uint16_t> bits(st.bytes.size() / 2);
    std::memcpy(bits.data(), st.bytes.data(), st.bytes.size());
    return std::make_shared<const QuantMatrix>(
        bf16_matrix(bits.data(), o.out, o.in, o.stride_out, o.stride_in));
  }
  const float* s = checked_scale(scales, st.name, o.out, where);
  const auto* q = reinterpret_cast<const int8_t*>(st.bytes.data());
  // -128 has no negation in int8, which the AVX2 kernel's sign trick needs.
  for (size_t i = 0; i < st.bytes.size(); ++i)
    if (q[i] == -128)
      fail(where, quoted(st.name) + " holds -128 at element " + std::to_string(i) +
                      "; int8 weights are in [-127, 127]");
  return std::make_shared<const QuantMatrix>(
      int8_matrix(q, s, o.out, o.in, o.stride_out, o.stride_in));
}

// The compute type the metadata names: F32 without the key, else int8 or bf16.
ComputeType file_compute_type(const SafetensorsFile& file, const std::string& where) {
  const auto it = file.metadata.find(kComputeTypeKey);
  if (it == file.metadata.end()) {
    if (!file.stored.empty())
      fail(where, quoted(file.stored[0].name) + " is " + to_string(file.stored[0].dtype) +
                      ", but the metadata has no " + kComputeTypeKey +
                      " (only a quantized export, int8 or bf16, holds I8 or BF16 tensors)");
    return ComputeType::F32;
  }
  const std::optional<ComputeType> t = parse_compute_type(it->second);
  if (!t || (*t != ComputeType::Int8 && *t != ComputeType::Bf16))
    fail(where, std::string("the metadata's ") + kComputeTypeKey + " is '" + it->second +
                    "'; a quantized export says int8 or bf16");
  return *t;
}

}  // namespace

bool is_quantized_matrix(const std::string& name) {
  if (out_in(name) || name == std::string(pn::kOutProj) + "." + pn::kWeight) return true;
  const size_t dot = name.rfind('.');
  if (dot == std::string::npos) return false;
  const std::string leaf = name.substr(dot + 1);
  for (const char* m : {pn::kWq, pn::kWk, pn::kWv, pn::kWo, pn::kW1, pn::kW2, pn::kW3})
    if (leaf == m) return true;
  return false;
}

QuantizedTensors quantize_for_export(const std::vector<NamedTensor>& params, ComputeType t) {
  QuantizedTensors out;
  for (const NamedTensor& p : params) {
    if (!is_quantized_matrix(p.name)) {
      out.tensors.push_back(p);
      continue;
    }
    const Tensor w = p.value.dtype() == DType::F32 ? p.value : p.value.to(DType::F32);
    const Orientation o = orientation(p.name, w.shape());
    const QuantMatrix m = quantize(t, w.data<float>(), o.out, o.in, o.stride_out, o.stride_in);
    if (t == ComputeType::Int8)
      put_int8(p.name, w.shape(), m, out);
    else
      put_bf16(p.name, w.shape(), m, out);
  }
  return out;
}

QuantizedParams read_quantized(SafetensorsFile file, const std::string& where) {
  QuantizedParams r;
  r.type = file_compute_type(file, where);
  if (r.type == ComputeType::F32) {
    r.params = std::move(file.tensors);
    return r;
  }
  std::map<std::string, const Tensor*> scales;
  for (const NamedTensor& t : file.tensors) {
    if (is_quantized_matrix(t.name))
      fail(where, quoted(t.name) + " is " + (t.value.dtype() == DType::F32 ? "F32" : "F64") +
                      ", but this " + to_string(r.type) + " export stores it as " +
                      (r.type == ComputeType::Int8 ? "I8" : "BF16"));
    if (r.type == ComputeType::Int8 && ends_with(t.name, kScaleSuffix) &&
        is_quantized_matrix(t.name.substr(0, t.name.size() - (sizeof kScaleSuffix - 1))))
      scales.emplace(t.name, &t.value);
  }
  for (const StoredTensor& st : file.stored) {
    if (!is_quantized_matrix(st.name))
      fail(where, quoted(st.name) + " is " + to_string(st.dtype) + ", but " +
                      (ends_with(st.name, kScaleSuffix)
                           ? std::string("scales are F32")
                           : "it stays float32 (only the embedding and the attention, "
                             "feed-forward and output matrices are quantized)"));
    r.matrices.emplace(st.name, read_matrix(st, r.type, scales, where));
  }
  for (NamedTensor& t : file.tensors)
    if (!scales.count(t.name)) r.params.push_back(std::move(t));
  return r;
}

Shape stored_shape(const std::string& name, const QuantMatrix& m) {
  return out_in(name) ? Shape{m.out, m.in} : Shape{m.in, m.out};
}

std::vector<NamedTensor> dequantized(const std::map<std::string, QuantWeight>& matrices) {
  std::vector<NamedTensor> out;
  for (const auto& [name, m] : matrices) {
    const Shape shape = stored_shape(name, *m);
    const Orientation o = orientation(name, shape);
    Tensor t = Tensor::empty(shape, DType::F32);
    std::vector<float> row(size_t(m->in));
    for (int64_t j = 0; j < m->out; ++j) {
      m->dequantize_row(j, row.data());
      for (int64_t p = 0; p < m->in; ++p)
        t.data<float>()[j * o.stride_out + p * o.stride_in] = row[size_t(p)];
    }
    out.push_back({name, std::move(t)});
  }
  return out;
}

}  // namespace seqtape
