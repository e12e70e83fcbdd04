#include "model/sinusoidal.h"

#include <cmath>
#include <cstdint>
#include <string>

namespace seqtape {

Tensor sinusoidal_table(int64_t positions, int64_t d, double base, DType dtype) {
  // Positions and columns are int below (and int32 token positions everywhere).
  if (positions < 0 || positions > INT32_MAX || d < 1 || d > INT32_MAX || !(base > 1.0))
    fail("sinusoidal_table", "need positions >= 0, d >= 1, base > 1 (got " +
                                 std::to_string(positions) + ", " + std::to_string(d) + ", " +
                                 std::to_string(base) + ")");
  Tensor t(Shape{positions, d}, dtype);  // [P, C]
  dispatch(dtype, [&](auto zero) {
    using T = decltype(zero);
    T* p = t.data<T>();
    for (int64_t pos = 0; pos < positions; ++pos) {
      for (int64_t j = 0; j < d; ++j) {
        const int64_t two_i = j - (j % 2);  // 2i for both members of the (sin, cos) pair
        const double angle = static_cast<double>(pos) /
                             std::pow(base, static_cast<double>(two_i) / static_cast<double>(d));
        p[pos * d + j] = static_cast<T>(j % 2 == 0 ? std::sin(angle) : std::cos(angle));
      }
    }
  });
  return t;
}

}  // namespace seqtape
