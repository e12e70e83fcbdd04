// GenerateOptions: the table of the decoding options and their one check, used by generate(),
// the CLI and the server.
//
// Dimension key: none (scalar options).
#include "infer/options.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>

#include "tensor/tensor.h"  // fail

namespace seqtape {

const char* to_string(StopReason r) {
  switch (r) {
    case StopReason::Eos:
      return "eos";
    case StopReason::Length:
      return "length";
    case StopReason::StopString:
      return "stop_string";
    case StopReason::Cancelled:
      return "cancelled";
  }
  return "unknown";
}

namespace {

using Problem = std::optional<std::string>;
using Namer = GenerateOptions::Namer;
using std::to_string;

// The rows' checks: each message starts with the option's name (the server reads the field
// from it).
Problem check_beam(const GenerateOptions& o, const Namer& name) {
  if (o.beam < 1) return name("beam") + " must be at least 1, got " + to_string(o.beam);
  return std::nullopt;
}
Problem check_n_best(const GenerateOptions& o, const Namer& name) {
  if (o.n_best < 1 || o.n_best > o.beam)
    return name("n_best") + " must be in [1, " + name("beam") + " " + to_string(o.beam) +
           "], got " + to_string(o.n_best);
  return std::nullopt;
}
Problem check_length_penalty(const GenerateOptions& o, const Namer& name) {
  if (!std::isfinite(o.length_penalty)) return name("length_penalty") + " must be finite";
  return std::nullopt;
}
Problem check_temperature(const GenerateOptions& o, const Namer& name) {
  if (!(o.temperature >= 0) || !std::isfinite(o.temperature))
    return name("temperature") + " must be >= 0 (0 = greedy), got " + to_string(o.temperature);
  return std::nullopt;
}
Problem check_top_k(const GenerateOptions& o, const Namer& name) {
  if (o.top_k < 0) return name("top_k") + " must be >= 0 (0 = off)";
  return std::nullopt;
}
Problem check_top_p(const GenerateOptions& o, const Namer& name) {
  if (!(o.top_p > 0 && o.top_p <= 1))
    return name("top_p") + " must be in (0, 1], got " + to_string(o.top_p);
  return std::nullopt;
}
Problem check_repetition_penalty(const GenerateOptions& o, const Namer& name) {
  if (!(o.repetition_penalty > 0) || !std::isfinite(o.repetition_penalty))
    return name("repetition_penalty") + " must be > 0 (1 = off), got " +
           to_string(o.repetition_penalty);
  return std::nullopt;
}
Problem check_no_repeat_ngram(const GenerateOptions& o, const Namer& name) {
  if (o.no_repeat_ngram < 0) return name("no_repeat_ngram") + " must be >= 0 (0 = off)";
  return std::nullopt;
}
Problem check_max_new(const GenerateOptions& o, const Namer& name) {
  if (o.max_new < 1) return name("max_new") + " must be at least 1";
  return std::nullopt;
}
Problem check_min_new(const GenerateOptions& o, const Namer& name) {
  if (o.min_new < 0 || o.min_new > o.max_new)
    return name("min_new") + " must be in [0, " + name("max_new") + " " + to_string(o.max_new) +
           "]";
  return std::nullopt;
}
Problem check_stop_strings(const GenerateOptions& o, const Namer& name) {
  for (const std::string& s : o.stop_strings)
    if (s.empty()) return name("stop_strings") + " needs a non-empty string";
  return std::nullopt;
}
Problem check_num_samples(const GenerateOptions& o, const Namer& name) {
  if (o.num_samples < 1)
    return name("num_samples") + " must be at least 1, got " + to_string(o.num_samples);
  return std::nullopt;
}

using O = GenerateOptions;

}  // namespace

// A table, not a function: one row per option (field, request field, flag, help, member, rules).
const std::vector<DecodingOption>& decoding_options() {
  static const std::vector<DecodingOption> rows = {
      {"beam", "beam", "--beam", "beam size (1 = greedy)", &O::beam, false, false, false, "",
       check_beam},
      {"n_best", "n_best", "--n-best", "hypotheses to print (<= --beam)", &O::n_best, false, false,
       false, "n", check_n_best},
      {"length_penalty", "length_penalty", "--length-penalty",
       "beam ranking score / length^A (length counts the <eos>)", &O::length_penalty, false, false,
       false, "", check_length_penalty},
      {"sample", "sample", "--sample", "sample instead of taking the most likely token", &O::sample,
       false, false, false, "temperature"},
      {"temperature", "temperature", "--temperature", "sampling temperature (0 = greedy)",
       &O::temperature, false, true, false, "temperature", check_temperature},
      {"top_k", "top_k", "--top-k", "sample from the K most likely (0 = all)", &O::top_k, false,
       true, false, "", check_top_k},
      {"top_p", "top_p", "--top-p", "sample from the smallest set with probability >= P, in (0, 1]",
       &O::top_p, false, true, false, "top_p", check_top_p},
      {"seed", "seed", "--seed", "sampling seed", &O::seed, false, true, false, "seed"},
      {"repetition_penalty", "repetition_penalty", "--repetition-penalty",
       "divide positive / multiply negative logits of generated tokens (1 = off)",
       &O::repetition_penalty, false, false, false, "", check_repetition_penalty},
      {"no_repeat_ngram", "no_repeat_ngram", "--no-repeat-ngram",
       "never repeat an n-gram of this size (0 = off)", &O::no_repeat_ngram, false, false, false,
       "", check_no_repeat_ngram},
      {"max_new", "max_new", "--max-new", "at most this many new tokens", &O::max_new, false, false,
       false, "max_tokens", check_max_new},
      {"min_new", "min_new", "--min-new", "block <eos> before this many new tokens", &O::min_new,
       false, false, false, "", check_min_new},
      {"stop_strings", "stop", "--stop", "stop before this text (repeatable)", &O::stop_strings,
       false, false, false, "stop", check_stop_strings},
      {"end_ids", "end", "--end",
       "also end at this vocabulary token, like <eos> (repeatable; stop reason eos)", &O::end_ids,
       false, false, true, ""},
      {"suppress_ids", "suppress", "--suppress",
       "never generate this vocabulary token (repeatable)", &O::suppress_ids, false, false, false,
       ""},
      {"use_cache", "no_cache", "--no-cache", "recompute the whole prefix every step (slow)",
       &O::use_cache, true, false, false, ""},
      {"verify_cache", "verify_cache", "--verify-cache",
       "compare the cached logits with a recompute at every step; report max |delta|",
       &O::verify_cache, false, false, false, ""},
      {"num_samples", "num_samples", "--num-samples",
       "with --sample: draws per input (draw k uses --seed + k)", &O::num_samples, false, false,
       false, "n", check_num_samples},
  };
  return rows;
}

const DecodingOption* find_decoding_option(std::string_view field) {
  for (const DecodingOption& d : decoding_options())
    if (d.field == field) return &d;
  return nullptr;
}

std::string option_flag(std::string_view field) {
  const DecodingOption* d = find_decoding_option(field);
  return std::string(d ? d->flag : field);
}

std::string option_json(std::string_view field) {
  const DecodingOption* d = find_decoding_option(field);
  return std::string(d ? d->json : field);
}

nlohmann::json option_value(const DecodingOption& d, const GenerateOptions& o) {
  return std::visit(
      [&](auto m) -> nlohmann::json {
        using T = std::remove_cvref_t<decltype(o.*m)>;
        if constexpr (std::is_same_v<T, bool>) return d.negated ? !(o.*m) : o.*m;
        return o.*m;
      },
      d.member);
}

std::optional<std::string> GenerateOptions::problem(const Namer& name) const {
  for (const DecodingOption& d : decoding_options())
    if (d.check)
      if (Problem p = d.check(*this, name)) return p;
  // The rules between options.
  if (sample && beam > 1)
    return name("sample") + " and " + name("beam") + " > 1 cannot be combined";
  if (num_samples > 1 && !sample) return name("num_samples") + " > 1 needs " + name("sample");
  if (num_samples > 1 && on_stream)
    return name("num_samples") + " > 1 cannot be streamed (the draws would interleave)";
  return std::nullopt;
}

std::optional<std::string> given_problem(const GenerateOptions& o,
                                         const std::function<bool(const DecodingOption&)>& given,
                                         const Namer& name) {
  if (!o.sample)
    for (const DecodingOption& d : decoding_options())
      if (d.needs_sample && given(d)) return name(d.field) + " needs " + name("sample");
  if (o.verify_cache && !o.use_cache)
    return name("verify_cache") + " already compares with the uncached recompute; drop " +
           name("use_cache");
  return std::nullopt;
}

std::optional<std::string> set_token_option(const DecodingOption& d, GenerateOptions& o,
                                            const Vocab& vocab,
                                            const std::vector<std::string>& tokens) {
  std::vector<int32_t> ids;
  if (d.keeps_eos) ids.push_back(vocab.eos_id());
  for (const std::string& t : tokens) {
    const std::optional<int32_t> id = vocab.find(t);
    if (!id) return t;
    ids.push_back(*id);
  }
  o.*std::get<std::vector<int32_t> GenerateOptions::*>(d.member) = std::move(ids);
  return std::nullopt;
}

int64_t new_tokens(const ModelConfig& c, size_t input_tokens, const GenerateOptions& o) {
  const int64_t P = c.max_positions;
  const int64_t room = c.arch == Arch::Seq2Seq ? P - 1 : P - static_cast<int64_t>(input_tokens);
  return std::clamp<int64_t>(std::min(o.max_new, room), 0, P);
}

MemoryNeed decoding_need(const ModelConfig& c, size_t input_tokens, size_t inputs,
                         const GenerateOptions& o, const char* rows_are) {
  // Saturating: --num-samples may be 2^63 - 1.
  const int64_t per = std::max<int64_t>(1, o.num_samples > 1 ? o.num_samples : o.beam);
  const auto n = static_cast<int64_t>(std::max<size_t>(1, inputs));
  const int64_t rows =
      per > std::numeric_limits<int64_t>::max() / n ? std::numeric_limits<int64_t>::max() : per * n;
  const bool s2s = c.arch == Arch::Seq2Seq;
  const auto in = static_cast<int64_t>(input_tokens);
  const int64_t length = (s2s ? 1 : in) + new_tokens(c, input_tokens, o);
  return decoding_memory(c, rows, s2s ? in : 0, length, rows_are);
}

void GenerateOptions::validate() const {
  if (auto p = problem([](std::string_view option) { return std::string(option); }))
    fail("generate", "option " + *p);
}

}  // namespace seqtape
