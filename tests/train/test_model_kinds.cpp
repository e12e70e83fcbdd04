// Norm kinds and activations beyond the reference's (rmsnorm, swiglu): each one trains, decodes
// the same with and without infer/'s cache and as nn/'s uncached greedy does, survives an export,
// and computes what its PyTorch expression computes (/usr/bin/python3 with torch; skipped with
// the reason when torch is missing). The float64 gradchecks of their ops are in the op catalogue
// (tests/autograd/test_gradcheck.cpp) and of whole models in tests/nn/test_model_gradcheck.cpp.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "autograd/ops.h"
#include "infer/export.h"
#include "infer/load.h"
#include "infer/quant_io.h"
#include "infer/search.h"
#include "io/checkpoint.h"
#include "train/evaluate.h"
#include "train/model_io.h"
#include "train/trainer.h"

namespace seqtape {
namespace {

namespace fs = std::filesystem;

fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() /
               ("seqtape_test_model_kinds_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// A model variant: a name and the fields it sets.
struct Variant {
  const char* name;
  std::function<void(ModelConfig&)> set;
};

std::vector<Variant> variants() {
  return {
      {"rmsnorm_post", [](ModelConfig& c) { c.norm_kind = NormKind::RmsNorm; }},
      {"rmsnorm_pre_decoder_only",
       [](ModelConfig& c) {
         c.norm_kind = NormKind::RmsNorm;
         c.norm = NormPlacement::Pre;
         c.arch = Arch::DecoderOnly;
         c.n_encoder_layers = 0;
       }},
      {"swiglu", [](ModelConfig& c) { c.activation = Activation::Swiglu; }},
      {"swiglu_rmsnorm_pre_decoder_only_no_bias",
       [](ModelConfig& c) {
         c.activation = Activation::Swiglu;
         c.norm_kind = NormKind::RmsNorm;
         c.norm = NormPlacement::Pre;
         c.arch = Arch::DecoderOnly;
         c.n_encoder_layers = 0;
         c.ffn_bias = false;
       }},
  };
}

// Trains the variant on a small reversal task; returns the report (checkpoint in `out`).
TrainReport train_variant(const Variant& v, const fs::path& out, int64_t steps) {
  {
    std::ofstream data(out / "data.tsv");
    const char* words[] = {"abc", "bca", "cab", "abba", "cabc", "bacca", "aab", "ccab"};
    for (const char* w : words) {
      std::string r(w);
      data << w << "\t" << std::string(r.rbegin(), r.rend()) << "\n";
    }
  }
  TrainOptions o;
  o.data = (out / "data.tsv").string();
  o.out_dir = (out / "run").string();
  o.model = preset("seed", 0);
  o.model.d_model = 16;
  o.model.n_heads = 2;
  o.model.d_ff = 24;
  v.set(o.model);
  o.steps = steps;
  o.batch = 8;
  o.schedule.lr = 0.01;
  o.progress = 0;
  o.log_every = 1000;
  o.eval_max = 4;
  std::ostringstream log;
  return train(o, log);
}

class ModelKinds : public ::testing::TestWithParam<size_t> {};

TEST_P(ModelKinds, TrainingLowersTheLoss) {
  const Variant v = variants()[GetParam()];
  const fs::path out = temp_dir(std::string("train_") + v.name);
  const TrainReport r = train_variant(v, out, 120);
  ASSERT_EQ(r.losses.size(), 120u);
  double first = 0, last = 0;
  for (size_t i = 0; i < 10; ++i) first += r.losses[i], last += r.losses[r.losses.size() - 1 - i];
  EXPECT_LT(last, 0.5 * first) << v.name;
  fs::remove_all(out);
}

// infer/ (cached and uncached) and nn/'s uncached greedy decode the same tokens, and an export
// of the checkpoint loads as the same model (configuration included) and decodes the same.
TEST_P(ModelKinds, CachedUncachedTrainingGreedyAndExportAgree) {
  const Variant v = variants()[GetParam()];
  const fs::path out = temp_dir(std::string("decode_") + v.name);
  const TrainReport r = train_variant(v, out, 40);
  const InferenceModel m = load_model(r.checkpoint);
  ModelConfig want = preset("seed", 0);
  v.set(want);
  EXPECT_EQ(m.config().norm_kind, want.norm_kind);
  EXPECT_EQ(m.config().activation, want.activation);
  const std::vector<std::vector<int32_t>> in = {encode_input(m, m.codec(), "abca"),
                                                encode_input(m, m.codec(), "cb")};
  GenerateOptions o;
  o.max_new = 8;
  o.min_new = 8;  // end tokens blocked: eight positions compared
  o.verify_cache = true;
  const auto cached = generate(m, in, o);
  GenerateOptions u = o;
  u.use_cache = false;
  const auto uncached = generate(m, in, u);
  ExportReport e = export_checkpoint(r.checkpoint, (out / "export").string());
  const InferenceModel exported = load_model((out / "export").string());
  EXPECT_EQ(exported.config().to_json(), m.config().to_json());
  const auto from_export = generate(exported, in, o);
  // nn/'s uncached greedy on the checkpoint's weights: the training forward, not infer's.
  auto net = make_model(m.config());
  load_params_into(*net, load_checkpoint(r.checkpoint).params, r.checkpoint);
  GenerateOptions greedy;
  greedy.max_new = 8;
  const auto infer_greedy = generate(m, in, greedy);
  const auto nn_greedy = greedy_uncached(*net, m.vocab(), in, 8);
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(infer_greedy[i].tokens, nn_greedy[i]) << v.name << " input " << i;
    EXPECT_EQ(cached[i].tokens, uncached[i].tokens) << v.name << " input " << i;
    EXPECT_LT(cached[i].max_abs_delta, 1e-4) << v.name << " input " << i;
    EXPECT_EQ(from_export[i].tokens, cached[i].tokens) << v.name << " input " << i;
  }
  fs::remove_all(out);
}

// A quantized export (int8, bf16) decodes the tokens and scores of its checkpoint under the same
// --compute-type: every matrix the compute type quantizes, a gated activation's w3 included, is
// stored quantized as that type quantizes it.
TEST_P(ModelKinds, QuantizedExportDecodesAsTheCheckpointUnderItsComputeType) {
  const Variant v = variants()[GetParam()];
  const fs::path out = temp_dir(std::string("quant_") + v.name);
  const TrainReport r = train_variant(v, out, 40);
  for (ComputeType t : {ComputeType::Int8, ComputeType::Bf16}) {
    const std::string what = std::string(v.name) + " " + to_string(t);
    std::optional<InferenceModel> want;
    try {
      want.emplace(load_model(r.checkpoint, WeightLayout::Decode, t));
    } catch (const Error& e) {  // a CPU without the type's units refuses it
      std::printf("%s: skipped (%s)\n", what.c_str(), e.what());
      continue;
    }
    const fs::path dir = out / (std::string("export_") + to_string(t));
    export_checkpoint(r.checkpoint, dir.string(), t);
    // The files hold every matrix as the type stores it, the gates too: none as float32 (the
    // loader would quantize one, so decoding alone does not tell).
    const ModelFiles files = read_model_files(dir.string());
    for (const NamedTensor& p : files.params)
      EXPECT_FALSE(is_quantized_matrix(p.name)) << what << ": " << p.name << " stored as float32";
    size_t gates = 0;
    for (const auto& [name, q] : files.quantized) gates += name.ends_with(".ffn.w3") ? 1 : 0;
    const bool gated = activation_row(files.cfg.activation).gated;
    EXPECT_EQ(gates, gated ? size_t(files.cfg.n_encoder_layers + files.cfg.n_decoder_layers) : 0)
        << what;
    const InferenceModel got = load_model(dir.string());
    ASSERT_EQ(got.compute_type(), t) << what;
    const std::vector<std::vector<int32_t>> in = {encode_input(got, got.codec(), "abca"),
                                                  encode_input(got, got.codec(), "cb")};
    for (int beam : {1, 3}) {
      GenerateOptions o;
      o.max_new = 8;
      o.beam = beam;
      const auto a = generate(got, in, o), b = generate(*want, in, o);
      for (size_t i = 0; i < in.size(); ++i) {
        EXPECT_EQ(a[i].tokens, b[i].tokens) << what << " beam " << beam << " input " << i;
        EXPECT_EQ(a[i].score, b[i].score) << what << " beam " << beam << " input " << i;
      }
    }
  }
  fs::remove_all(out);
}

INSTANTIATE_TEST_SUITE_P(Variants, ModelKinds, ::testing::Range<size_t>(0, variants().size()),
                         [](const ::testing::TestParamInfo<size_t>& i) {
                           return std::string(variants()[i.param].name);
                         });

// Runs `expr` (a PyTorch expression of the tensors in `inputs`, named as there; double
// precision) with /usr/bin/python3 and returns its values and the gradients of sum(out * g)
// with respect to each input, or nullopt with the reason in `skip` when torch is missing.
struct TorchResult {
  std::vector<double> out;
  std::vector<std::vector<double>> grads;
};
std::optional<TorchResult> torch_eval(const std::string& expr,
                                      const std::vector<std::pair<std::string, Var>>& inputs,
                                      const Var& upstream, std::string& skip) {
  const fs::path dir = temp_dir("torch");
  nlohmann::json j;
  j["expr"] = expr;
  for (const auto& [name, v] : inputs)
    j["inputs"].push_back(
        {{"name", name}, {"shape", v.shape()}, {"values", v.value().to_vector()}});
  j["g"] = upstream.value().to_vector();
  std::ofstream(dir / "in.json") << j.dump();
  const std::string script = R"(
import json, sys
try:
    import torch
except ImportError as e:
    print("SKIP", e); sys.exit(0)
j = json.load(open(sys.argv[1]))
env = {}
for i in j["inputs"]:
    env[i["name"]] = torch.tensor(i["values"], dtype=torch.float64).reshape(i["shape"]).requires_grad_()
env["torch"] = torch
env["F"] = torch.nn.functional
out = eval(j["expr"], env)
g = torch.tensor(j["g"], dtype=torch.float64).reshape(out.shape)
(out * g).sum().backward()
json.dump({"out": out.detach().flatten().tolist(),
           "grads": [env[i["name"]].grad.flatten().tolist() for i in j["inputs"]]},
          open(sys.argv[2], "w"))
print("OK")
)";
  std::ofstream(dir / "ref.py") << script;
  const std::string cmd = "/usr/bin/python3 " + (dir / "ref.py").string() + " " +
                          (dir / "in.json").string() + " " + (dir / "out.json").string() + " > " +
                          (dir / "log").string() + " 2>&1";
  const int rc = std::system(cmd.c_str());
  std::stringstream log;
  log << std::ifstream(dir / "log").rdbuf();
  if (!fs::exists("/usr/bin/python3") || log.str().rfind("SKIP", 0) == 0) {
    skip = "PyTorch is not available to /usr/bin/python3: " + log.str();
    fs::remove_all(dir);
    return std::nullopt;
  }
  EXPECT_EQ(rc, 0) << log.str();
  TorchResult r;
  const nlohmann::json o = nlohmann::json::parse(std::ifstream(dir / "out.json"));
  r.out = o["out"].get<std::vector<double>>();
  r.grads = o["grads"].get<std::vector<std::vector<double>>>();
  fs::remove_all(dir);
  return r;
}

// `n` float64 values in [-2, 2) shaped `shape`.
Tensor values(Rng& rng, Shape shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<double> v(static_cast<size_t>(n));
  for (double& e : v) e = 4 * rng.uniform() - 2;
  return Tensor::from(v, std::move(shape));
}

// The op's value and its gradients (of sum(out * g)) against PyTorch's, in float64.
void expect_matches_torch(const std::string& expr,
                          const std::vector<std::pair<std::string, Var>>& inputs,
                          const std::function<Var()>& op) {
  Rng rng(5);
  Var out = op();
  Var g(values(rng, out.shape()));
  std::string skip;
  const auto ref = torch_eval(expr, inputs, g, skip);
  if (!ref) GTEST_SKIP() << skip;
  const std::vector<double> got = out.value().to_vector();
  ASSERT_EQ(got.size(), ref->out.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i], ref->out[i], 1e-12) << expr << " " << i;
  Tape::current().backward(out, g.value());
  for (size_t k = 0; k < inputs.size(); ++k) {
    const std::vector<double> d = inputs[k].second.grad().to_vector();
    ASSERT_EQ(d.size(), ref->grads[k].size());
    for (size_t i = 0; i < d.size(); ++i)
      EXPECT_NEAR(d[i], ref->grads[k][i], 1e-10) << expr << " d" << inputs[k].first << " " << i;
  }
}

