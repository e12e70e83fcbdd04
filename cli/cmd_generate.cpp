// `seqtape generate`: decode with a trained checkpoint — greedy, beam search or sampling, with
// the KV cache (or without it, or checked against a recompute at every step).
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/compute_type.h"
#include "cli/decoding_flags.h"
#include "cli/input_guards.h"
#include "cli/output_paths.h"
#include "infer/load.h"
#include "infer/model.h"
#include "infer/result_json.h"
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
  std::string model, input, input_file, output, trace;
  std::string compute_type;  // "" when not given
  int64_t batch_size = 1;
  CLI::Option *input_o = nullptr, *input_file_o = nullptr;
  DecodingFlags decoding;  // the table's flags (infer/options.h)
  bool json = false, stream = false;
};

// The decoding options' checks in the flags' names, then what only the command line can get
// wrong.
void check_flags(const GenerateArgs& a) {
  const GenerateOptions& o = a.decoding.o;
  check_decoding_flags(a.decoding);
  check_stop_strings(o.stop_strings);
  if (a.stream && a.json) throw UsageError("--stream and --json cannot be combined");
  if (a.batch_size < 1)
    throw UsageError("--batch-size must be at least 1, got " + std::to_string(a.batch_size));
  if (a.stream && a.batch_size > 1)
    throw UsageError("--stream prints one input at a time: it needs --batch-size 1");
  if (a.stream && o.num_samples > 1)
    throw UsageError("--stream prints one text per input: it cannot show --num-samples draws");
  if (a.input_o->count() && a.input_file_o->count())
    throw UsageError("--input and --input-file cannot be combined");
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

void add_flags(CLI::App* sub, GenerateArgs& a) {
  sub->add_option("--model", a.model,
                  "checkpoint.bin written by seqtape train, its run directory, or a directory "
                  "written by seqtape export")
      ->required();
  add_compute_type_option(sub, a.compute_type);
  a.input_o = sub->add_option(
      "--input", a.input,
      "input text (seq2seq: the source; decoder-only: the prompt, encoded as text <sep>); "
      "without it (and --input-file), one input per line of stdin");
  a.input_file_o = sub->add_option("--input-file", a.input_file, "one input per line");
  sub->add_option("--output", a.output, "write the results to this file instead of stdout");
  sub->add_option("--batch-size", a.batch_size,
                  "decode this many inputs at once (output keeps input order; 1 answers each "
                  "stdin line as soon as it is read)")
      ->capture_default_str();
  add_decoding_flags(sub, a.decoding);
  sub->add_flag("--stream", a.stream, "print text as it is generated");
  sub->add_flag("--json", a.json, "one JSON object per input");
  sub->add_option("--trace", a.trace,
                  "write the run step by step as JSON for web/player.html (one --input; format: "
                  "web/TRACE_FORMAT.md): tokens fed, cache lengths, candidates, selections, stop "
                  "checks, attention weights, |cached - recomputed| logits");
}

// One input: where it came from (for messages: "--input", "stdin:3", "F:3") and its text.
struct InputLine {
  std::string context, text;
};

// The longest line read from --input-file or stdin: 4 UTF-8 bytes per character of the most
// characters the model's max_positions tokens can hold (a longer line is refused by
// encode_input anyway), and at least 1 MiB so that such a line still gets its own error and the
// other lines their answers. Reading stops at a longer line: an endless one (a stream without a
// newline) must not grow without bound.
size_t max_line_bytes(const InferenceModel& model) {
  const auto chars = static_cast<size_t>(model.config().max_positions) *
                     static_cast<size_t>(model.codec().max_token_chars());
  return std::max<size_t>(size_t{1} << 20, 4 * chars);
}

// --input-file: a regular file, or a pipe (`<(command)`), never a directory or a device that
// never ends (/dev/zero), as for a TSV (read_user_file).
void check_input_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    fail(path, std::string("cannot open the input file: ") + std::strerror(errno));
  if (S_ISDIR(st.st_mode)) fail(path, "is a directory, not a file of inputs (one per line)");
  if (!S_ISREG(st.st_mode) && !S_ISFIFO(st.st_mode))
    fail(path, "is a device or socket, not a file of inputs (one per line)");
}

// The inputs one at a time: --input, the lines of --input-file, or stdin's lines as they arrive
// (never read ahead, so --batch-size 1 answers each line before reading the next).
class InputSource {
 public:
  InputSource(const GenerateArgs& a, size_t max_line) : a_(a), max_line_(max_line) {
    if (a.input_file_o->count()) {
      check_input_file(a.input_file);
      file_.open(a.input_file, std::ios::binary);
      if (!file_) fail(a.input_file, "cannot open the input file");
      in_ = &file_;
      name_ = a.input_file;
    }
  }

  std::optional<InputLine> next() {
    if (a_.input_o->count()) {
      if (given_) return std::nullopt;
      given_ = true;
      return InputLine{"--input", a_.input};
    }
    std::string line;
    if (!read_line(line)) return std::nullopt;
    if (!line.empty() && line.back() == '\r') line.pop_back();  // CRLF
    // A UTF-8 byte-order mark (Windows editors write one) is not part of the first input, as
    // for a TSV (train/dataset.cpp).
    if (line_no_ == 0 && line.starts_with("\xEF\xBB\xBF")) line.erase(0, 3);
    return InputLine{name_ + ":" + std::to_string(++line_no_), line};
  }

