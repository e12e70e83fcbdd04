// libFuzzer entry point; the body lives in fuzz_targets.cpp (shared with tests/faults/).
#include "fuzz/fuzz_targets.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  seqtape::fuzz::subword_input({reinterpret_cast<const char*>(data), size});
  return 0;
}
