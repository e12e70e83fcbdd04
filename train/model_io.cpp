#include "train/model_io.h"

#include <cstring>

#include "io/weights.h"

namespace seqtape {

void load_params_into(TransformerModel& model, const std::vector<NamedTensor>& params,
                      const std::string& where) {
  const auto by_name = check_parameters(model.config(), params, where);
  for (auto& [name, p] : model.named_parameters()) {
    const Tensor t = by_name.at(name)->to(p.dtype());
    std::memcpy(p.mutable_value().raw(), t.raw(), t.nbytes());
  }
}

std::vector<NamedTensor> named_tensors(const Module& model) {
  std::vector<NamedTensor> out;
  for (const auto& [name, p] : model.named_parameters()) out.push_back({name, p.value()});
  return out;
}

}  // namespace seqtape