 private:
  // std::getline with a bound: false at the end of the input.
  bool read_line(std::string& line) {
    if (in_->tie()) in_->tie()->flush();  // as std::getline does: answers out before waiting
    std::streambuf& buf = *in_->rdbuf();
    for (int c = buf.sbumpc(); c != '\n'; c = buf.sbumpc()) {
      if (c == std::char_traits<char>::eof()) return !line.empty();
      if (line.size() >= max_line_)
        fail(name_ + ":" + std::to_string(line_no_ + 1),
             "the line is longer than " + std::to_string(max_line_) +
                 " bytes, more than the model's max_positions tokens can hold; stopped reading "
                 "(split or shorten the line)");
      line.push_back(static_cast<char>(c));
    }
    return true;
  }

  const GenerateArgs& a_;
  size_t max_line_;
  std::ifstream file_;
  std::istream* in_ = &std::cin;
  std::string name_ = "stdin";
  int64_t line_no_ = 0;
  bool given_ = false;
};

// generate() on one input, recorded as a trace into `path`.
GenerateResult run_traced(const InferenceModel& model, const std::vector<int32_t>& ids,
                          const GenerateOptions& o, const std::string& text,
                          const std::string& path, bool quiet) {
  TraceOptions topt;
  topt.input_text = text;
  topt.verify_cache = o.use_cache;  // every step compared with a recompute
  TracedRun tr = generate_traced(model, ids, o, *make_strategy(o), topt);
  std::ofstream out(path, std::ios::binary);
  if (!out) fail(path, "cannot open the trace file for writing");
  out << tr.trace.dump(1) << "\n";
  out.flush();  // a full disk shows at the flush, not at the buffered <<
  if (!out) fail(path, "writing the trace failed");
  if (!quiet)
    std::fprintf(stderr, "trace: %zu steps written to %s\n", tr.trace["steps"].size(),
                 path.c_str());
  return std::move(tr.result);
}

// The result on `out` (text and n-best or samples, or one JSON object) and, without --json, the
// summary on stderr.
void print_result(const GenerateArgs& a, const GenerateOptions& o, const InputLine& in, int64_t unk,
                  const GenerateResult& r, double secs, std::ostream& out) {
  if (a.json) {
    out << result_json(in.text, unk, r, o, secs).dump() << "\n" << std::flush;
    return;
  }
  if (!a.stream) out << r.text;
  out << "\n";
  if (o.n_best > 1 || o.num_samples > 1)
    for (size_t k = 0; k < r.n_best.size(); ++k) {
      const Hypothesis& h = r.n_best[k];
      char head[96];
      std::snprintf(head, sizeof head, "  [%zu] score %.4f  normalized %.4f  %s  ", k + 1, h.score,
                    h.normalized_score, to_string(h.stop_reason));
      out << head << h.text << "\n";
    }
  out << std::flush;
  const double tps = secs > 0 ? double(r.cache_lengths.size()) / secs : 0.0;
  std::fprintf(stderr, "stop: %s\n", stop_note(r.stop_reason));
  std::fprintf(stderr, "%zu tokens in %.3f ms (%.0f tokens/s, %s%s)\n", r.cache_lengths.size(),
               secs * 1e3, tps, o.use_cache ? "cached" : "uncached",
               a.batch_size > 1 ? ", batch wall time" : "");
  if (o.verify_cache)
    std::fprintf(stderr, "verify-cache: max |cached - uncached| logit = %.3g over %zu steps\n",
                 r.max_abs_delta, r.cache_lengths.size());
}

// Everything one run shares: the model, its tokenizer, the options and where results go.
struct Run {
  const GenerateArgs& a;
  const InferenceModel& model;
  const TextCodec& tok;
  const GenerateOptions& o;
  std::ostream& out;
  double worst_delta = 0;
  int64_t bad_lines = 0;  // stdin or --input-file lines that could not be decoded
};

// The answer to an input line that cannot be decoded (blank, not UTF-8, too long...): its error
// on stderr, and in its place on the output an empty line (or, with --json, an object naming the
// input and the error). The other lines are answered.
void print_line_error(Run& run, const InputLine& in, const std::string& what) {
  ++run.bad_lines;
  std::cerr << "seqtape: error: " << what << "\n";
  if (run.a.json)
    run.out << nlohmann::json{{"input", in.text}, {"error", what}}.dump(
                   -1, ' ', false, nlohmann::json::error_handler_t::replace)
            << "\n";
  else
    run.out << "\n";
  run.out << std::flush;
}

// <unk> ids in an encoded input (the text cannot contain the token itself); warns without --json.
int64_t count_unk(const Run& run, const InputLine& in, const std::vector<int32_t>& ids) {
  const int64_t n = unk_count(run.model.vocab(), ids);
  if (n > 0 && !run.a.json)
    std::fprintf(stderr, "warning: %s: %lld character(s) not in the vocabulary became <unk>\n",
                 in.context.c_str(), static_cast<long long>(n));
  return n;
}

