// The README's C++ quickstart (ctest builds and runs it; README.md quotes it from the includes).
#include <cstdio>

#include "infer/search.h"
#include "nn/loss.h"
#include "train/model_io.h"
#include "train/trainer.h"
using namespace seqtape;
int main() {  // tensors and the tape: d(sum(x·w))/dw = xᵀ·1
  Var w(Tensor::from(std::vector<float>{1, 2, 3, 4}, {2, 2}), true);
  Tape::current().backward(sum(matmul(Var(Tensor::from(std::vector<float>{1, -1}, {1, 2})), w)));
  for (int i = 0; i < 4; ++i) std::printf("%g ", w.grad().get(i));  // 1 1 -1 -1
  const std::vector<TextPair> data = {{"今天", "天气很好"}, {"天气", "今天很好"}};
  const Vocab vocab = Vocab::build({"今天天气很好"});  // <pad> <bos> <eos> <unk> <sep>, characters
  auto model = make_model(preset("seed", static_cast<int>(vocab.size())));  // d 4, 2+2 layers
  const std::vector<Example> examples = encode_examples(Tokenizer(vocab), data, "data");
  const Batch batch = make_batch(examples, std::vector<uint32_t>{0, 1}, vocab.pad_id());
  NamedParams params = model->named_parameters();
  auto adam = make_optimizer(params, OptimizerConfig{"adam"});
  Rng rng(1);
  for (int step = 1; step <= 400; ++step) {  // a training step: forward, backward, update
    Tape::current().clear();
    for (auto& [name, p] : params) p.zero_grad();
    Tape::current().backward(sequence_loss(model->logits(batch, rng), batch.labels));
    adam->step(0.03);
  }
  const InferenceModel m(model->config(), vocab, named_tensors(*model));  // tape-free, KV cache
  const auto out = generate(m, {encode_input(m, m.codec(), "今天")}, GenerateOptions{});
  std::printf("今天 -> %s\n", out[0].text.c_str());
  return out[0].text == "天气很好" ? 0 : 1;
}
