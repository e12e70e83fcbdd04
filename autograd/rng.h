#pragma once
// A seeded random generator whose whole state can be saved and restored as text, so that
// a resumed training run draws exactly the numbers an uninterrupted one would.

#include <cstdint>
#include <random>
#include <sstream>
#include <string>

namespace seqtape {

class Rng {
 public:
  explicit Rng(uint64_t seed = 0) : gen_(seed) {}
  void seed(uint64_t s) { gen_.seed(s); }
  uint64_t next_u64() { return gen_(); }
  // Uniform in [0, 1) with 53 random bits.
  double uniform() { return static_cast<double>(gen_() >> 11) * 0x1.0p-53; }
  // Uniform integer in [0, n).
  uint64_t below(uint64_t n) {
    return n == 0 ? 0 : std::uniform_int_distribution<uint64_t>(0, n - 1)(gen_);
  }
  double normal() { return std::normal_distribution<double>(0.0, 1.0)(gen_); }

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
  std::mt19937_64 gen_;
};

}  // namespace seqtape
