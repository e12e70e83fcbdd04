// The non-BLAS ops split over the pool's threads when big enough (kernels::parallel_range): the
// same bits on 1 and 2 threads, forward and backward, for the row-split ops (layer norm, fused
// residual + layer norm with and without dropout, softmax, log-softmax, cross-entropy,
// attention's softmax, the embedding's rows), the fused residual dropout, attention's
// head products (kernels::gemm_small_batched: each head on one thread) and dropout, the
// elementwise ops and activations, and the sums over rows split by columns (bias gradients, the
// embedding's gradient) or into fixed blocks (layer norm's dγ and dβ, sum_squares).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "autograd/ops.h"
#include "tensor/kernels.h"
#include "tensor/kernels_small_gemm.h"

namespace seqtape {
namespace {

// Big enough that every op below is split on 2 threads (checked in the test).
constexpr int64_t B = 8, T = 64, C = 128, H = 4, R = B * T;

Tensor randn(Shape s, uint64_t seed) {
  Rng r(seed);
  Tensor t = Tensor::empty(std::move(s), DType::F32);
  for (int64_t i = 0; i < t.numel(); ++i) t.set(i, r.normal());
  return t;
}

// One forward and backward through every threaded op; the loss, then every leaf's gradient.
std::vector<float> run_graph() {
  Tape::current().clear();
  Var x(randn({R, C}, 1), true), res(randn({R, C}, 2), true), gamma(randn({C}, 3), true),
      beta(randn({C}, 4), true), w(randn({C, C}, 5), true), b(randn({C}, 6), true),
      emb(randn({61, C}, 8), true);
  const Var wt(randn({R, C}, 7), false);
  Rng drop(9);
  // rows of an embedding, a repeated id among them (its gradient rows summed, split by columns)
  std::vector<int32_t> ids(static_cast<size_t>(R));
  for (int64_t i = 0; i < R; ++i) ids[size_t(i)] = int32_t(i * 7 % 61);
  Var e = embedding(emb, ids, {R});
  // residual dropout fused into the adds
  Var h = add_layer_norm(add_dropout(x, e, 0.1, &drop), res, gamma, beta, 1e-5, 0.1, &drop);
  Var a = affine(h, w, b);                // bias: a sum over rows, split by columns
  Var t = mul(add(gelu(a), b), tanh(x));  // broadcast bias, same-shape product
  Var ln = layer_norm(sub(t, exp(mul(h, 0.1))), gamma, beta);
  Var dr = dropout(ln, 0.1, true, drop);
  auto heads = [](const Var& v) { return reshape(v, {B, T, C}); };
  const Mask causal = Mask::causal(T);
  // with dropout on the weights (its passes split over the rows)
  Var att = attention(heads(dr), heads(h), heads(t), H, &causal, nullptr, 0.1, &drop);
  std::vector<int32_t> targets(static_cast<size_t>(R));
  for (int64_t i = 0; i < R; ++i) targets[size_t(i)] = i % 7 == 0 ? -100 : int32_t(i * 31 % C);
  CrossEntropyOptions ce;
  ce.ignore_index = -100;
  ce.label_smoothing = 0.1;
  Var loss = add(add(sum(mul(softmax(ln), wt)), sum(mul(log_softmax(dr), wt))),
                 add(sum(mul(reshape(att, {R, C}), wt)), cross_entropy(relu(ln), targets, ce)));
  Tape::current().backward(loss);
  std::vector<float> out{loss.value().data<float>()[0]};
  for (const Var* v : {&x, &res, &gamma, &beta, &w, &b, &emb}) {
    const float* g = v->grad().data<float>();
    out.insert(out.end(), g, g + v->numel());
  }
  Tape::current().clear();
  return out;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(ParallelOps, TheSizesHereAreSplitOnTwoThreads) {
  kernels::gemm_nt_rowwise_set_threads(2);
  EXPECT_GT(kernels::parallel_range_chunks(R, C * kernels::kCostSimple), 1);  // bias-like rows
  EXPECT_GT(kernels::parallel_range_chunks(C, R * kernels::kCostSimple), 1);  // column sums
  EXPECT_GT(kernels::parallel_range_chunks(C / 16, R * 16 * kernels::kCostSimple), 1);  // dW_emb
  EXPECT_GT(kernels::parallel_range_chunks(B * H * T, T * kernels::kCostTranscendental), 1);
  EXPECT_TRUE(kernels::gemm_small_takes(T, T, C / H));  // attention's heads, B·H of them
  EXPECT_GT(kernels::parallel_range_chunks(B * H, T * T * (C / H) / 16 * kernels::kCostSimple), 1);
  kernels::gemm_nt_rowwise_set_threads(1);
  EXPECT_EQ(kernels::parallel_range_chunks(R, C * kernels::kCostSimple), 1);
  kernels::gemm_nt_rowwise_set_threads(0);
}

TEST(ParallelOps, ForwardAndBackwardGiveTheSameBitsOnOneAndTwoThreads) {
  kernels::gemm_nt_rowwise_set_threads(1);
  const std::vector<float> one = run_graph();
  kernels::gemm_nt_rowwise_set_threads(2);
  for (int rep = 0; rep < 3; ++rep) EXPECT_TRUE(same_bits(run_graph(), one)) << "run " << rep;
  kernels::gemm_nt_rowwise_set_threads(0);
  for (float f : one) ASSERT_TRUE(std::isfinite(f));
}

// sum_squares: the same bits on 1 and 2 threads as one loop over blocks of 256 (each summed in
// float, in double across them), also with a block that overflows float.
TEST(ParallelOps, SumSquaresIsTheBlockwiseSumInOrderOnAnyThreads) {
  const int64_t n = 1000003;
  std::vector<float> x(static_cast<size_t>(n));
  Rng r(11);
  for (float& v : x) v = static_cast<float>(r.normal());
  x[777] = 3e30f;
  double want = 0;
  for (int64_t i = 0; i < n; i += 256) {
    float block = 0;
    const int64_t e = std::min(n, i + 256);
    for (int64_t j = i; j < e; ++j) block += x[size_t(j)] * x[size_t(j)];
    if (!std::isfinite(block)) {
      double d = 0;
      for (int64_t j = i; j < e; ++j) d += double(x[size_t(j)]) * double(x[size_t(j)]);
      want += d;
    } else {
      want += double(block);
    }
  }
  for (int threads : {1, 2}) {
    kernels::gemm_nt_rowwise_set_threads(threads);
    const double got = kernels::sum_squares<float>(x.data(), n);
    EXPECT_EQ(std::memcmp(&got, &want, sizeof got), 0) << threads << " threads: " << got;
  }
  kernels::gemm_nt_rowwise_set_threads(0);
}

}  // namespace
}  // namespace seqtape
