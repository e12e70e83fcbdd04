#include "nn/sinusoidal.h"

#include <cmath>
#include <string>

namespace seqtape {

Tensor sinusoidal_table(int positions, int d, double base, DType dtype) {
  if (positions < 0 || d < 1 || !(base > 1.0))
    fail("sinusoidal_table", "need positions >= 0, d >= 1, base > 1 (got " +
                                 std::to_string(positions) + ", " + std::to_string(d) + ", " +
                                 std::to_string(base) + ")");
  Tensor t(Shape{positions, d}, dtype);  // [P, C]
  dispatch(dtype, [&](auto zero) {
    using T = decltype(zero);
    T* p = t.data<T>();
    for (int pos = 0; pos < positions; ++pos) {
      for (int j = 0; j < d; ++j) {
        const int two_i = j - (j % 2);  // 2i for both members of the (sin, cos) pair
        const double angle = pos / std::pow(base, static_cast<double>(two_i) / d);
        p[static_cast<int64_t>(pos) * d + j] =
            static_cast<T>(j % 2 == 0 ? std::sin(angle) : std::cos(angle));
      }
    }
  });
  return t;
}

}  // namespace seqtape