// The module's input and its parameters (set to random values) by name, for torch_eval.
std::vector<std::pair<std::string, Var>> inputs_of(Module& m, const Var& x, Rng& rng) {
  std::vector<std::pair<std::string, Var>> in = {{"x", x}};
  for (auto& [name, p] : m.named_parameters()) {
    Tensor t = p.value();  // shares the parameter's storage
    for (int64_t i = 0; i < t.numel(); ++i) t.set(i, 4 * rng.uniform() - 2);
    in.emplace_back(name, p);
  }
  return in;
}

TEST(ModelKindsTorch, RmsNormIsTheT5LlamaFormula) {
  Rng rng(3);
  LayerNorm norm(5, 1e-5, DType::F64, NormKind::RmsNorm);
  Var x(values(rng, {3, 5}), true);
  expect_matches_torch("x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-5) * gamma",
                       inputs_of(norm, x, rng), [&] { return norm.forward(x); });
}

TEST(ModelKindsTorch, SwiGluIsTheLlamaFeedForward) {
  Rng rng(4);
  FeedForward ffn(4, 6, Activation::Swiglu, true, DType::F64);
  Var x(values(rng, {2, 3, 4}), true);
  // the [in, out] layout: x @ W
  expect_matches_torch("(F.silu(x @ w1 + b1) * (x @ w3 + b3)) @ w2 + b2", inputs_of(ffn, x, rng),
                       [&] { return ffn.forward(x); });
}

}  // namespace
}  // namespace seqtape
