// `seqtape generate`: decode with a trained checkpoint — greedy, beam search or sampling, with
// the KV cache (or without it, or checked against a recompute at every step).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "infer/model.h"
#include "infer/search.h"
#include "infer/trace.h"

namespace seqtape::cli {

namespace {

// Ctrl-C cancels the running generation (stop reason "cancelled"); a second one kills.
std::atomic<bool> g_interrupted{false};
extern "C" void on_sigint(int) {
  g_interrupted = true;
  std::signal(SIGINT, SIG_DFL);
}

struct GenerateArgs {
  std::string model, input, trace;
  std::vector<std::string> end_tokens;       // --end: extra end tokens besides <eos>
  std::vector<std::string> suppress_tokens;  // --suppress: never generated
  CLI::Option *input_o = nullptr, *temperature_o = nullptr, *top_k_o = nullptr, *top_p_o = nullptr,
              *seed_o = nullptr, *n_best_o = nullptr;
  GenerateOptions o;
  bool no_cache = false, json = false, stream = false;
};

// An option's flag: its name with dashes ("n_best" → "--n-best").
std::string flag_of(std::string_view option) {
  if (option == "stop_strings") return "--stop";
  std::string f = "--" + std::string(option);
  std::replace(f.begin(), f.end(), '_', '-');
  return f;
}

// GenerateOptions::problem() in the flags' names, then what only the command line can get wrong.
void check_flags(const GenerateArgs& a) {
  const GenerateOptions& o = a.o;
  if (std::optional<std::string> p = o.problem(flag_of)) throw UsageError(*p);
  if (!o.sample)
    for (CLI::Option* opt : {a.temperature_o, a.top_k_o, a.top_p_o, a.seed_o})
      if (opt->count()) throw UsageError(opt->get_name() + " needs --sample");
  if (a.stream && a.json) throw UsageError("--stream and --json cannot be combined");
  if (a.o.verify_cache && a.no_cache)
    throw UsageError(
        "--verify-cache already compares with the uncached recompute; drop --no-cache");
}

const char* stop_note(StopReason r) {
  switch (r) {
    case StopReason::Eos:
      return "eos (complete)";
    case StopReason::Length:
      return "length: stopped at --max-new or the model's max_positions (output may be "
             "truncated)";
    case StopReason::StopString:
      return "stop_string (the text before it is shown)";
    case StopReason::Cancelled:
      return "cancelled (partial output)";
  }
  return "?";
}

nlohmann::json hypothesis_json(const Hypothesis& h) {
  return {{"tokens", h.tokens},
          {"text", h.text},
          {"score", h.score},
          {"normalized_score", h.normalized_score},
          {"stop_reason", to_string(h.stop_reason)}};
}

void add_flags(CLI::App* sub, GenerateArgs& a) {
  GenerateOptions& o = a.o;
  sub->add_option("--model", a.model, "checkpoint.bin written by seqtape train")->required();
  a.input_o = sub->add_option(
      "--input", a.input,
      "input text (seq2seq: the source; decoder-only: the prompt, encoded as text <sep>); "
      "without it, one input per line of stdin");
  sub->add_option("--beam", o.beam, "beam size (1 = greedy)")->capture_default_str();
  a.n_best_o = sub->add_option("--n-best", o.n_best, "hypotheses to print (<= --beam)")
                   ->capture_default_str();
  sub->add_option("--length-penalty", o.length_penalty,
                  "beam ranking score / length^A (length counts the <eos>)")
      ->capture_default_str();
  sub->add_flag("--sample", o.sample, "sample instead of taking the most likely token");
  a.temperature_o =
      sub->add_option("--temperature", o.temperature, "sampling temperature (0 = greedy)")
          ->capture_default_str();
  a.top_k_o = sub->add_option("--top-k", o.top_k, "sample from the K most likely (0 = all)")
                  ->capture_default_str();
  a.top_p_o = sub->add_option("--top-p", o.top_p,
                              "sample from the smallest set with probability >= P, in (0, 1]")
                  ->capture_default_str();
  a.seed_o = sub->add_option("--seed", o.seed, "sampling seed")->capture_default_str();
  sub->add_option("--repetition-penalty", o.repetition_penalty,
                  "divide positive / multiply negative logits of generated tokens (1 = off)")
      ->capture_default_str();
  sub->add_option("--no-repeat-ngram", o.no_repeat_ngram,
                  "never repeat an n-gram of this size (0 = off)")
      ->capture_default_str();
  sub->add_option("--min-new", o.min_new, "block <eos> before this many new tokens")
      ->capture_default_str();
  sub->add_option("--max-new", o.max_new, "at most this many new tokens")->capture_default_str();
  sub->add_option("--stop", o.stop_strings, "stop before this text (repeatable)");
  sub->add_option("--end", a.end_tokens,
                  "also end at this vocabulary token, like <eos> (repeatable; stop reason eos)");
  sub->add_option("--suppress", a.suppress_tokens,
                  "never generate this vocabulary token (repeatable)");
  sub->add_flag("--no-cache", a.no_cache, "recompute the whole prefix every step (slow)");
  sub->add_flag("--verify-cache", o.verify_cache,
                "compare the cached logits with a recompute at every step; report max |delta|");
  sub->add_flag("--stream", a.stream, "print text as it is generated");
  sub->add_flag("--json", a.json, "one JSON object per input");
  sub->add_option("--trace", a.trace,
                  "write the run step by step as JSON for web/player.html (one --input; format: "
                  "web/TRACE_FORMAT.md): tokens fed, cache lengths, candidates, selections, stop "
                  "checks, attention weights, |cached - recomputed| logits");
}

// Vocabulary tokens named by a flag (--end, --suppress), as ids; a usage error names a token the
// model lacks.
std::vector<int32_t> token_ids(const InferenceModel& model, const std::string& model_path,
                               const std::string& flag, const std::vector<std::string>& tokens) {
  std::vector<int32_t> ids;
  for (const std::string& t : tokens) {
    const std::optional<int32_t> id = model.vocab().find(t);
    if (!id)
      throw UsageError(flag + ": '" + t + "' is not a token of " + model_path + "'s vocabulary (" +
                       std::to_string(model.vocab().size()) + " tokens)");
    ids.push_back(*id);
  }
  return ids;
}

// (context, text) of every input: --input, or one per line of stdin.
std::vector<std::pair<std::string, std::string>> read_inputs(const GenerateArgs& a) {
  std::vector<std::pair<std::string, std::string>> inputs;
  if (a.input_o->count()) {
    inputs.push_back({"--input", a.input});
  } else {
    std::string line;
    for (int n = 1; std::getline(std::cin, line); ++n) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      inputs.push_back({"stdin:" + std::to_string(n), line});
    }
    if (inputs.empty()) fail("generate", "no input: give --input TEXT or lines on stdin");
  }
  if (!a.trace.empty() && inputs.size() != 1)
    throw UsageError("--trace records one run: give exactly one input (--input TEXT)");
  return inputs;
}

// generate() on one input, recorded as a trace into `path`.
GenerateResult run_traced(const InferenceModel& model, const std::vector<int32_t>& ids,
                          const GenerateOptions& o, const std::string& text,
                          const std::string& path) {
  TraceOptions topt;
  topt.input_text = text;
  topt.verify_cache = o.use_cache;  // every step compared with a recompute
  TracedRun tr = generate_traced(model, ids, o, *make_strategy(o), topt);
  std::ofstream out(path, std::ios::binary);
  if (!out) fail(path, "cannot open the trace file for writing");
  out << tr.trace.dump(1) << "\n";
  out.flush();  // a full disk shows at the flush, not at the buffered <<
  if (!out) fail(path, "writing the trace failed");
  std::fprintf(stderr, "trace: %zu steps written to %s\n", tr.trace["steps"].size(), path.c_str());
  return std::move(tr.result);
}

// The result on stdout (text and n-best, or one JSON object) and the summary on stderr.
void print_result(const GenerateArgs& a, const GenerateOptions& o, const std::string& text,
                  const GenerateResult& r, double secs) {
  const auto steps = static_cast<double>(r.cache_lengths.size());
  const double tps = secs > 0 ? steps / secs : 0.0;
  if (a.json) {
    nlohmann::json j = {{"input", text},
                        {"tokens", r.tokens},
                        {"text", r.text},
                        {"score", r.score},
                        {"stop_reason", to_string(r.stop_reason)},
                        {"cache_lengths", r.cache_lengths},
                        {"seconds", secs},
                        {"tokens_per_second", tps},
                        {"cached", o.use_cache}};
    if (o.n_best > 1) {
      j["n_best"] = nlohmann::json::array();
      for (const Hypothesis& h : r.n_best) j["n_best"].push_back(hypothesis_json(h));
    }
    if (o.verify_cache) j["max_abs_delta"] = r.max_abs_delta;
    std::cout << j.dump() << "\n" << std::flush;
  } else {
    if (!a.stream) std::cout << r.text;
    std::cout << "\n";
    if (o.n_best > 1)
      for (size_t k = 0; k < r.n_best.size(); ++k) {
        const Hypothesis& h = r.n_best[k];
        std::printf("  [%zu] score %.4f  normalized %.4f  %s  %s\n", k + 1, h.score,
                    h.normalized_score, to_string(h.stop_reason), h.text.c_str());
      }
    std::cout << std::flush;
  }
  std::fprintf(stderr, "stop: %s\n", stop_note(r.stop_reason));
  std::fprintf(stderr, "%zu tokens in %.3f ms (%.0f tokens/s, %s)\n", r.cache_lengths.size(),
               secs * 1e3, tps, o.use_cache ? "cached" : "uncached");
  if (o.verify_cache)
    std::fprintf(stderr, "verify-cache: max |cached - uncached| logit = %.3g over %zu steps\n",
                 r.max_abs_delta, r.cache_lengths.size());
}

int run_generate(const GenerateArgs& a) {
  check_flags(a);
  GenerateOptions o = a.o;
  o.use_cache = !a.no_cache;
  InferenceModel model = InferenceModel::load(a.model);
  Tokenizer tok(model.vocab());
  if (!a.end_tokens.empty()) {
    o.end_ids = {model.vocab().eos_id()};
    for (int32_t id : token_ids(model, a.model, "--end", a.end_tokens)) o.end_ids.push_back(id);
  }
  o.suppress_ids = token_ids(model, a.model, "--suppress", a.suppress_tokens);
  const auto inputs = read_inputs(a);
  g_interrupted = false;
  std::signal(SIGINT, on_sigint);
  o.cancel = [] { return g_interrupted.load(); };
  if (a.stream)
    o.on_stream = [](const StreamEvent& e) {
      std::fwrite(e.text.data(), 1, e.text.size(), stdout);
      std::fflush(stdout);
    };
  double worst_delta = 0;
  for (const auto& [context, text] : inputs) {
    const std::vector<int32_t> ids = encode_input(model, tok, text, context);
    const auto t0 = std::chrono::steady_clock::now();
    const GenerateResult r = a.trace.empty() ? generate(model, {ids}, o).at(0)
                                             : run_traced(model, ids, o, text, a.trace);
    const double secs =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (o.verify_cache) worst_delta = std::max(worst_delta, r.max_abs_delta);
    print_result(a, o, text, r, secs);
    if (g_interrupted) break;
  }
  std::signal(SIGINT, SIG_DFL);
  if (o.verify_cache && worst_delta > 1e-4) {
    std::fprintf(stderr,
                 "verify-cache FAILED: cached and uncached logits differ by %.3g (> 1e-4)\n",
                 worst_delta);
    return kCheckFailed;
  }
  return kOk;
}

}  // namespace

void register_generate(CLI::App& app, Runner& run) {
  auto a = std::make_shared<GenerateArgs>();
  CLI::App* sub = app.add_subcommand(
      "generate",
      "Generate from a trained checkpoint with a KV cache: greedy, beam search or sampling");
  add_flags(sub, *a);
  sub->callback([&run, a] { run = [a] { return run_generate(*a); }; });
}

}  // namespace seqtape::cli
