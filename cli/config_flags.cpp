#include "cli/config_flags.h"

#include <algorithm>
#include <nlohmann/json.hpp>

namespace seqtape::cli {

void ConfigFlags::add_to(CLI::App* group) {
  for (const ConfigField& f : config_fields()) {
    if (*f.flag == '\0') continue;
    Slot& s = slots_.emplace_back();
    s.field = &f;
    const std::string help =
        std::string(f.help) + (f.kind == ConfigField::Kind::Bool ? "" : " (" + f.rule() + ")");
    switch (f.kind) {
      case ConfigField::Kind::Int:
        s.option = group->add_option(f.flag, s.i, help);
        break;
      case ConfigField::Kind::UInt:
        s.option = group->add_option(f.flag, s.u, help);
        break;
      case ConfigField::Kind::Real:
        s.option = group->add_option(f.flag, s.d, help);
        break;
      case ConfigField::Kind::Bool:
        s.option = group->add_flag(f.flag, s.b, help);
        break;
      case ConfigField::Kind::Enum:
        s.option = group->add_option(f.flag, s.s, help);
        break;
    }
  }
}

bool ConfigFlags::given(const std::string& key) const {
  for (const Slot& s : slots_)
    if (key == s.field->key) return s.option->count() > 0;
  return false;
}

bool ConfigFlags::any_given() const {
  return std::any_of(slots_.begin(), slots_.end(),
                     [](const Slot& s) { return s.option->count() > 0; });
}

void ConfigFlags::apply(ModelConfig& c) const {
  for (const Slot& s : slots_) {
    if (!s.option->count()) continue;
    switch (s.field->kind) {
      case ConfigField::Kind::Int:
        s.field->set(c, s.i);
        break;
      case ConfigField::Kind::UInt:
        s.field->set(c, s.u);
        break;
      case ConfigField::Kind::Real:
        s.field->set(c, s.d);
        break;
      case ConfigField::Kind::Bool:
        s.field->set(c, s.b);
        break;
      case ConfigField::Kind::Enum:
        s.field->set(c, s.s);
        break;
    }
  }
  if (c.arch == Arch::DecoderOnly && !given("n_encoder_layers")) c.n_encoder_layers = 0;
}

}  // namespace seqtape::cli
