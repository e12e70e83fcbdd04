#pragma once
// The vector path of the project's own float kernels (gemm_nt_rowwise, the small products, the
// exp): the widest this CPU has (AVX-512, AVX2 + FMA, or portable C++), chosen once per process,
// or a narrower one that SEQTAPE_ROWWISE_PATH=avx2 or =portable asks for (the tests run every
// path on one machine). A wider one than the CPU has is never taken.

namespace seqtape::kernels {

enum class CpuPath { Portable, Avx2, Avx512 };

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
