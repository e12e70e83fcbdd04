// The mask words many Philox blocks at a time: the blocks are independent, so each round runs
// over all lanes at once and vectorizes (32×32→64-bit multiplies), where one block at a time
// stays scalar and costs more than the memory pass that dropout is.
#include "autograd/philox.h"

namespace seqtape::philox {

namespace {

constexpr int kLanes = 16;

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SEQTAPE_PHILOX_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define SEQTAPE_PHILOX_CLONES
#endif

// kLanes blocks from first_block into out (block l's words at out[4l .. 4l+3]).
SEQTAPE_PHILOX_CLONES void lanes(uint64_t first_block, uint32_t k0_in, uint32_t k1_in,
                                 uint32_t* __restrict out) {
  constexpr uint64_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  uint32_t c0[kLanes], c1[kLanes], c2[kLanes], c3[kLanes];
  for (int l = 0; l < kLanes; ++l) {
    const uint64_t b = first_block + uint64_t(l);
    c0[l] = uint32_t(b), c1[l] = uint32_t(b >> 32), c2[l] = 0, c3[l] = 0;
  }
  uint32_t k0 = k0_in, k1 = k1_in;
  for (int round = 0; round < 10; ++round) {
    for (int l = 0; l < kLanes; ++l) {
      const uint64_t p0 = kM0 * c0[l], p1 = kM1 * c2[l];
      const uint32_t n0 = uint32_t(p1 >> 32) ^ c1[l] ^ k0, n2 = uint32_t(p0 >> 32) ^ c3[l] ^ k1;
      c0[l] = n0, c1[l] = uint32_t(p1), c2[l] = n2, c3[l] = uint32_t(p0);
    }
    k0 += kW0;
    k1 += kW1;
  }
  for (int l = 0; l < kLanes; ++l)
    out[4 * l] = c0[l], out[4 * l + 1] = c1[l], out[4 * l + 2] = c2[l], out[4 * l + 3] = c3[l];
}

}  // namespace

void DropoutMask::words(uint64_t first_block, int64_t blocks, uint32_t* out) const {
  const uint32_t k0 = uint32_t(key), k1 = uint32_t(key >> 32);
  int64_t b = 0;
  for (; b + kLanes <= blocks; b += kLanes) lanes(first_block + uint64_t(b), k0, k1, out + 4 * b);
  for (; b < blocks; ++b) {
    const Block w = block4x32_10(
        {uint32_t(first_block + uint64_t(b)), uint32_t((first_block + uint64_t(b)) >> 32), 0, 0},
        k0, k1);
    for (int j = 0; j < 4; ++j) out[4 * b + j] = w[size_t(j)];
  }
}

}  // namespace seqtape::philox
