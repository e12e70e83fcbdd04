#pragma once
// A checkpoint's model, without the tape: the configuration it carries, and its weights checked
// against the parameter list that configuration implies (model/param_names.h). Shared by the
// trainer's resume, reference/f15, export and infer/ (which cannot link the tape); copying the
// checked weights into a training model is train/model_io.h.

#include <map>
#include <string>
#include <vector>

#include "io/checkpoint.h"
#include "model/config.h"

namespace seqtape {

// A model configuration from its JSON text (a checkpoint's, or an export's config.json); Error
// "<where>: invalid configuration: ..." when the JSON does not parse or holds a bad value.
ModelConfig config_from_json(const std::string& text, const std::string& where);
// The checkpoint's model configuration (config_from_json of what it carries).
ModelConfig checkpoint_config(const Checkpoint& c, const std::string& where);

// Checks that `params` are exactly the parameters cfg implies: every name once, with its shape,
// no other name, every value finite. An Error names `where` and the first problem in the
// model's order. Returns the tensors by name (pointers into `params`). held_elsewhere: the
// parameters given in another form (a quantized export's matrices), with their shapes; they
// are checked by name and shape only, and not returned.
std::map<std::string, const Tensor*> check_parameters(
    const ModelConfig& cfg, const std::vector<NamedTensor>& params, const std::string& where,
    const std::map<std::string, Shape>& held_elsewhere = {});

}  // namespace seqtape
