// generate's and eval's decoding flags from the table of decoding options.
#include "cli/decoding_flags.h"

#include <algorithm>
#include <type_traits>

#include "cli/commands.h"

namespace seqtape::cli {

namespace {

// One row's flag on `sub`, bound to its member (a token row: to the names).
CLI::Option* add_flag(CLI::App* sub, const DecodingOption& d, DecodingFlags& f) {
  const std::string flag(d.flag), help(d.help);
  GenerateOptions& o = f.o;
  return std::visit(
      [&](auto m) -> CLI::Option* {
        using T = std::remove_cvref_t<decltype(o.*m)>;
        if constexpr (std::is_same_v<T, bool>) {
          if (d.negated)
            return sub->add_flag_callback(
                flag, [&o, m] { o.*m = false; }, help);
          return sub->add_flag(flag, o.*m, help);
        } else if constexpr (std::is_same_v<T, std::vector<int32_t>>) {
          return sub->add_option(flag, f.tokens[d.field], help);
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          return sub->add_option(flag, o.*m, help);
        } else {
          return sub->add_option(flag, o.*m, help)->capture_default_str();
        }
      },
      d.member);
}

}  // namespace

void add_decoding_flags(CLI::App* sub, DecodingFlags& f,
                        const std::vector<std::string_view>& only) {
  for (const DecodingOption& d : decoding_options())
    if (only.empty() || std::ranges::find(only, d.field) != only.end())
      f.given[d.field] = add_flag(sub, d, f);
}

void check_decoding_flags(const DecodingFlags& f) {
  const auto name = [](std::string_view field) { return option_flag(field); };
  if (std::optional<std::string> p = f.o.problem(name)) throw UsageError(*p);
  const auto given = [&f](const DecodingOption& d) {
    auto it = f.given.find(d.field);
    return it != f.given.end() && it->second->count() > 0;
  };
  if (std::optional<std::string> p = given_problem(f.o, given, name)) throw UsageError(*p);
}

GenerateOptions decoding_options_for(const DecodingFlags& f, const Vocab& vocab,
                                     const std::string& model_path) {
  GenerateOptions o = f.o;
  for (const auto& [field, names] : f.tokens) {
    if (names.empty()) continue;
    const DecodingOption& d = *find_decoding_option(field);
    if (std::optional<std::string> t = set_token_option(d, o, vocab, names))
      throw UsageError(std::string(d.flag) + ": '" + *t + "' is not a token of " + model_path +
                       "'s vocabulary (" + std::to_string(vocab.size()) + " tokens)");
  }
  return o;
}

}  // namespace seqtape::cli
