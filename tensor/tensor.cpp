#include "tensor/tensor.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <sstream>
#include <thread>
#include <type_traits>

#include "tensor/profile.h"

namespace seqtape {

size_t dtype_size(DType d) {
  return d == DType::F32 ? 4 : 8;
}
const char* dtype_name(DType d) {
  return d == DType::F32 ? "float32" : "float64";
}

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << '[';
  for (size_t i = 0; i < s.size(); ++i) os << (i ? "," : "") << s[i];
  os << ']';
  return os.str();
}

int64_t shape_numel(const Shape& s) {
  // The product of the non-zero dimensions must fit even when another dimension is 0, so a
  // crafted file's [2^62, 2^62, 0] is refused here instead of overflowing later (strides).
  int64_t n = 1;
  bool empty = false;
  for (auto d : s) {
    if (d < 0) throw Error("shape " + shape_str(s) + " has a negative dimension");
    if (d == 0) {
      empty = true;
      continue;
    }
    if (__builtin_mul_overflow(n, d, &n))
      throw Error("shape " + shape_str(s) + " has too many elements (more than 2^63 - 1)");
  }
  return empty ? 0 : n;
}

void fail(const std::string& where, const std::string& what) {
  throw Error(where + ": " + what);
}

// ---- buffer pool ------------------------------------------------------------------------
// Buffers are rounded up to a power of two and kept in per-size free lists when released,
// up to a cap, so the same shapes every step cost no malloc and no page faults.
//
// The free lists are kept per thread (a shard per thread, threads beyond kShards sharing): a
// thread reuses the buffers it released itself, whose lines are still in its own core's caches.
// With one pool for all, the ranks of `train --ranks 2` (threads of one process) took each
// other's buffers and every first write to one pulled its lines over from the other core; the
// recipe's steps ran about 5 % slower (docs/performance.md). A buffer released on another thread
// than the one that took it goes to the releasing thread's shard.
namespace {
constexpr int kBuckets = 48;
constexpr int kShards = 8;
constexpr size_t kMaxCached = size_t{1} << 31;  // never cache more than 2 GiB in all

// A shard's lock: a flag taken with one atomic exchange. Every tensor of a training step takes
// it twice (acquire, release) for a few loads and stores, almost always uncontended; a
// std::mutex's lock and unlock calls cost about twice as much there (the seed model's step takes
// it ~330 times). A thread that finds it held yields until it is free.
class PoolLock {
 public:
  void lock() noexcept {
    while (held_.exchange(true, std::memory_order_acquire))
      while (held_.load(std::memory_order_relaxed)) std::this_thread::yield();
  }
  void unlock() noexcept { held_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> held_{false};
};

// One thread's free lists and counts, on cache lines of its own. The counts are the shard's
// share: a buffer taken here and released in another shard raises this one's in_use and lowers
// the other's, so only their sum over the shards means anything (size_t wraps, the sum is right).
struct alignas(64) Shard {
  PoolLock mu;
  std::array<std::vector<Buffer*>, kBuckets> free;
  size_t in_use = 0;
  uint64_t mallocs = 0;   // buffers that had to come from aligned_alloc
  uint64_t acquires = 0;  // buffers handed out (from the free lists or fresh)
};

struct Pool {
  std::array<Shard, kShards> shards;
  std::atomic<size_t> cached{0};  // bytes in every shard's free lists (the cap's count)
  std::atomic<int> next_shard{0};
};
Pool& pool() {
  static Pool* p = new Pool();  // never destroyed: tensors may outlive static destructors
  return *p;
}
// The calling thread's shard: the threads take them in turn as they first allocate.
Shard& my_shard(Pool& p) {
  static thread_local const int s = p.next_shard.fetch_add(1, std::memory_order_relaxed) % kShards;
  return p.shards[static_cast<size_t>(s)];
}
int bucket_of(size_t bytes) {
  int b = 6;  // 64 bytes minimum, cache-line aligned
  while ((size_t{1} << b) < bytes) ++b;
  return b;
}
}  // namespace

// A pooled block of 2^bucket bytes and the count of the tensors that reference it. The pool's
// free lists hold released Buffers whole (block and bookkeeping), so a reused one costs no
// allocation at all.
struct Buffer {
  void* ptr = nullptr;
  int bucket = 0;
  std::atomic<int64_t> refs{1};
  // Memory the pool does not own (Tensor::adopt): given back to its owner, never cached.
  void (*release_external)(void* owner) = nullptr;
  void* owner = nullptr;
};

namespace {
// Frees every cached buffer of every shard (after an allocation failed, so that it can be
// retried).
void release_cached(Pool& p) {
  for (Shard& sh : p.shards) {
    std::lock_guard<PoolLock> lock(sh.mu);
    for (auto& list : sh.free) {
      for (Buffer* b : list) {
        p.cached.fetch_sub(size_t{1} << b->bucket, std::memory_order_relaxed);
        std::free(b->ptr);
        delete b;
      }
      list.clear();
    }
  }
}

// A buffer of at least `bytes`, with one reference: from the free list of its size, or fresh.
Buffer* acquire_buffer(size_t bytes) {
  const int bucket = bucket_of(bytes);
  if (bucket >= kBuckets)
    fail("Tensor", "allocation of " + std::to_string(bytes) + " bytes is too large");
  const size_t sz = size_t{1} << bucket;
  Pool& p = pool();
  Shard& sh = my_shard(p);
  {
    std::lock_guard<PoolLock> lock(sh.mu);
    auto& list = sh.free[static_cast<size_t>(bucket)];
    sh.in_use += sz;
    ++sh.acquires;
    if (!list.empty()) {
      Buffer* b = list.back();
      list.pop_back();
      p.cached.fetch_sub(sz, std::memory_order_relaxed);
      b->refs.store(1, std::memory_order_relaxed);
      return b;
    }
    ++sh.mallocs;
  }
  void* ptr = std::aligned_alloc(64, sz);
  if (!ptr) {  // give the cached buffers back to the system and try once more
    release_cached(p);
    ptr = std::aligned_alloc(64, sz);
  }
  Buffer* b = ptr ? new (std::nothrow) Buffer : nullptr;
  if (!b) {
    std::free(ptr);
    std::lock_guard<PoolLock> lock(sh.mu);
    sh.in_use -= sz;
    fail("Tensor", "out of memory allocating " + std::to_string(bytes) + " bytes");
  }
  b->ptr = ptr;
  b->bucket = bucket;
  return b;
}
}  // namespace

void BufferRef::retain(Buffer* b) noexcept {
  b->refs.fetch_add(1, std::memory_order_relaxed);
}

// The last reference gives the buffer back. noexcept, and nothing in it may throw: it runs while
// a std::bad_alloc unwinds the stack, and the free list growing is itself an allocation — if
// that fails, the buffer is freed.
void BufferRef::release(Buffer* b) noexcept {
  if (b->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  if (b->release_external) {
    b->release_external(b->owner);
    delete b;
    return;
  }
  Pool& p = pool();
  Shard& sh = my_shard(p);
  const size_t sz = size_t{1} << b->bucket;
  {
    std::lock_guard<PoolLock> lock(sh.mu);
    sh.in_use -= sz;
    // (The cap is checked, then counted, without one lock over every shard: threads releasing
    // at once may pass it by a buffer each.)
    if (p.cached.load(std::memory_order_relaxed) + sz <= kMaxCached) {
      try {
        sh.free[static_cast<size_t>(b->bucket)].push_back(b);
        p.cached.fetch_add(sz, std::memory_order_relaxed);
        return;
      } catch (...) {
      }
    }
  }
  std::free(b->ptr);
  delete b;
}

size_t pool_bytes_in_use() {
  size_t sum = 0;
  for (Shard& sh : pool().shards) {
    std::lock_guard<PoolLock> lock(sh.mu);
    sum += sh.in_use;
  }
  return sum;
}
size_t pool_bytes_cached() {
  return pool().cached.load(std::memory_order_relaxed);
}
PoolCounts pool_counts() {
  PoolCounts c;
  for (Shard& sh : pool().shards) {
    std::lock_guard<PoolLock> lock(sh.mu);
    c.acquires += sh.acquires;
    c.mallocs += sh.mallocs;
  }
  return c;
}

// ---- Tensor -----------------------------------------------------------------------------
Tensor Tensor::empty(Shape shape, DType dtype) {
  profile::Scope prof("alloc");
  Tensor t;
  t.numel_ = shape_numel(shape);
  // nbytes() must not wrap around (a [2^61] f64 tensor would get a 1-byte buffer).
  if (static_cast<uint64_t>(t.numel_) > (uint64_t{1} << 62) / dtype_size(dtype))
    fail("Tensor", "shape " + shape_str(shape) + " is too large to allocate");
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  t.buf_ = BufferRef(acquire_buffer(std::max<size_t>(1, t.nbytes())));
  t.ptr_ = t.buf_->ptr;
  return t;
}

Tensor Tensor::adopt(void* data, Shape shape, DType dtype, void (*release)(void* owner),
                     void* owner) {
  if (!release) fail("Tensor::adopt", "needs the function that gives the memory back");
  Buffer* b = nullptr;
  Tensor t;
  try {
    t.numel_ = shape_numel(shape);
    b = new Buffer;
  } catch (...) {
    release(owner);  // the caller handed the memory over: it must not leak on a refusal
    throw;
  }
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  b->ptr = data;
  b->release_external = release;
  b->owner = owner;
  t.buf_ = BufferRef(b);
  t.ptr_ = data;
  return t;
}

Tensor::Tensor(Shape shape, DType dtype) {
  *this = empty(std::move(shape), dtype);
  zero();
}

Tensor Tensor::full(Shape shape, double value, DType dtype) {
  Tensor t = empty(std::move(shape), dtype);
  t.fill(value);
  return t;
}

Tensor Tensor::from(const std::vector<float>& v, Shape shape) {
  if (shape_numel(shape) != static_cast<int64_t>(v.size()))
    fail("Tensor::from",
         std::to_string(v.size()) + " values do not fill shape " + shape_str(shape));
  Tensor t = empty(std::move(shape), DType::F32);
  std::copy(v.begin(), v.end(), t.data<float>());
  return t;
}

Tensor Tensor::from(const std::vector<double>& v, Shape shape) {
  if (shape_numel(shape) != static_cast<int64_t>(v.size()))
    fail("Tensor::from",
         std::to_string(v.size()) + " values do not fill shape " + shape_str(shape));
  Tensor t = empty(std::move(shape), DType::F64);
  std::copy(v.begin(), v.end(), t.data<double>());
  return t;
}

int64_t Tensor::dim(int i) const {
  int n = ndim();
  int j = i < 0 ? i + n : i;
  if (j < 0 || j >= n)
    fail("Tensor::dim",
         "axis " + std::to_string(i) + " out of range for shape " + shape_str(shape_));
  return shape_[static_cast<size_t>(j)];
}

void Tensor::check_dtype(DType want) const {
  if (!buf_.get()) fail("Tensor", "access to an undefined tensor");
  if (want != dtype_)
    fail("Tensor",
         std::string("data of a ") + dtype_name(dtype_) + " tensor read as " + dtype_name(want));
}

Tensor Tensor::reshape(Shape shape) const {
  if (shape_numel(shape) != numel_)
    fail("reshape", "cannot view " + shape_str(shape_) + " as " + shape_str(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::view_of(const Tensor& base, int64_t offset, Shape shape) {
  const int64_t n = shape_numel(shape);
  if (!base.defined() || offset < 0 || n < 0 || offset + n > base.numel_)
    fail("view_of", "elements [" + std::to_string(offset) + ", " + std::to_string(offset + n) +
                        ") of a tensor of " + std::to_string(base.numel_));
  Tensor t = base;
  t.ptr_ = static_cast<char*>(base.ptr_) + static_cast<size_t>(offset) * dtype_size(base.dtype_);
  t.shape_ = std::move(shape);
  t.numel_ = n;
  return t;
}

Tensor Tensor::clone() const {
  if (!buf_.get()) return Tensor();
  Tensor t = empty(shape_, dtype_);
  std::memcpy(t.ptr_, ptr_, nbytes());
  return t;
}

Tensor Tensor::to(DType d) const {
  if (d == dtype_) return clone();
  Tensor t = empty(shape_, d);
  if (d == DType::F64) {
    const float* s = data<float>();
    double* o = t.data<double>();
    for (int64_t i = 0; i < numel_; ++i) o[i] = s[i];
  } else {
    const double* s = data<double>();
    float* o = t.data<float>();
    for (int64_t i = 0; i < numel_; ++i) o[i] = static_cast<float>(s[i]);
  }
  return t;
}

void Tensor::fill(double value) {
  dispatch(dtype_, [&](auto tag) {
    using T = decltype(tag);
    std::fill_n(static_cast<T*>(ptr_), numel_, static_cast<T>(value));
  });
}

void Tensor::zero() {
  if (buf_.get()) std::memset(ptr_, 0, nbytes());
}

double Tensor::get(int64_t i) const {
  if (i < 0 || i >= numel_)
    fail("Tensor::get",
         "index " + std::to_string(i) + " out of range for shape " + shape_str(shape_));
  return dtype_ == DType::F32 ? static_cast<const float*>(ptr_)[i]
                              : static_cast<const double*>(ptr_)[i];
}

void Tensor::set(int64_t i, double v) {
  if (i < 0 || i >= numel_)
    fail("Tensor::set",
         "index " + std::to_string(i) + " out of range for shape " + shape_str(shape_));
  if (dtype_ == DType::F32)
    static_cast<float*>(ptr_)[i] = static_cast<float>(v);
  else
    static_cast<double*>(ptr_)[i] = v;
}

double Tensor::item() const {
  if (numel_ != 1)
    fail("Tensor::item", "tensor of shape " + shape_str(shape_) + " has more than one element");
  return get(0);
}

std::vector<double> Tensor::to_vector() const {
  std::vector<double> v(static_cast<size_t>(numel_));
  for (int64_t i = 0; i < numel_; ++i) v[static_cast<size_t>(i)] = get(i);
  return v;
}

std::vector<float> Tensor::to_floats() const {
  std::vector<float> v(static_cast<size_t>(numel_));
  for (int64_t i = 0; i < numel_; ++i) v[static_cast<size_t>(i)] = static_cast<float>(get(i));
  return v;
}

}  // namespace seqtape