// Encodes and decodes one batch of inputs together, then prints each in input order.
void decode_batch(Run& run, const std::vector<InputLine>& batch) {
  std::vector<std::vector<int32_t>> ids;
  std::vector<int64_t> unk;
  std::vector<std::string> problem(batch.size());  // why a line cannot be decoded ("" if it can)
  for (size_t i = 0; i < batch.size(); ++i) {
    const InputLine& in = batch[i];
    try {
      ids.push_back(encode_input(run.model, run.tok, in.text, in.context));
    } catch (const Error& e) {
      if (run.a.input_o->count()) throw;
      problem[i] = e.what();
      continue;
    }
    if (!run.a.trace.empty()) check_trace_size(run.model, ids.back().size(), run.o);
    unk.push_back(count_unk(run, in, ids.back()));
  }
  if (ids.empty()) {
    for (size_t i = 0; i < batch.size(); ++i) print_line_error(run, batch[i], problem[i]);
    return;
  }
  size_t longest = 0;
  for (const std::vector<int32_t>& v : ids) longest = std::max(longest, v.size());
  check_decoding_budget(run.model, longest, run.o, "generate", ids.size());
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<GenerateResult> results =
      run.a.trace.empty() ? generate(run.model, ids, run.o)
                          : std::vector{run_traced(run.model, ids[0], run.o, batch[0].text,
                                                   run.a.trace, run.a.json)};
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  for (size_t i = 0, k = 0; i < batch.size(); ++i) {
    if (!problem[i].empty()) {
      print_line_error(run, batch[i], problem[i]);
      continue;
    }
    if (run.o.verify_cache) run.worst_delta = std::max(run.worst_delta, results[k].max_abs_delta);
    print_result(run.a, run.o, batch[i], unk[k], results[k], secs, run.out);
    ++k;
  }
}

// Reads up to --batch-size inputs at a time and decodes them; returns the inputs decoded.
int64_t decode_all(Run& run, InputSource& src) {
  int64_t total = 0;
  std::vector<InputLine> batch;
  for (;;) {
    batch.clear();
    while (static_cast<int64_t>(batch.size()) < run.a.batch_size)
      if (std::optional<InputLine> in = src.next()) {
        batch.push_back(std::move(*in));
      } else {
        break;
      }
    if (batch.empty()) break;
    if (!run.a.trace.empty() && (total > 0 || batch.size() > 1 || src.next()))
      throw UsageError("--trace records one run: give exactly one input (--input TEXT)");
    decode_batch(run, batch);
    total += static_cast<int64_t>(batch.size());
    if (g_interrupted || !run.out) break;  // a failed output: check_written names it
  }
  return total;
}

// --output and --trace: files, and none of the command's inputs (nor each other).
void check_outputs(const GenerateArgs& a) {
  std::vector<FlagPath> inputs = model_inputs("--model", a.model);
  if (a.input_file_o->count()) inputs.push_back({"--input-file", a.input_file});
  for (const FlagPath& out : {FlagPath{"--output", a.output}, FlagPath{"--trace", a.trace}}) {
    if (out.path.empty()) continue;
    check_not_a_directory(out);
    check_not_an_input(out, inputs);
    inputs.push_back(out);
  }
}

int run_generate(const GenerateArgs& a) {
  check_flags(a);
  check_outputs(a);
  InferenceModel model = load_decoding_model(a.model, a.compute_type);
  const TextCodec& tok = model.codec();
  GenerateOptions o = decoding_options_for(a.decoding, model.vocab(), a.model);
  std::ofstream file;
  if (!a.output.empty()) {
    file.open(a.output, std::ios::binary);
    if (!file) fail(a.output, std::string("cannot open for writing: ") + std::strerror(errno));
  }
  std::ostream& out = a.output.empty() ? std::cout : file;
  InputSource src(a, max_line_bytes(model));
  g_interrupted = false;
  std::signal(SIGINT, on_sigint);
  o.cancel = [] { return g_interrupted.load(); };
  if (a.stream) o.on_stream = [&out](const StreamEvent& e) { out << e.text << std::flush; };
  Run run{a, model, tok, o, out};
  const int64_t n = decode_all(run, src);
  std::signal(SIGINT, SIG_DFL);
  if (n == 0)
    fail(a.input_file_o->count() ? a.input_file : "stdin",
         "no input: give --input TEXT, --input-file F or lines on stdin");
  check_written(out, a.output.empty() ? "stdout" : a.output);
  if (run.bad_lines > 0) {
    std::fprintf(stderr, "seqtape: error: %lld of %lld input lines could not be decoded\n",
                 static_cast<long long>(run.bad_lines), static_cast<long long>(n));
    return kDataError;
  }
  if (o.verify_cache && run.worst_delta > 1e-4) {
    std::fprintf(stderr,
                 "verify-cache FAILED: cached and uncached logits differ by %.3g (> 1e-4)\n",
                 run.worst_delta);
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
