// The environment's cap on the kernels' vector path (tensor/cpu_path.h): SEQTAPE_ISA's values and
// oneDNN's ONEDNN_MAX_CPU_ISA names, as isa_cap maps them. (That a process follows them is
// ComputeTypeCli.ForcedAvx2DecodesWhatTheDefaultPathDecodes, in tests/faults.)
#include <gtest/gtest.h>

#include "tensor/cpu_path.h"

namespace k = seqtape::kernels;

TEST(CpuPath, IsaCapReadsSeqtapeIsaAndOneDnnsMaxCpuIsa) {
  using P = k::CpuPath;
  EXPECT_EQ(k::isa_cap(nullptr, nullptr), P::Avx512);
  EXPECT_EQ(k::isa_cap("avx2", nullptr), P::Avx2);
  EXPECT_EQ(k::isa_cap("portable", nullptr), P::Portable);
  EXPECT_EQ(k::isa_cap("avx512", nullptr), P::Avx512);  // no cap: the widest the CPU has
  // oneDNN's names, in any case: AVX2 and AVX2_VNNI cap at avx2, the ones below at portable
  // (no FMA), AVX-512's and ALL leave the path alone.
  EXPECT_EQ(k::isa_cap(nullptr, "AVX2"), P::Avx2);
  EXPECT_EQ(k::isa_cap(nullptr, "avx2_vnni"), P::Avx2);
  EXPECT_EQ(k::isa_cap(nullptr, "SSE41"), P::Portable);
  EXPECT_EQ(k::isa_cap(nullptr, "AVX"), P::Portable);
  EXPECT_EQ(k::isa_cap(nullptr, "AVX512_CORE"), P::Avx512);
  EXPECT_EQ(k::isa_cap(nullptr, "AVX512_CORE_BF16"), P::Avx512);
  EXPECT_EQ(k::isa_cap(nullptr, "ALL"), P::Avx512);
  // Both given: the narrower.
  EXPECT_EQ(k::isa_cap("portable", "AVX2"), P::Portable);
  EXPECT_EQ(k::isa_cap("avx2", "ALL"), P::Avx2);
  EXPECT_EQ(k::isa_cap(nullptr, "SSE41"), k::isa_cap("portable", "AVX512_CORE"));
}
