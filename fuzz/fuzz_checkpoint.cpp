// libFuzzer entry point; the body lives in fuzz_targets.cpp (shared with tests/faults/).
#include "fuzz/fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  seqtape::fuzz::checkpoint_input({reinterpret_cast<const char*>(data), size});
  return 0;
}

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

// Three mutations in four get a matching length and checksum, so the fuzzer explores the
// payload decoder behind the envelope (a crafted file can carry a valid checksum); the fourth
// keeps exercising the envelope checks themselves.
extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size,
                                          unsigned int seed) {
  size = LLVMFuzzerMutate(data, size, max_size);
  if (seed % 4 != 0) seqtape::fuzz::reseal_envelope(data, size);
  return size;
}
