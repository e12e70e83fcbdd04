#include "tensor/cpu_path.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <string>

namespace seqtape::kernels {

bool cpu_has(CpuPath p) {
#if defined(__x86_64__)
  if (p == CpuPath::Avx512) return __builtin_cpu_supports("avx512f");
  if (p == CpuPath::Avx2) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
  return p == CpuPath::Portable;
}

namespace {

// The cap one of seqtape's variables asks for: avx2 or portable (anything else: none).
CpuPath seqtape_cap(const char* want) {
  if (want && std::strcmp(want, "avx2") == 0) return CpuPath::Avx2;
  if (want && std::strcmp(want, "portable") == 0) return CpuPath::Portable;
  return CpuPath::Avx512;
}

}  // namespace

CpuPath isa_cap(const char* seqtape_isa, const char* onednn_isa) {
  CpuPath cap = seqtape_cap(seqtape_isa);
  if (onednn_isa) {
    std::string isa(onednn_isa);
    for (char& c : isa) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    // oneDNN's names below AVX2 lack the FMA that the AVX2 path needs: portable then.
    if (isa == "sse41" || isa == "avx") cap = CpuPath::Portable;
    if (isa.rfind("avx2", 0) == 0) cap = std::min(cap, CpuPath::Avx2);
  }
  return cap;
}

CpuPath cpu_path() {
  static const CpuPath p = [] {
    const CpuPath best = cpu_has(CpuPath::Avx512) ? CpuPath::Avx512
                         : cpu_has(CpuPath::Avx2) ? CpuPath::Avx2
                                                  : CpuPath::Portable;
    const char* onednn = std::getenv("ONEDNN_MAX_CPU_ISA");
    if (!onednn) onednn = std::getenv("DNNL_MAX_CPU_ISA");
    return std::min({best, isa_cap(std::getenv("SEQTAPE_ISA"), onednn),
                     seqtape_cap(std::getenv("SEQTAPE_ROWWISE_PATH"))});
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
