#pragma once
// A seeded random generator whose whole state can be saved and restored as text, so that
// a resumed training run draws exactly the numbers an uninterrupted one would.
//
// The distributions are written out here rather than taken from <random>, whose
// std::uniform_int_distribution and std::normal_distribution are implementation-defined: a
// seed gives the same numbers under any standard library. (They are the algorithms libstdc++
// uses, so numbers drawn before this change are unchanged on GCC.)

#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>

namespace seqtape {

class Rng {
 public:
  explicit Rng(uint64_t seed = 0) : gen_(seed) {}
  void seed(uint64_t s) { gen_.seed(s); }
  uint64_t next_u64() { return gen_(); }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(gen_() >> 11) * 0x1.0p-53; }
  // Uniform integer in [0, n): Lemire's multiply-and-reject on 64-bit draws (0 for n = 0).
  uint64_t below(uint64_t n) {
    if (n == 0) return 0;
    uint64_t high = 0, low = mul_64x64(gen_(), n, high);
    if (low < n) {
      const uint64_t threshold = (0 - n) % n;
      while (low < threshold) low = mul_64x64(gen_(), n, high);
    }
    return high;
  }
  // Standard normal by Marsaglia's polar method, one value per call (the pair's second).
  double normal() {
    double x, y, r2;
    do {
      x = 2.0 * canonical() - 1.0;
      y = 2.0 * canonical() - 1.0;
      r2 = x * x + y * y;
    } while (r2 > 1.0 || r2 == 0.0);
    return y * std::sqrt(-2 * std::log(r2) / r2);
  }

  std::string state() const {
    std::ostringstream os;
    os << gen_;
    return os.str();
  }
  void set_state(const std::string& s) {
    std::istringstream is(s);
    is >> gen_;
    if (is.fail()) throw std::runtime_error("Rng: invalid saved state");
  }
  std::mt19937_64& engine() { return gen_; }

 private:
  // a·b as 128 bits: returns the low half, `high` gets the high half (portable C++).
  static uint64_t mul_64x64(uint64_t a, uint64_t b, uint64_t& high) {
    const uint64_t a0 = a & 0xffffffffu, a1 = a >> 32, b0 = b & 0xffffffffu, b1 = b >> 32;
    const uint64_t p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
    const uint64_t mid = (p00 >> 32) + (p01 & 0xffffffffu) + (p10 & 0xffffffffu);
    high = p11 + (p01 >> 32) + (p10 >> 32) + (mid >> 32);
    return (mid << 32) | (p00 & 0xffffffffu);
  }
  // One 64-bit draw scaled to [0, 1) (rounded to double, kept below 1).
  double canonical() {
    const double u = static_cast<double>(gen_()) * 0x1.0p-64;
    return u < 1.0 ? u : std::nextafter(1.0, 0.0);
  }
  std::mt19937_64 gen_;
};

}  // namespace seqtape
