#include "tensor/cpu_path.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>

namespace seqtape::kernels {

bool cpu_has(CpuPath p) {
#if defined(__x86_64__)
  if (p == CpuPath::Avx512) return __builtin_cpu_supports("avx512f");
  if (p == CpuPath::Avx2) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
  return p == CpuPath::Portable;
}

CpuPath cpu_path() {
  static const CpuPath p = [] {
    CpuPath best = cpu_has(CpuPath::Avx512) ? CpuPath::Avx512
                   : cpu_has(CpuPath::Avx2) ? CpuPath::Avx2
                                            : CpuPath::Portable;
    const char* want = std::getenv("SEQTAPE_ROWWISE_PATH");
    if (want && std::strcmp(want, "avx2") == 0) best = std::min(best, CpuPath::Avx2);
    if (want && std::strcmp(want, "portable") == 0) best = CpuPath::Portable;
    return best;
  }();
  return p;
}

const char* cpu_path_name(CpuPath p) {
  switch (p) {
    case CpuPath::Avx512:
      return "avx512";
    case CpuPath::Avx2:
      return "avx2";
    case CpuPath::Portable:
      break;
  }
  return "portable";
}

}  // namespace seqtape::kernels
