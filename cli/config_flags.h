#pragma once
// The `seqtape train` flags that override model-configuration fields: one flag per row of
// config_fields() (model/config.h) that names one, registered from that table.

#include <CLI/CLI.hpp>
#include <deque>
#include <string>

#include "model/config.h"

namespace seqtape::cli {

class ConfigFlags {
 public:
  // Adds every field's flag to `group`, with the field's help and allowed range or values.
  void add_to(CLI::App* group);
  // True when the flag of the field `key` was given.
  bool given(const std::string& key) const;
  // True when any field's flag was given.
  bool any_given() const;
  // Sets the fields whose flags were given; throws Error for a bad enum spelling. Choosing
  // --arch decoder_only without --enc-layers also sets n_encoder_layers to 0.
  void apply(ModelConfig& c) const;

 private:
  struct Slot {
    const ConfigField* field = nullptr;
    CLI::Option* option = nullptr;
    int64_t i = 0;
    uint64_t u = 0;
    double d = 0;
    bool b = false;
    std::string s;
  };
  std::deque<Slot> slots_;  // stable addresses: CLI11 writes into them
};

}  // namespace seqtape::cli
