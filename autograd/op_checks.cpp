#include "autograd/op_checks.h"

#include <cmath>
#include <limits>

#include "autograd/ops.h"

namespace seqtape {

namespace {

// Uniform values in [lo, hi); with `away` > 0, values closer than that to 0 are pushed
// out, keeping inputs away from the kinks of relu and the poles of div/log.
Tensor rand_t(Rng& rng, Shape s, double lo = -1, double hi = 1, double away = 0) {
  Tensor t = Tensor::empty(std::move(s), DType::F64);
  for (int64_t i = 0; i < t.numel(); ++i) {
    double v = lo + (hi - lo) * rng.uniform();
    if (away > 0 && std::abs(v) < away) v = v < 0 ? v - away : v + away;
    t.set(i, v);
  }
  return t;
}

std::string shapes(std::initializer_list<Shape> ss) {
  std::string s;
  for (const auto& x : ss) s += (s.empty() ? "" : " ") + shape_str(x);
  return s;
}

}  // namespace

std::vector<OpCheck> op_checks(uint64_t seed) {
  Rng rng(seed);
  std::vector<OpCheck> c;
  auto add_case = [&](std::string op, std::string cs, GradFn fn, std::vector<Tensor> in) {
    c.push_back(OpCheck{std::move(op), std::move(cs), std::move(fn), std::move(in)});
  };

  // matmul: every transpose combination, batched, and a 2-D B shared by a batch.
  struct Mm {
    Shape a, b;
    bool ta, tb;
  };
  for (const Mm& m : std::vector<Mm>{{{3, 4}, {4, 5}, false, false},
                                     {{4, 3}, {4, 5}, true, false},
                                     {{3, 4}, {5, 4}, false, true},
                                     {{4, 3}, {5, 4}, true, true},
                                     {{2, 3, 4}, {2, 4, 2}, false, false},
                                     {{2, 2, 3, 4}, {2, 2, 5, 4}, false, true},
                                     {{2, 4, 3}, {2, 4, 5}, true, false},
                                     {{2, 3, 4}, {4, 5}, false, false},
                                     {{2, 4, 3}, {5, 4}, true, true},
                                     {{1, 1}, {1, 1}, false, false}}) {
    std::string cs = shapes({m.a, m.b}) + (m.ta ? " ta" : "") + (m.tb ? " tb" : "");
    bool ta = m.ta, tb = m.tb;
    add_case("matmul", cs,
             [ta, tb](const std::vector<Var>& v) { return matmul(v[0], v[1], ta, tb); },
             {rand_t(rng, m.a), rand_t(rng, m.b)});
  }

  // affine: x·W + b fused, with and without bias, transposed weight, batched rows
  add_case("affine", "x[2,3,4] W[4,5] b[5]",
           [](const std::vector<Var>& v) { return affine(v[0], v[1], v[2]); },
           {rand_t(rng, {2, 3, 4}), rand_t(rng, {4, 5}), rand_t(rng, {5})});
  add_case("affine", "x[3,4] Wᵀ[5,4] b[5]",
           [](const std::vector<Var>& v) { return affine(v[0], v[1], v[2], true); },
           {rand_t(rng, {3, 4}), rand_t(rng, {5, 4}), rand_t(rng, {5})});
  add_case("affine", "x[3,4] W[4,2] no bias",
           [](const std::vector<Var>& v) { return affine(v[0], v[1], Var()); },
           {rand_t(rng, {3, 4}), rand_t(rng, {4, 2})});

  // binary elementwise with broadcasting
  struct Bin {
    Shape a, b;
  };
  const std::vector<Bin> bins = {
      {{3, 4}, {3, 4}}, {{2, 3, 4}, {4}}, {{3, 1}, {1, 4}}, {{2, 1, 3}, {2, 4, 1}}, {{}, {2, 3}}};
  for (const Bin& b : bins) {
    std::string cs = shapes({b.a, b.b});
    add_case("add", cs, [](const std::vector<Var>& v) { return add(v[0], v[1]); },
             {rand_t(rng, b.a), rand_t(rng, b.b)});
    add_case("sub", cs, [](const std::vector<Var>& v) { return sub(v[0], v[1]); },
             {rand_t(rng, b.a), rand_t(rng, b.b)});
    add_case("mul", cs, [](const std::vector<Var>& v) { return mul(v[0], v[1]); },
             {rand_t(rng, b.a), rand_t(rng, b.b)});
    add_case("div", cs, [](const std::vector<Var>& v) { return div(v[0], v[1]); },
             {rand_t(rng, b.a), rand_t(rng, b.b, 0.5, 2.0)});
  }
  add_case("add_scalar", "[3,4] + 0.7", [](const std::vector<Var>& v) { return add(v[0], 0.7); },
           {rand_t(rng, {3, 4})});
  add_case("mul_scalar", "[3,4] * -1.3", [](const std::vector<Var>& v) { return mul(v[0], -1.3); },
           {rand_t(rng, {3, 4})});
  add_case("rsub_scalar", "2 - [5]", [](const std::vector<Var>& v) { return rsub(2.0, v[0]); },
           {rand_t(rng, {5})});
  add_case("add", "a + a (same value twice)",
           [](const std::vector<Var>& v) { return add(v[0], v[0]); }, {rand_t(rng, {2, 3})});

  // unary
  for (Shape s : {Shape{7}, Shape{2, 3, 4}}) {
    std::string cs = shape_str(s);
    add_case("neg", cs, [](const std::vector<Var>& v) { return neg(v[0]); }, {rand_t(rng, s)});
    add_case("exp", cs, [](const std::vector<Var>& v) { return exp(v[0]); },
             {rand_t(rng, s, -2, 2)});
    add_case("log", cs, [](const std::vector<Var>& v) { return log(v[0]); },
             {rand_t(rng, s, 0.3, 3)});
    add_case("sqrt", cs, [](const std::vector<Var>& v) { return sqrt(v[0]); },
             {rand_t(rng, s, 0.3, 3)});
    add_case("tanh", cs, [](const std::vector<Var>& v) { return tanh(v[0]); },
             {rand_t(rng, s, -2, 2)});
    add_case("relu", cs, [](const std::vector<Var>& v) { return relu(v[0]); },
             {rand_t(rng, s, -1, 1, 0.05)});
    add_case("gelu", cs, [](const std::vector<Var>& v) { return gelu(v[0]); },
             {rand_t(rng, s, -3, 3)});
  }

  // reductions
  add_case("sum", "[3,4] all", [](const std::vector<Var>& v) { return sum(v[0]); },
           {rand_t(rng, {3, 4})});
  add_case("sum", "[2,3,4] axis 1", [](const std::vector<Var>& v) { return sum(v[0], 1); },
           {rand_t(rng, {2, 3, 4})});
  add_case("sum", "[2,3,4] axis -1 keepdim",
           [](const std::vector<Var>& v) { return sum(v[0], -1, true); }, {rand_t(rng, {2, 3, 4})});
  add_case("mean", "[3,4] all", [](const std::vector<Var>& v) { return mean(v[0]); },
           {rand_t(rng, {3, 4})});
  add_case("mean", "[2,3,4] axis 0", [](const std::vector<Var>& v) { return mean(v[0], 0); },
           {rand_t(rng, {2, 3, 4})});

  // shape
  add_case("reshape", "[2,3,4] -> [6,-1]",
           [](const std::vector<Var>& v) {
             return reshape(v[0], {6, -1});
           },
           {rand_t(rng, {2, 3, 4})});
  add_case("transpose", "[2,3,4] (0,2)",
           [](const std::vector<Var>& v) { return transpose(v[0], 0, 2); },
           {rand_t(rng, {2, 3, 4})});
  add_case("permute", "[2,3,4,2] (0,2,1,3)",
           [](const std::vector<Var>& v) {
             return permute(v[0], {0, 2, 1, 3});
           },
           {rand_t(rng, {2, 3, 4, 2})});
  add_case("concat", "[2,1,3] [2,2,3] [2,3,3] axis 1",
           [](const std::vector<Var>& v) {
             return concat({v[0], v[1], v[2]}, 1);
           },
           {rand_t(rng, {2, 1, 3}), rand_t(rng, {2, 2, 3}), rand_t(rng, {2, 3, 3})});
  add_case("concat", "[3] [2] axis 0",
           [](const std::vector<Var>& v) {
             return concat({v[0], v[1]}, 0);
           },
           {rand_t(rng, {3}), rand_t(rng, {2})});
  add_case("slice", "[2,5,3] axis 1 [1,4)",
           [](const std::vector<Var>& v) { return slice(v[0], 1, 1, 4); },
           {rand_t(rng, {2, 5, 3})});
  add_case("slice", "[6] axis 0 [0,2)",
           [](const std::vector<Var>& v) { return slice(v[0], 0, 0, 2); }, {rand_t(rng, {6})});

  // embedding with repeated ids (天 appears twice in 今天天气很好)
  add_case("embedding", "W[10,4] ids [3,4,4,5,6,7,2]",
           [](const std::vector<Var>& v) {
             return embedding(v[0], {3, 4, 4, 5, 6, 7, 2}, {7});
           },
           {rand_t(rng, {10, 4})});
  add_case("embedding", "W[5,3] ids [2,3]",
           [](const std::vector<Var>& v) {
             return embedding(v[0], {0, 2, 2, 4, 1, 2}, {2, 3});
           },
           {rand_t(rng, {5, 3})});

  // masks
  add_case("masked_fill", "[2,4,4] causal -> -5",
           [](const std::vector<Var>& v) { return masked_fill(v[0], Mask::causal(4), -5.0); },
           {rand_t(rng, {2, 4, 4})});
  add_case("masked_fill", "[2,3,4] key padding [2,1,4]",
           [](const std::vector<Var>& v) {
             return masked_fill(v[0], Mask({2, 1, 4}, {0, 0, 0, 1, 0, 0, 1, 1}), 0.0);
           },
           {rand_t(rng, {2, 3, 4})});

  // probabilities and normalization
  add_case("softmax", "[3,5]", [](const std::vector<Var>& v) { return softmax(v[0]); },
           {rand_t(rng, {3, 5}, -2, 2)});
  add_case("softmax", "[2,2,3,4]", [](const std::vector<Var>& v) { return softmax(v[0]); },
           {rand_t(rng, {2, 2, 3, 4}, -2, 2)});
  add_case("softmax", "[3,4] masked -inf, one row fully masked",
           [](const std::vector<Var>& v) {
             Mask m({3, 4}, {0, 1, 1, 1, 1, 1, 1, 1, 0, 0, 1, 0});
             return softmax(masked_fill(v[0], m, -std::numeric_limits<double>::infinity()));
           },
           {rand_t(rng, {3, 4})});
  add_case("log_softmax", "[2,3,4]", [](const std::vector<Var>& v) { return log_softmax(v[0]); },
           {rand_t(rng, {2, 3, 4}, -2, 2)});
  add_case("silu", "[3,5]", [](const std::vector<Var>& v) { return silu(v[0]); },
           {rand_t(rng, {3, 5}, -4, 4)});
  add_case("silu_gate", "silu(a[2,3,4]) ⊙ b[2,3,4], SwiGLU's product",
           [](const std::vector<Var>& v) { return mul(silu(v[0]), v[1]); },
           {rand_t(rng, {2, 3, 4}, -3, 3), rand_t(rng, {2, 3, 4})});
  add_case("layer_norm", "[4,6] γ[6] β[6]",
           [](const std::vector<Var>& v) { return layer_norm(v[0], v[1], v[2]); },
           {rand_t(rng, {4, 6}, -2, 2), rand_t(rng, {6}, 0.5, 1.5), rand_t(rng, {6})});
  add_case("layer_norm", "[2,3,4] γ[4] β[4]",
           [](const std::vector<Var>& v) { return layer_norm(v[0], v[1], v[2]); },
           {rand_t(rng, {2, 3, 4}, -2, 2), rand_t(rng, {4}, 0.5, 1.5), rand_t(rng, {4})});
  add_case("rms_norm", "[4,6] γ[6]", [](const std::vector<Var>& v) { return rms_norm(v[0], v[1]); },
           {rand_t(rng, {4, 6}, -2, 2), rand_t(rng, {6}, 0.5, 1.5)});
  add_case("rms_norm", "[2,3,4] γ[4]",
           [](const std::vector<Var>& v) { return rms_norm(v[0], v[1]); },
           {rand_t(rng, {2, 3, 4}, -2, 2), rand_t(rng, {4}, -1.5, 1.5)});
  add_case("add_layer_norm", "x[2,3,4] + r[2,3,4], γ[4] β[4]",
           [](const std::vector<Var>& v) { return add_layer_norm(v[0], v[1], v[2], v[3]); },
           {rand_t(rng, {2, 3, 4}, -2, 2), rand_t(rng, {2, 3, 4}, -2, 2),
            rand_t(rng, {4}, 0.5, 1.5), rand_t(rng, {4})});
  add_case("add_layer_norm", "one x[3,5] as both inputs, γ[5] β[5]",
           [](const std::vector<Var>& v) { return add_layer_norm(v[0], v[0], v[1], v[2]); },
           {rand_t(rng, {3, 5}, -2, 2), rand_t(rng, {5}, 0.5, 1.5), rand_t(rng, {5})});
  add_case("add_layer_norm", "x[3,37] + dropout(r[3,37], 0.3) seeded, γ[37] β[37]",
           [](const std::vector<Var>& v) {
             Rng r(5);  // the same mask on every call, as the numeric differences need
             return add_layer_norm(v[0], v[1], v[2], v[3], 1e-5, 0.3, &r);
           },
           {rand_t(rng, {3, 37}, -2, 2), rand_t(rng, {3, 37}, -2, 2), rand_t(rng, {37}, 0.5, 1.5),
            rand_t(rng, {37})});
  add_case("add_layer_norm", "one x[3,5] + dropout(x, 0.5) seeded, γ[5] β[5]",
           [](const std::vector<Var>& v) {
             Rng r(8);
             return add_layer_norm(v[0], v[0], v[1], v[2], 1e-5, 0.5, &r);
           },
           {rand_t(rng, {3, 5}, -2, 2), rand_t(rng, {5}, 0.5, 1.5), rand_t(rng, {5})});
  add_case("add_dropout", "x[3,37] + dropout(y[3,37], 0.3) seeded",
           [](const std::vector<Var>& v) {
             Rng r(6);
             return add_dropout(v[0], v[1], 0.3, &r);
           },
           {rand_t(rng, {3, 37}), rand_t(rng, {3, 37})});
  add_case("add_dropout", "one x[4,5] + dropout(x, 0.5) seeded",
           [](const std::vector<Var>& v) {
             Rng r(9);
             return add_dropout(v[0], v[0], 0.5, &r);
           },
           {rand_t(rng, {4, 5})});
  add_case("dropout", "[3,37] p=0.5 seeded: a Philox chunk boundary inside",
           [](const std::vector<Var>& v) {
             Rng r(3);
             return dropout(v[0], 0.5, true, r);
           },
           {rand_t(rng, {3, 37})});
  add_case("dropout", "[4,5] p=0.3 seeded",
           [](const std::vector<Var>& v) {
             Rng r(42);  // the same mask on every call, as the numeric differences need
             return dropout(v[0], 0.3, true, r);
           },
           {rand_t(rng, {4, 5})});

  // loss
  add_case("cross_entropy", "[6,5] targets",
           [](const std::vector<Var>& v) {
             return cross_entropy(v[0], {0, 4, 2, 2, 1, 3});
           },
           {rand_t(rng, {6, 5}, -2, 2)});
  add_case("cross_entropy", "[2,3,5] with ignore_index",
           [](const std::vector<Var>& v) {
             return cross_entropy(v[0], {1, -100, 4, 0, -100, -100});
           },
           {rand_t(rng, {2, 3, 5}, -2, 2)});
  add_case("cross_entropy", "[4,6] label smoothing 0.1",
           [](const std::vector<Var>& v) {
             CrossEntropyOptions o;
             o.label_smoothing = 0.1;
             return cross_entropy(v[0], {5, 0, -100, 2}, o);
           },
           {rand_t(rng, {4, 6}, -2, 2)});
  add_case("cross_entropy", "[3,4] all targets ignored",
           [](const std::vector<Var>& v) {
             return cross_entropy(v[0], {-100, -100, -100});
           },
           {rand_t(rng, {3, 4})});

  // attention, fused: heads read in place, masks of every shape the models make, a fully
  // masked row, and one value used as both keys and values
  add_case("attention", "fused q[2,3,8] k,v[2,4,8] 2 heads, key padding [2,1,1,4]",
           [](const std::vector<Var>& v) {
             Mask m({2, 1, 1, 4}, {0, 0, 0, 1, 0, 0, 1, 1});
             return attention(v[0], v[1], v[2], 2, &m);
           },
           {rand_t(rng, {2, 3, 8}), rand_t(rng, {2, 4, 8}), rand_t(rng, {2, 4, 8})});
  add_case("attention",
           "fused q,k,v[2,4,6] 3 heads, causal + padding [2,1,4,4], a row fully masked",
           [](const std::vector<Var>& v) {
             Mask m = Mask::zeros({2, 1, 4, 4});
             for (int64_t b = 0; b < 2; ++b)
               for (int64_t i = 0; i < 4; ++i)
                 for (int64_t j = 0; j < 4; ++j)
                   if (j > i || (b == 1 && j >= 2))
                     m.data[static_cast<size_t>((b * 4 + i) * 4 + j)] = 1;
             m.data[0] = 1;  // batch 0, query 0 sees nothing
             return attention(v[0], v[1], v[2], 3, &m);
           },
           {rand_t(rng, {2, 4, 6}), rand_t(rng, {2, 4, 6}), rand_t(rng, {2, 4, 6})});
  add_case("attention", "fused q[1,3,4] k,v[1,5,4] 1 head, no mask, causal [3,5] broadcast",
           [](const std::vector<Var>& v) {
             Mask m({3, 5}, {0, 1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 0, 0, 1, 1});
             return add(attention(v[0], v[1], v[2], 1, nullptr),
                        attention(v[0], v[1], v[2], 1, &m));
           },
           {rand_t(rng, {1, 3, 4}), rand_t(rng, {1, 5, 4}), rand_t(rng, {1, 5, 4})});
  add_case("attention", "fused q[2,3,4] and kv[2,3,4] as both keys and values, 2 heads",
           [](const std::vector<Var>& v) { return attention(v[0], v[1], v[1], 2, nullptr); },
           {rand_t(rng, {2, 3, 4}), rand_t(rng, {2, 3, 4})});
  add_case("attention", "fused self-attention: one x as q, k and v, 2 heads",
           [](const std::vector<Var>& v) { return attention(v[0], v[0], v[0], 2, nullptr); },
           {rand_t(rng, {2, 3, 4})});

  add_case("attention", "fused with dropout p=0.3 on the weights, q[2,3,8] k,v[2,5,8] 2 heads",
           [](const std::vector<Var>& v) {
             Rng r(7);  // the same mask on every call, as the numeric differences need
             Mask m({2, 1, 1, 5}, {0, 0, 0, 0, 1, 0, 0, 1, 1, 1});
             return attention(v[0], v[1], v[2], 2, &m, nullptr, 0.3, &r);
           },
           {rand_t(rng, {2, 3, 8}), rand_t(rng, {2, 5, 8}), rand_t(rng, {2, 5, 8})});
  add_case("attention", "fused with dropout p=0.5, one x as q, k and v, 2 heads",
           [](const std::vector<Var>& v) {
             Rng r(11);
             return attention(v[0], v[0], v[0], 2, nullptr, nullptr, 0.5, &r);
           },
           {rand_t(rng, {2, 4, 4})});

  // a composite: masked scaled dot-product attention, as the models used to build it
  add_case("attention", "composite q[2,3,4] k[2,3,4] v[2,3,4] causal",
           [](const std::vector<Var>& v) {
             Var s = matmul(v[0], v[1], false, true) * 0.5;  // [2,3,3]
             Var p =
                 softmax(masked_fill(s, Mask::causal(3), -std::numeric_limits<double>::infinity()));
             return matmul(p, v[2]);  // [2,3,4]
           },
           {rand_t(rng, {2, 3, 4}), rand_t(rng, {2, 3, 4}), rand_t(rng, {2, 3, 4})});

  // affine_relu: ReLU fused into the product (last, so the cases above keep their inputs; no
  // pre-activation of these seeded inputs lies within the check's eps of the kink)
  add_case("affine_relu", "x[2,3,4] W[4,5] b[5]",
           [](const std::vector<Var>& v) { return affine_relu(v[0], v[1], v[2]); },
           {rand_t(rng, {2, 3, 4}), rand_t(rng, {4, 5}), rand_t(rng, {5})});
  add_case("affine_relu", "x[3,4] W[4,6] no bias",
           [](const std::vector<Var>& v) { return affine_relu(v[0], v[1], Var()); },
           {rand_t(rng, {3, 4}), rand_t(rng, {4, 6})});
  return c;
}

}  // namespace seqtape
