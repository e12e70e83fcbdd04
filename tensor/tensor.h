#pragma once
// Tensor: an N-dimensional, row-major, contiguous array of float32 or float64.
// Storage is reference counted and comes from a size-bucketed pool (free lists per thread), so
// the per-step allocations of training and decoding reuse the same memory instead of malloc.
// A Tensor never aliases another one with different strides: views are reshapes, or contiguous
// pieces of one buffer (view_of: parameters and gradients inside one flat buffer).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace seqtape {

enum class DType : uint8_t { F32 = 0, F64 = 1 };

size_t dtype_size(DType d);
const char* dtype_name(DType d);

// A tensor's dimensions: a vector of int64_t that keeps up to kInline of them in place, so that
// making, copying and destroying the shapes of a training step's tensors (hundreds per step) does
// not go to the heap; more dimensions move to a std::vector. The std::vector-like subset the
// project uses.
class Shape {
 public:
  using value_type = int64_t;
  using size_type = size_t;
  using iterator = int64_t*;
  using const_iterator = const int64_t*;
  using reference = int64_t&;
  using const_reference = const int64_t&;
  static constexpr size_t kInline = 6;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) : Shape(dims.begin(), dims.end()) {}
  explicit Shape(size_t n, int64_t value = 0) { assign(n, value); }
  template <typename It, typename = decltype(*std::declval<It>())>
  Shape(It first, It last) {
    for (; first != last; ++first) push_back(static_cast<int64_t>(*first));
  }
  Shape(const std::vector<int64_t>& dims) : Shape(dims.begin(), dims.end()) {}  // NOLINT
  Shape(const Shape& o) : Shape(o.begin(), o.end()) {}
  Shape(Shape&& o) noexcept { *this = std::move(o); }
  Shape& operator=(const Shape& o) {
    if (this != &o) *this = Shape(o);
    return *this;
  }
  Shape& operator=(Shape&& o) noexcept {
    if (this != &o) {
      n_ = std::exchange(o.n_, 0);
      big_ = std::move(o.big_);
      o.big_.clear();
      std::copy(o.small_, o.small_ + kInline, small_);
    }
    return *this;
  }
  ~Shape() = default;

  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  int64_t* data() { return n_ > kInline ? big_.data() : small_; }
  const int64_t* data() const { return n_ > kInline ? big_.data() : small_; }
  int64_t* begin() { return data(); }
  int64_t* end() { return data() + n_; }
  const int64_t* begin() const { return data(); }
  const int64_t* end() const { return data() + n_; }
  int64_t& operator[](size_t i) { return data()[i]; }
  int64_t operator[](size_t i) const { return data()[i]; }
  int64_t& back() { return data()[n_ - 1]; }
  int64_t back() const { return data()[n_ - 1]; }
  void clear() {
    n_ = 0;
    big_.clear();
  }
  // Removes the dimension at `pos`; returns an iterator to the one after it.
  int64_t* erase(const int64_t* pos) {
    const size_t at = static_cast<size_t>(pos - begin());
    Shape rest;
    for (size_t i = 0; i < n_; ++i)
      if (i != at) rest.push_back((*this)[i]);
    *this = std::move(rest);
    return begin() + at;
  }
  void assign(size_t n, int64_t value) {
    clear();
    for (size_t i = 0; i < n; ++i) push_back(value);
  }
  void push_back(int64_t d) {
    if (n_ < kInline) {
      small_[n_++] = d;
      return;
    }
    if (n_ == kInline) big_.assign(small_, small_ + kInline);
    big_.push_back(d);
    ++n_;
  }

  friend bool operator==(const Shape& a, const Shape& b) {
    return std::equal(a.begin(), a.end(), b.begin(), b.end());
  }
  friend bool operator!=(const Shape& a, const Shape& b) { return !(a == b); }

 private:
  size_t n_ = 0;
  int64_t small_[kInline] = {};
  std::vector<int64_t> big_;  // all the dimensions when there are more than kInline
};

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

// A counted reference to a pooled Buffer: copies share it, and the last one gives the buffer
// back to the pool. The count lives in the Buffer, which the pool keeps with its memory, so a
// tensor costs no heap allocation for its bookkeeping (a std::shared_ptr's control block would
// be one per tensor).
class BufferRef {
 public:
  BufferRef() = default;
  explicit BufferRef(Buffer* b) noexcept : b_(b) {}  // adopts the reference b was made with
  BufferRef(const BufferRef& o) noexcept : b_(o.b_) {
    if (b_) retain(b_);
  }
  BufferRef(BufferRef&& o) noexcept : b_(std::exchange(o.b_, nullptr)) {}
  BufferRef& operator=(const BufferRef& o) noexcept {
    BufferRef copy(o);
    std::swap(b_, copy.b_);
    return *this;
  }
  BufferRef& operator=(BufferRef&& o) noexcept {
    BufferRef moved(std::move(o));
    std::swap(b_, moved.b_);
    return *this;
  }
  ~BufferRef() {
    if (b_) release(b_);
  }
  Buffer* get() const { return b_; }
  Buffer* operator->() const { return b_; }

 private:
  static void retain(Buffer* b) noexcept;
  static void release(Buffer* b) noexcept;
  Buffer* b_ = nullptr;
};

class Tensor {
 public:
  Tensor() = default;                // undefined: no storage, no shape
  Tensor(Shape shape, DType dtype);  // zero-filled

  static Tensor zeros(Shape shape, DType dtype) { return Tensor(std::move(shape), dtype); }
  static Tensor empty(Shape shape, DType dtype);  // uninitialized contents
  static Tensor full(Shape shape, double value, DType dtype);
  static Tensor from(const std::vector<float>& v, Shape shape);
  static Tensor from(const std::vector<double>& v, Shape shape);
  // A tensor over memory the caller owns (a NumPy array's, for the Python module): no copy, no
  // pool. `release(owner)` runs when the last tensor using it goes, from whichever thread that
  // is. The memory must stay valid and hold numel(shape) elements of dtype until then.
  static Tensor adopt(void* data, Shape shape, DType dtype, void (*release)(void* owner),
                      void* owner);
  static Tensor zeros_like(const Tensor& t) { return Tensor(t.shape(), t.dtype()); }

  bool defined() const { return buf_.get() != nullptr; }
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
  bool same_storage(const Tensor& o) const { return buf_.get() == o.buf_.get(); }

 private:
  void check_dtype(DType want) const;
  BufferRef buf_;
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
