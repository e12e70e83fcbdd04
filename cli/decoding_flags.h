#pragma once
// The decoding flags of generate and eval, registered from the table of decoding options
// (infer/options.h): each row's flag, help and default, and its check in the flags' names.

#include <CLI/CLI.hpp>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "infer/options.h"

namespace seqtape::cli {

struct DecodingFlags {
  GenerateOptions o;                                            // the values (non-token rows)
  std::map<std::string_view, CLI::Option*> given;               // by field: the flag, if registered
  std::map<std::string_view, std::vector<std::string>> tokens;  // token rows: names as given
};

// Adds the flags of `only` (fields; empty: every row) to `sub`, in the table's order.
void add_decoding_flags(CLI::App* sub, DecodingFlags& f,
                        const std::vector<std::string_view>& only = {});

// GenerateOptions::problem() and given_problem() in the flags' names, as a UsageError.
void check_decoding_flags(const DecodingFlags& f);

// The options with the token rows' ids from the model's vocabulary; a token it lacks is a
// UsageError naming the flag and the model (`model_path`).
GenerateOptions decoding_options_for(const DecodingFlags& f, const Vocab& vocab,
                                     const std::string& model_path);

}  // namespace seqtape::cli
