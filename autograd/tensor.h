#pragma once
// Tensor: an N-dimensional, row-major, contiguous array of float32 or float64.
// Storage is reference counted and comes from a size-bucketed pool, so the per-step
// allocations of training and decoding reuse the same memory instead of going to malloc.
// A Tensor never aliases another one with different strides: views are reshapes, or contiguous
// pieces of one buffer (view_of: parameters and gradients inside one flat buffer).

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace seqtape {

enum class DType : uint8_t { F32 = 0, F64 = 1 };

size_t dtype_size(DType d);
const char* dtype_name(DType d);

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& s);
int64_t shape_numel(const Shape& s);

// The error every op throws: message names the op and the shapes involved.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] void fail(const std::string& where, const std::string& what);

template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::F32;
}
template <>
constexpr DType dtype_of<double>() {
  return DType::F64;
}

// Calls fn(T{}) with T = float or double according to the runtime dtype.
template <typename Fn>
decltype(auto) dispatch(DType d, Fn&& fn) {
  if (d == DType::F32) return fn(float{});
  return fn(double{});
}

struct Buffer;  // pooled storage, see tensor.cpp

class Tensor {
 public:
  Tensor() = default;                // undefined: no storage, no shape
  Tensor(Shape shape, DType dtype);  // zero-filled

  static Tensor zeros(Shape shape, DType dtype) { return Tensor(std::move(shape), dtype); }
  static Tensor empty(Shape shape, DType dtype);  // uninitialized contents
  static Tensor full(Shape shape, double value, DType dtype);
  static Tensor from(const std::vector<float>& v, Shape shape);
  static Tensor from(const std::vector<double>& v, Shape shape);
  static Tensor zeros_like(const Tensor& t) { return Tensor(t.shape(), t.dtype()); }
  static Tensor empty_like(const Tensor& t) { return empty(t.shape(), t.dtype()); }

  bool defined() const { return buf_ != nullptr; }
  const Shape& shape() const { return shape_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t dim(int i) const;  // negative i counts from the end
  int64_t numel() const { return numel_; }
  DType dtype() const { return dtype_; }
  size_t nbytes() const { return static_cast<size_t>(numel_) * dtype_size(dtype_); }

  template <typename T>
  T* data() {
    check_dtype(dtype_of<T>());
    return static_cast<T*>(ptr_);
  }
  template <typename T>
  const T* data() const {
    check_dtype(dtype_of<T>());
    return static_cast<const T*>(ptr_);
  }
  void* raw() { return ptr_; }
  const void* raw() const { return ptr_; }

  // Same storage, new shape (element count must match).
  Tensor reshape(Shape shape) const;
  // Elements [offset, offset + numel(shape)) of base's storage, shared, as a tensor of `shape`.
  static Tensor view_of(const Tensor& base, int64_t offset, Shape shape);
  Tensor clone() const;
  Tensor to(DType d) const;  // converting copy (a clone when d == dtype())
  void fill(double value);
  void zero();
  // Element access by flat index, converted to double (for tests, printing, small reads).
  double get(int64_t i) const;
  void set(int64_t i, double v);
  double item() const;  // the single element of a one-element tensor
  std::vector<double> to_vector() const;
  std::vector<float> to_floats() const;
  bool same_storage(const Tensor& o) const { return buf_ == o.buf_; }

 private:
  void check_dtype(DType want) const;
  std::shared_ptr<Buffer> buf_;
  void* ptr_ = nullptr;
  Shape shape_;
  int64_t numel_ = 0;
  DType dtype_ = DType::F32;
};

// Bytes currently held by the buffer pool (live + cached), for tests that check that
// repeated steps do not grow memory.
size_t pool_bytes_in_use();
size_t pool_bytes_cached();
// Buffers handed out by the pool since the start, and how many of them needed a fresh
// aligned_alloc (the rest were reused): a steady training step should add no mallocs.
struct PoolCounts {
  uint64_t acquires = 0, mallocs = 0;
};
PoolCounts pool_counts();

}  // namespace seqtape
