#include "model/memory_budget.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>

#include "model/blocks.h"

namespace seqtape {

namespace {

std::atomic<uint64_t> g_test_limit{0};

// Saturating arithmetic: configurations are bounded, but products of several bounds still
// exceed 64 bits.
uint64_t sat_mul(uint64_t a, uint64_t b) {
  if (a != 0 && b > std::numeric_limits<uint64_t>::max() / a)
    return std::numeric_limits<uint64_t>::max();
  return a * b;
}
uint64_t sat_add(uint64_t a, uint64_t b) {
  return a > std::numeric_limits<uint64_t>::max() - b ? std::numeric_limits<uint64_t>::max()
                                                      : a + b;
}
uint64_t u(int64_t v) {
  return v < 0 ? 0 : static_cast<uint64_t>(v);
}
uint64_t prod(std::initializer_list<uint64_t> xs) {
  uint64_t p = 1;
  for (uint64_t x : xs) p = sat_mul(p, x);
  return p;
}

// kB value of `key` in /proc/meminfo, or 0.
uint64_t meminfo_kb(const std::string& key) {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) != 0) continue;
    std::istringstream is(line.substr(key.size() + 1));
    uint64_t kb = 0;
    is >> kb;
    return kb;
  }
  return 0;
}

// Address space in use by this process (VmSize), in bytes.
uint64_t address_space_in_use() {
  std::ifstream in("/proc/self/statm");
  uint64_t pages = 0;
  in >> pages;
  return sat_mul(pages, static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)));
}

}  // namespace

namespace {

// Scalars in a list of parameters.
uint64_t numel(const std::vector<ParamSpec>& specs) {
  uint64_t n = 0;
  for (const ParamSpec& p : specs) {
    uint64_t e = 1;
    for (int64_t d : p.shape) e = sat_mul(e, u(d));
    n = sat_add(n, e);
  }
  return n;
}

}  // namespace

// The embedding, positions and output projection, plus every part model_blocks() lists.
uint64_t parameter_count(const ModelConfig& c) {
  const uint64_t C = u(c.d_model), V = u(c.vocab_size), P = u(c.max_positions);
  const uint64_t norm = numel(norm_params(c));
  uint64_t n = prod({V, C});  // embedding
  if (c.pos_encoding == PosEncoding::Learned) n = sat_add(n, prod({P, C}));
  for (const StackDesc& stack : model_blocks(c).stacks) {
    for (const LayerDesc& layer : stack.layers)
      for (const SublayerDesc& sub : layer.sublayers)
        n = sat_add(n, sat_add(numel(sublayer_params(c, sub.kind)), sub.norm.empty() ? 0 : norm));
    if (!stack.final_norm.empty()) n = sat_add(n, norm);
  }
  if (!c.tie_output) n = sat_add(n, prod({C, V}));
  return sat_add(n, V);  // output bias
}

MemoryNeed training_memory(const ModelConfig& c, int64_t batch, int64_t length,
                           uint64_t state_bytes_per_parameter, const std::string& state_noun) {
  const uint64_t C = u(c.d_model), F = u(c.d_ff), V = u(c.vocab_size), H = u(c.n_heads);
  const uint64_t T = std::max<uint64_t>(1, u(length)), B = std::max<uint64_t>(1, u(batch));
  const uint64_t tokens = sat_mul(B, T);
  const uint64_t layers = u(c.n_encoder_layers) + u(c.n_decoder_layers);
  // Per token and layer the tape keeps at least q, k, v, the attention output, two residual
  // sums and the feed-forward hidden layer, plus H·T attention weights.
  const uint64_t per_token_layer = sat_add(sat_add(6 * C, F), sat_mul(H, T));
  uint64_t floats = prod({2, parameter_count(c)});  // values, gradients
  floats = sat_add(floats, prod({tokens, layers, per_token_layer}));
  floats = sat_add(floats, prod({2, tokens, V}));  // logits and their softmax
  if (c.pos_encoding == PosEncoding::Sinusoidal)
    floats = sat_add(floats, prod({u(c.max_positions), C}));
  const uint64_t bytes =
      sat_add(sat_mul(floats, 4), sat_mul(state_bytes_per_parameter, parameter_count(c)));
  const std::string what = state_noun.empty()
                               ? "parameters, gradients and activations"
                               : "parameters, gradients, " + state_noun + " and activations";
  return {bytes, what + " (batch " + std::to_string(B) + ", length " + std::to_string(T) + ")"};
}

MemoryNeed decoding_memory(const ModelConfig& c, int64_t rows, int64_t source_length,
                           int64_t length, const char* rows_are) {
  const uint64_t C = u(c.d_model), V = u(c.vocab_size);
  const uint64_t K = std::max<uint64_t>(1, u(rows)), T = std::max<uint64_t>(1, u(length));
  const uint64_t S = u(source_length);
  uint64_t floats = prod({2, parameter_count(c)});  // as loaded, and as float32
  floats = sat_add(floats, prod({u(c.n_decoder_layers), K, T, 2 * C}));  // self-attention K/V
  floats = sat_add(floats, prod({u(c.n_decoder_layers), S, 2 * C}));     // cross-attention K/V
  floats = sat_add(floats, prod({K, V, 2}));                             // logits per row
  if (c.pos_encoding == PosEncoding::Sinusoidal)
    floats = sat_add(floats, prod({u(c.max_positions), C}));
  return {sat_mul(floats, 4), "the weights and a KV cache of " + std::to_string(K) + " " +
                                  rows_are + " x " + std::to_string(T) + " positions"};
}

uint64_t available_memory(std::string* source) {
  uint64_t best = std::numeric_limits<uint64_t>::max();
  std::string src = "unknown";
  if (const uint64_t kb = meminfo_kb("MemAvailable"); kb > 0) {
    best = sat_mul(kb, 1024);
    src = "MemAvailable in /proc/meminfo";
  }
  rlimit rl{};
  if (::getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    const uint64_t used = address_space_in_use();
    const uint64_t left = rl.rlim_cur > used ? rl.rlim_cur - used : 0;
    if (left < best) {
      best = left;
      src = "address-space limit RLIMIT_AS (ulimit -v)";
    }
  }
  if (const uint64_t t = g_test_limit.load(); t != 0 && t < best) {
    best = t;
    src = "test limit";
  }
  if (source) *source = src;
  return best;
}

void check_memory_budget(const MemoryNeed& need, const std::string& doing) {
  std::string source;
  const uint64_t avail = available_memory(&source);
  if (need.bytes <= avail) return;
  fail(doing, "too large for this machine: needs " + format_bytes(need.bytes) + " for " +
                  need.what + "; " + format_bytes(avail) + " available (" + source + ")");
}

std::string format_bytes(uint64_t bytes) {
  char buf[64];
  const double b = static_cast<double>(bytes);
  if (bytes == std::numeric_limits<uint64_t>::max())
    std::snprintf(buf, sizeof buf, "more than 16 EiB");
  else if (b >= 0x1p40)
    std::snprintf(buf, sizeof buf, "%.1f TiB", b / 0x1p40);
  else if (b >= 0x1p30)
    std::snprintf(buf, sizeof buf, "%.1f GiB", b / 0x1p30);
  else if (b >= 0x1p20)
    std::snprintf(buf, sizeof buf, "%.1f MiB", b / 0x1p20);
  else
    std::snprintf(buf, sizeof buf, "%llu bytes", static_cast<unsigned long long>(bytes));
  return buf;
}

void set_memory_limit_for_testing(uint64_t bytes) {
  g_test_limit = bytes;
}

}  // namespace seqtape
