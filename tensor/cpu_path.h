#pragma once
// The vector path of the project's own kernels (gemm_nt_rowwise, the small products, the exp,
// the int8 and bf16 products of infer/quant_kernels): the widest this CPU has (AVX-512, AVX2 +
// FMA, or portable C++), chosen once per process, or a narrower one that the environment asks
// for, so that one machine runs (and benchmarks) every path:
//   SEQTAPE_ISA=avx2|portable (SEQTAPE_ROWWISE_PATH, its older name, too);
//   ONEDNN_MAX_CPU_ISA (or DNNL_MAX_CPU_ISA), oneDNN's own cap: AVX2 or AVX2_VNNI caps at avx2,
//   SSE41 or AVX at portable, so a run that keeps oneDNN off AVX-512 keeps seqtape off it too.
// The narrowest of them wins; a wider path than the CPU has is never taken.

namespace seqtape::kernels {

enum class CpuPath { Portable, Avx2, Avx512 };

// The widest path the variables' values allow (either may be null): SEQTAPE_ISA's and
// ONEDNN_MAX_CPU_ISA's (case-insensitive), as cpu_path() reads them; Avx512 when neither caps.
CpuPath isa_cap(const char* seqtape_isa, const char* onednn_isa);
// Whether this CPU (and this build) can run path p.
bool cpu_has(CpuPath p);
// The path of this process.
CpuPath cpu_path();
// "avx512", "avx2" or "portable".
const char* cpu_path_name(CpuPath p);

}  // namespace seqtape::kernels

// Calls the kernel of this process's path: avx512::name or avx2::name (the namespaces a kernel
// file compiles its vector paths into, on x86-64) or `portable`, with the same arguments.
#if defined(__x86_64__)
#define SEQTAPE_ON_PATH(name, portable, ...)                                                       \
  (::seqtape::kernels::cpu_path() == ::seqtape::kernels::CpuPath::Avx512                           \
       ? avx512::name(__VA_ARGS__)                                                                 \
   : ::seqtape::kernels::cpu_path() == ::seqtape::kernels::CpuPath::Avx2 ? avx2::name(__VA_ARGS__) \
                                                                         : portable(__VA_ARGS__))
#else
#define SEQTAPE_ON_PATH(name, portable, ...) portable(__VA_ARGS__)
#endif
