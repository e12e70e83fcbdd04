// Quantized decoding (--compute-type int8, bf16; infer/quant.h): the products against a float64
// reference of the quantized values, the quantized model against the float32 one, and every
// row of a batch giving what it gives alone. ctest runs the int8 products on the AVX2 and
// portable paths too (SEQTAPE_ROWWISE_PATH).

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "infer/quant.h"
#include "infer/quant_kernels.h"
#include "infer/session.h"
#include "tensor/kernels.h"
#include "tensor/rng.h"
#include "tests/infer/wide_model.h"

namespace seqtape {
namespace {

using test_util::expect_each_alone;
using test_util::make_wide;
using test_util::varied_inputs;
using test_util::Wide;

std::vector<float> random_values(size_t n, uint32_t seed, float spread) {
  Rng rng(seed);  // the same values on every standard library
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(spread * rng.normal());
  return v;
}

// Shapes that take every block and tail of the kernels: outputs not a multiple of 4, inputs not
// a multiple of 64 (or 32), rows not a multiple of 4; the last is big enough to split its
// outputs over threads.
struct Shape3 {
  int64_t n, out, in;
};
const Shape3 kShapes[] = {{1, 1, 1}, {1, 7, 100}, {5, 37, 64}, {9, 130, 257}, {6, 300, 200}};

// y [N, Out] of x [N, In] and W [Out, In] (row-major) quantized as `t`.
std::vector<float> quant_product(ComputeType t, const std::vector<float>& w,
                                 const std::vector<float>& x, const Shape3& s,
                                 const kernels::RowwiseEpilogue& e = {}) {
  const QuantMatrix q = quantize(t, w.data(), s.out, s.in, s.in, 1);
  std::vector<float> y(size_t(s.n * s.out), NAN);
  quant_linear(q, x.data(), s.n, y.data(), e);
  return y;
}

TEST(QuantProduct, Int8IsTheExactIntegerProductOfTheQuantizedValues) {
  for (const Shape3& s : kShapes) {
    const auto w = random_values(size_t(s.out * s.in), 1, 0.3f);
    const auto x = random_values(size_t(s.n * s.in), 2, 2.f);
    const std::vector<float> y = quant_product(ComputeType::Int8, w, x, s);
    const QuantMatrix q = quantize(ComputeType::Int8, w.data(), s.out, s.in, s.in, 1);
    std::vector<int8_t> xq(size_t(q.ld));
    for (int64_t r = 0; r < s.n; ++r) {
      const float sx = quantize_row(x.data() + r * s.in, s.in, q.ld, xq.data());
      for (int64_t p = 0; p < s.in; ++p)  // rounded to nearest even, within [-127, 127]
        ASSERT_EQ(xq[size_t(p)], std::nearbyint(x[size_t(r * s.in + p)] * sx));
      for (int64_t j = 0; j < s.out; ++j) {
        double d = 0;  // exact: integers far below 2^53
        for (int64_t p = 0; p < s.in; ++p) d += double(xq[size_t(p)]) * double(q.q_at(j, p));
        const double want = d / (double(sx) * double(q.scale[size_t(j)]));
        // the kernel's float(d) / (sx·s_j): a few roundings of float32, no more
        EXPECT_NEAR(y[size_t(r * s.out + j)], want, 4 * FLT_EPSILON * std::fabs(want) + 1e-30)
            << s.n << "x" << s.out << "x" << s.in << " row " << r << " output " << j;
      }
    }
  }
}

// An input row's scale is 127 / max|x| wherever the largest value sits (in a vector block of
// the row or its tail), and its values round to nearest even, ties included.
TEST(QuantProduct, Int8RowScaleIsOfTheLargestMagnitudeAndTiesGoToEven) {
  for (int64_t in = 1; in <= 70; ++in)
    for (int64_t at = 0; at < in; ++at) {
      std::vector<float> x(static_cast<size_t>(in));
      for (int64_t p = 0; p < in; ++p) x[size_t(p)] = 0.25f * float((p * 37) % 11) - 1.25f;
      x[size_t(at)] = at % 2 ? -3.f : 3.f;
      std::vector<int8_t> q(size_t(in + 64), 99);
      ASSERT_EQ(quantize_row(x.data(), in, in + 64, q.data()), 127.f / 3.f) << in << " " << at;
      EXPECT_EQ(q[size_t(at)], at % 2 ? -127 : 127) << in << " " << at;
      EXPECT_EQ(q[size_t(in)], 0) << in;  // the padding
    }
  // Scale 1 (max|x| = 127), so x·s = x: the halves are ties.
  std::vector<float> x = {127.f, 0.5f, 1.5f, 2.5f, -0.5f, -1.5f, -2.5f, 126.5f, -126.5f};
  for (int i = 0; i < 24; ++i) x.push_back(float(i % 9) - 4.5f);
  std::vector<int8_t> q(x.size());
  ASSERT_EQ(quantize_row(x.data(), int64_t(x.size()), int64_t(x.size()), q.data()), 1.f);
  for (size_t p = 0; p < x.size(); ++p) EXPECT_EQ(q[p], std::nearbyint(x[p])) << p;
}

// A row that overflowed to Inf or NaN gives NaN outputs, as the float32 product would, and the
// other rows are untouched.
TEST(QuantProduct, Int8RowWithInfOrNanGivesNan) {
  const Shape3 s{3, 20, 70};
  const auto w = random_values(size_t(s.out * s.in), 8, 0.3f);
  auto x = random_values(size_t(s.n * s.in), 9, 2.f);
  const std::vector<float> clean = quant_product(ComputeType::Int8, w, x, s);
  x[5] = INFINITY;
  x[2 * s.in + 7] = NAN;
  const std::vector<float> y = quant_product(ComputeType::Int8, w, x, s);
  for (int64_t j = 0; j < s.out; ++j) {
    EXPECT_TRUE(std::isnan(y[size_t(j)])) << j;
    EXPECT_EQ(y[size_t(s.out + j)], clean[size_t(s.out + j)]) << j;
    EXPECT_TRUE(std::isnan(y[size_t(2 * s.out + j)])) << j;
  }
}

TEST(QuantProduct, Bf16RoundsToNearestEven) {
  EXPECT_EQ(to_bf16(1.f), 0x3f80);
  EXPECT_EQ(to_bf16(1.f + 0x1p-8f), 0x3f80);             // a tie: to the even 0x3f80
  EXPECT_EQ(to_bf16(1.f + 3 * 0x1p-8f), 0x3f82);         // a tie: to the even 0x3f82
  EXPECT_EQ(to_bf16(1.f + 0x1p-8f + 0x1p-20f), 0x3f81);  // above the tie: up
  EXPECT_EQ(to_bf16(-2.5f), 0xc020);
  EXPECT_TRUE(std::isnan(from_bf16(to_bf16(NAN))));
  EXPECT_EQ(from_bf16(to_bf16(INFINITY)), INFINITY);
}

TEST(QuantProduct, Bf16IsTheFloat32SumOfTheRoundedValues) {
  for (const Shape3& s : kShapes) {
    const auto w = random_values(size_t(s.out * s.in), 3, 0.3f);
    const auto x = random_values(size_t(s.n * s.in), 4, 2.f);
    const std::vector<float> y = quant_product(ComputeType::Bf16, w, x, s);
    for (int64_t r = 0; r < s.n; ++r)
      for (int64_t j = 0; j < s.out; ++j) {
        double want = 0, size = 0;
        for (int64_t p = 0; p < s.in; ++p) {
          const double t = double(from_bf16(to_bf16(x[size_t(r * s.in + p)]))) *
                           double(from_bf16(to_bf16(w[size_t(j * s.in + p)])));
          want += t;
          size += std::fabs(t);
        }
        // float32 sums of exact bf16 products: In roundings of at most half an ulp of the sum
        EXPECT_NEAR(y[size_t(r * s.out + j)], want, double(s.in) * FLT_EPSILON * size + 1e-30)
            << s.n << "x" << s.out << "x" << s.in << " row " << r << " output " << j;
      }
  }
}

// Against the float32 product of the unquantized values: the quantization error only (int8:
// half a step of x's and of W's scale per term; bf16: 2^-8 of each factor), and the bias and
// activation applied after it.
TEST(QuantProduct, BothStayWithinTheirQuantizationErrorOfTheFloatProduct) {
  const Shape3 s{3, 50, 96};
  const auto w = random_values(size_t(s.out * s.in), 5, 0.3f);
  const auto x = random_values(size_t(s.n * s.in), 6, 2.f);
  const auto bias = random_values(size_t(s.out), 7, 1.f);
  const kernels::RowwiseEpilogue relu{bias.data(), true, kernels::Act::Relu};
  for (ComputeType t : {ComputeType::Int8, ComputeType::Bf16}) {
    const std::vector<float> y = quant_product(t, w, x, s, relu);
    for (int64_t r = 0; r < s.n; ++r) {
      float xmax = 0;
      for (int64_t p = 0; p < s.in; ++p) xmax = std::max(xmax, std::fabs(x[size_t(r * s.in + p)]));
      for (int64_t j = 0; j < s.out; ++j) {
        float wmax = 0;
        double exact = bias[size_t(j)], bound = 0;
        for (int64_t p = 0; p < s.in; ++p) {
          const double a = x[size_t(r * s.in + p)], b = w[size_t(j * s.in + p)];
          wmax = std::max(wmax, float(std::fabs(b)));
          exact += a * b;
          bound += t == ComputeType::Bf16 ? std::fabs(a * b) * 2 * 0x1p-8 : 0;
        }
        if (t == ComputeType::Int8) {  // |e_x| <= xmax/254, |e_w| <= wmax/254 per term
          const double ex = xmax / 254.0, ew = wmax / 254.0;
          for (int64_t p = 0; p < s.in; ++p)
            bound += std::fabs(x[size_t(r * s.in + p)]) * ew +
                     std::fabs(w[size_t(j * s.in + p)]) * ex + ex * ew;
        }
        EXPECT_NEAR(y[size_t(r * s.out + j)], std::max(0.0, exact), bound + 1e-5)
            << to_string(t) << " row " << r << " output " << j;
      }
    }
  }
}

// The logits of the quantized model, teacher forced, within a small distance of the float32
// model's: every matrix (the embedding and the output projection too) is the one it quantizes.
TEST(QuantDecode, LogitsFollowTheFloatModel) {
  for (Arch arch : {Arch::Seq2Seq, Arch::DecoderOnly})
    for (ComputeType t : {ComputeType::Int8, ComputeType::Bf16}) {
      const Wide f = make_wide(arch, 3), q = make_wide(arch, 3, t);
      EXPECT_LT(q.m->weight_bytes() * 2, f.m->weight_bytes() * (t == ComputeType::Int8 ? 1 : 2));
      const auto in = varied_inputs(arch);
      const std::vector<int32_t> feed = {arch == Arch::Seq2Seq ? 1 : 3, 5, 6, 20, 31, 7};
      const std::vector<std::vector<int32_t>> src = {in[1]};
      const int64_t V = f.m->config().vocab_size, T = int64_t(feed.size());
      DecodeSession sf(*f.m), sq(*q.m);
      const std::vector<int32_t> rows = {0};
      sf.begin(arch == Arch::Seq2Seq ? src : std::vector<std::vector<int32_t>>{}, rows, 16);
      sq.begin(arch == Arch::Seq2Seq ? src : std::vector<std::vector<int32_t>>{}, rows, 16);
      const float* lf = sf.prefill(rows, {feed}, true);
      const float* lq = sq.prefill(rows, {feed}, true);
      double most = 0, spread = 0;
      for (int64_t i = 0; i < T * V; ++i) {
        most = std::max(most, std::fabs(double(lf[i]) - double(lq[i])));
        spread = std::max(spread, std::fabs(double(lf[i])));
      }
      const std::string tag =
          std::string(arch == Arch::Seq2Seq ? "seq2seq " : "decoder-only ") + to_string(t);
      EXPECT_GT(spread, 0.5) << tag;  // logits that say something
      EXPECT_LT(most, 0.05 * spread) << tag;
    }
}

TEST(QuantDecode, EveryRowGivesWhatItGivesAlone) {
  for (Arch arch : {Arch::Seq2Seq, Arch::DecoderOnly})
    for (ComputeType t : {ComputeType::Int8, ComputeType::Bf16}) {
      const Wide w = make_wide(arch, 4, t);
      GenerateOptions greedy;
      greedy.max_new = 16;
      GenerateOptions beam = greedy;
      beam.beam = 4;
      beam.n_best = 2;
      const std::string tag =
          std::string(arch == Arch::Seq2Seq ? "seq2seq " : "decoder-only ") + to_string(t);
      expect_each_alone(*w.m, varied_inputs(arch), greedy, tag + " greedy");
      expect_each_alone(*w.m, varied_inputs(arch), beam, tag + " beam");
    }
}

TEST(QuantDecode, ComputeTypesParseAndResolve) {
  EXPECT_EQ(parse_compute_type("int8"), ComputeType::Int8);
  EXPECT_EQ(parse_compute_type("bf16"), ComputeType::Bf16);
  EXPECT_EQ(parse_compute_type("auto"), ComputeType::Auto);
  EXPECT_FALSE(parse_compute_type("fp16"));
  const ComputeType chosen = resolve_compute_type(ComputeType::Auto);
  EXPECT_EQ(chosen, quant_kernels::int8_path() == quant_kernels::Int8Path::Vnni ? ComputeType::Int8
                                                                                : ComputeType::F32);
  for (ComputeType t : {ComputeType::Int8, ComputeType::Bf16}) {
    if (compute_type_missing(t).empty()) {
      EXPECT_EQ(resolve_compute_type(t), t);
    } else {
      EXPECT_THROW(resolve_compute_type(t), Error) << to_string(t);
    }
  }
}

}  // namespace
}  // namespace seqtape
