// The optimizer kinds by name: --optimizer, the checkpoint's optimizer_name and the memory
// budget read this table. Each factory lives in its kind's file.
#include "train/optim.h"

namespace seqtape {

std::unique_ptr<Optimizer> make_sgd(NamedParams params, const OptimizerConfig& cfg);
std::unique_ptr<Optimizer> make_momentum(NamedParams params, const OptimizerConfig& cfg);
std::unique_ptr<Optimizer> make_adam(NamedParams params, const OptimizerConfig& cfg);
std::unique_ptr<Optimizer> make_adamw(NamedParams params, const OptimizerConfig& cfg);
std::unique_ptr<Optimizer> make_lion(NamedParams params, const OptimizerConfig& cfg);

const std::vector<OptimizerKind>& optimizer_kinds() {
  static const std::vector<OptimizerKind> kinds = {
      {"sgd", "plain SGD", 0, "", make_sgd},
      {"momentum", "SGD with momentum 0.9", 1, "momentum buffer", make_momentum},
      {"adam", "Adam, weight decay as an L2 term", 2, "Adam state", make_adam},
      {"adamw", "Adam with decoupled weight decay", 2, "Adam state", make_adamw},
      {"lion", "Lion: sign updates (use a smaller --lr), decoupled weight decay", 1,
       "Lion momentum", make_lion},
  };
  return kinds;
}

const OptimizerKind& find_optimizer(const std::string& name) {
  for (const OptimizerKind& k : optimizer_kinds())
    if (name == k.name) return k;
  fail("optimizer", "unknown optimizer '" + name + "' (known: " + optimizer_names() + ")");
}

std::string optimizer_names(const char* separator) {
  std::string s;
  for (const OptimizerKind& k : optimizer_kinds())
    s += (s.empty() ? "" : separator) + std::string(k.name);
  return s;
}

std::unique_ptr<Optimizer> make_optimizer(NamedParams params, const OptimizerConfig& cfg) {
  return find_optimizer(cfg.kind).make(std::move(params), cfg);
}

}  // namespace seqtape
