// `seqtape walkthrough`: the reference documents' worked examples, computed live by the library
// and printed as tables beside the numbers the documents print.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/commands.h"
#include "cli/output_paths.h"
#include "reference/encdec.h"
#include "reference/f15.h"
#include "text/tokenizer.h"

namespace seqtape::cli {

namespace {

namespace fs = std::filesystem;
using namespace seqtape::reference;

struct WalkArgs {
  std::string write_f15;  // directory
  std::string f15_checkpoint;
  std::string trace_out;
  std::string embed_in, embed_out;
  bool only_f15 = false, only_encdec = false;
};

// Terminal columns of a UTF-8 string: CJK and full-width characters take two.
size_t display_width(const std::string& s) {
  size_t w = 0;
  for (size_t i = 0; i < s.size();) {
    Utf8Char c = utf8_decode_one(s, i);
    if (c.err != Utf8Error::kNone) {
      ++w;
      ++i;
      continue;
    }
    const char32_t cp = c.cp;
    const bool wide = (cp >= 0x1100 && cp <= 0x115F) || (cp >= 0x2E80 && cp <= 0xA4CF) ||
                      (cp >= 0xAC00 && cp <= 0xD7A3) || (cp >= 0xF900 && cp <= 0xFAFF) ||
                      (cp >= 0xFE30 && cp <= 0xFE4F) || (cp >= 0xFF00 && cp <= 0xFF60) ||
                      (cp >= 0xFFE0 && cp <= 0xFFE6);
    w += wide ? 2 : 1;
    i += c.len;
  }
  return w;
}

// A plain text table: columns padded to their widest cell (by display width).
class Table {
 public:
  explicit Table(std::vector<std::string> header) : rows_{std::move(header)} {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  void print(std::ostream& os, const std::string& indent = "  ") const {
    std::vector<size_t> width;
    for (const auto& r : rows_)
      for (size_t i = 0; i < r.size(); ++i) {
        if (width.size() <= i) width.push_back(0);
        width[i] = std::max(width[i], display_width(r[i]));
      }
    for (size_t k = 0; k < rows_.size(); ++k) {
      std::string line = indent;
      for (size_t i = 0; i < rows_[k].size(); ++i) {
        line += rows_[k][i];
        if (i + 1 < rows_[k].size())
          line += std::string(width[i] - display_width(rows_[k][i]) + 2, ' ');
      }
      while (!line.empty() && line.back() == ' ') line.pop_back();
      os << line << "\n";
      if (k == 0) {
        size_t total = 0;
        for (size_t i = 0; i < width.size(); ++i)
          total += width[i] + (i + 1 < width.size() ? 2 : 0);
        os << indent << std::string(total, '-') << "\n";
      }
    }
  }

 private:
  std::vector<std::vector<std::string>> rows_;
};

std::string fmt(double x, int digits = 4) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, x);
  std::string s = buf;
  if (s.rfind("-0.", 0) == 0 && std::stod(s) == 0.0) s = s.substr(1);  // no "-0.0000"
  return s;
}

std::string fmt_g(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2e", x);
  return buf;
}

template <typename T>
std::string list(const std::vector<T>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + std::to_string(v[i]);
  return s + "]";
}

std::string tokens_of(const Vocab& vocab, const std::vector<int32_t>& ids) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? " " : "") + vocab.token(ids[i]);
  return s;
}

void heading(std::ostream& os, const std::string& title) {
  os << "\n" << title << "\n" << std::string(display_width(title), '=') << "\n";
}

void section(std::ostream& os, const std::string& title) {
  os << "\n" << title << "\n";
}

// ---- the encoder-decoder document -----------------------------------------------------------

void print_ids(std::ostream& os, const Vocab& vocab) {
  section(os, "1. Special tokens and ids of the copy sample 今天天气很好");
  std::string v;
  for (int32_t i = 0; i < vocab.size(); ++i)
    v += (i ? "  " : "") + vocab.token(i) + ":" + std::to_string(i);
  os << "  vocabulary  " << v << "\n\n";
  Example ex = copy_example();
  Table ids({"sequence", "rule", "tokens", "ids (computed)", "ids (document)"});
  ids.add({"encoder input", "source + <eos>", tokens_of(vocab, ex.enc), list(ex.enc),
           "[3,4,4,5,6,7,2]"});
  ids.add({"decoder input", "<bos> + target", tokens_of(vocab, ex.dec_in), list(ex.dec_in),
           "[1,3,4,4,5,6,7]"});
  ids.add({"labels", "target + <eos>", tokens_of(vocab, ex.labels), list(ex.labels),
           "[3,4,4,5,6,7,2]"});
  ids.print(os);
  os << "  teacher forcing: the labels are the decoder input shifted left by one.\n";
}

void print_pe_table(std::ostream& os) {
  section(os, "2. Sinusoidal positional encoding, d = 4, base 100: computed (document)");
  Tensor pe = reference_pe_table();
  auto printed = printed_pe_rows();
  Table pt({"pos", "PE(p,0) sin", "PE(p,1) cos", "PE(p,2) sin", "PE(p,3) cos"});
  for (int64_t p = 0; p < 7; ++p) {
    std::vector<std::string> row = {std::to_string(p)};
    for (int64_t j = 0; j < 4; ++j)
      row.push_back(fmt(pe.get(p * 4 + j), 4) + " (" +
                    fmt(printed[static_cast<size_t>(p)][static_cast<size_t>(j)], 2) + ")");
    pt.add(row);
  }
  pt.print(os);
  os << "  PE(p,2i) = sin(p / 100^(2i/4)), PE(p,2i+1) = cos(p / 100^(2i/4)); largest |computed - "
        "printed| = "
     << fmt(pe_max_abs_diff(), 4) << " (every entry within 0.01)\n";
}

void print_causal_mask(std::ostream& os) {
  section(os, "3. Causal mask of the decoder (7 positions): 1 = hidden; softmax of zero scores");
  auto mask = causal_mask_rows(7);
  auto sm = causal_softmax_of_zeros(7);
  Table mt({"query", "mask over keys 0..6", "softmax(masked zeros) over keys 0..6"});
  for (size_t i = 0; i < mask.size(); ++i) {
    std::string m, w;
    for (size_t j = 0; j < mask[i].size(); ++j) {
      m += (j ? " " : "") + std::to_string(mask[i][j]);
      w += (j ? " " : "") + fmt(sm[i][j], 2);
    }
    mt.add({std::to_string(i), m, w});
  }
  mt.print(os);
  os << "  masked scores are -inf, so their softmax weight is exactly 0.\n";
}

void print_cross_entropy(std::ostream& os) {
  section(os, "4. Cross-entropy (the library's cross_entropy on constructed logits)");
  Table ct({"quantity", "computed", "document"});
  ct.add({"-log p(target), p = 0.131", fmt(cross_entropy_for_prob(kPrintedTargetProb), 4), "2.03"});
  double sum = 0;
  for (double l : kPrintedLosses) sum += l;
  std::string ls;
  for (double l : kPrintedLosses) ls += (ls.empty() ? "" : " ") + fmt(l, 2);
  ct.add({"mean of the 7 losses " + ls, fmt(mean_cross_entropy_of_printed_losses(), 4),
          fmt(kPrintedMeanLoss, 2)});
  ct.print(os);
  os << "  (seven rows whose target probabilities are exp(-loss), targets = the labels above)\n";
}

void print_padded_batch(std::ostream& os) {
  section(os, "5. Padded batch: pad positions get no attention, no loss, no gradient");
  PaddedBatchCheck pb = padded_batch_check();
  Table bt({"row", "encoder input", "length"});
  for (size_t r = 0; r < pb.src_tokens.size(); ++r) {
    std::string s;
    for (const auto& t : pb.src_tokens[r]) s += (s.empty() ? "" : " ") + t;
    bt.add({std::to_string(r), "[" + s + "]", std::to_string(pb.batch.src_len[r])});
  }
  bt.print(os);
  os << "\n";
  Table at({"attention module (row 0)", "largest weight on a pad key"});
  for (const auto& [name, w] : pb.max_weight_on_pad) at.add({name, fmt(w, 4)});
  at.print(os);
  os << "\n";
  Table lt({"check", "value"});
  lt.add({"label tokens (pad labels ignored)",
          std::to_string(pb.label_tokens) + " of " + std::to_string(pb.batch.B * pb.batch.T)});
  lt.add({"batch loss", fmt(pb.loss, 6)});
  lt.add({"batch loss with every pad id replaced by 是", fmt(pb.loss_pads_changed, 6)});
  lt.add({"each row alone, unpadded, token-weighted", fmt(pb.loss_rows_separately, 6)});
  lt.add({"max |dL/d embed[<pad>]|", fmt(pb.pad_row_grad_max, 6)});
  lt.add({"max |dL/d embed[是]| when the pads hold 是", fmt(pb.changed_pad_row_grad_max, 6)});
  lt.add({"max |dL/d embed[今]| (a real token, for contrast)", fmt(pb.real_row_grad_max, 6)});
  lt.print(os);
  os << "  model: Seq2Seq preset 'seed' (d_model 4, 1 head, 2+2 layers, FFN 16, post-norm, PE "
        "base 100), seeded, untrained.\n";
}

void print_encdec(std::ostream& os) {
  heading(os, "Encoder-decoder, training step by step (reference document 004)");

  Vocab vocab = copy_vocab();
  print_ids(os, vocab);
  print_pe_table(os);
  print_causal_mask(os);
  print_cross_entropy(os);
  print_padded_batch(os);
}

// ---- F15 --------------------------------------------------------------------------------------

void print_output_head(std::ostream& os) {
  section(os, "1. The output head: h = [1,2] times the 2x6 teaching Wout (library matmul)");
  OutputHeadExample ex = output_head_example();
  Table ht({"", "c0", "c1", "c2", "c3", "c4", "c5"});
  for (size_t r = 0; r < ex.w.size(); ++r) {
    std::vector<std::string> row = {"Wout row " + std::to_string(r) + " (h=" + fmt(ex.h[r], 0) +
                                    ")"};
    for (double x : ex.w[r]) row.push_back(fmt(x, 0));
    ht.add(row);
  }
  std::vector<std::string> srow = {"h·Wout"};
  for (double x : ex.scores) srow.push_back(fmt(x, 0));
  ht.add(srow);
  ht.print(os);
  os << "  argmax = " << ex.argmax << " (document: [0,1,2,3,-1,-2], argmax 3)\n";
}

void print_tiny_model(std::ostream& os, const Vocab& vocab, const DecoderOnly& model,
                      const F15Fit* fit, const std::string& origin) {
  section(os, "2. The tiny model");
  std::string v;
  for (int32_t i = 0; i < vocab.size(); ++i)
    v += (i ? "  " : "") + vocab.token(i) + ":" + std::to_string(i);
  os << "  vocabulary  " << v << "   (0 and 4 are ours: <pad>, <bos>)\n";
  os << "  decoder-only, d_model 4, 1 layer, 1 head causal self-attention, residual, tanh FFN "
        "(d_ff 8), no norm, no positional encoding; "
     << model.num_parameters() << " parameters\n";
  os << "  weights: " << origin << "\n";
  if (fit) {
    os << "  head fit: " << fit->steps << " steps of full-batch SGD (lr " << fmt(fit->lr, 1)
       << ") on [1,2]->3, [1,2,3]->5, [1,2,3,5]->6; loss " << fmt(fit->first_loss, 4) << " -> "
       << fmt(fit->final_loss, 4) << "; " << fit->frozen_without_grad
       << " frozen tensors received no gradient\n";
    std::string p, m;
    for (size_t i = 0; i < fit->target_prob.size(); ++i) {
      p += (i ? " " : "") + fmt(fit->target_prob[i], 3);
      m += (i ? " " : "") + fmt(fit->margin[i], 2);
    }
    os << "  target probabilities " << p << ", logit margins " << m << "\n";
  }
}

// One row per round: what was fed, the cache, the pick, and |Δ| against both recomputes.
void print_rounds_table(std::ostream& os, const Vocab& vocab, const std::vector<Round>& rounds,
                        const std::vector<Round>& full) {
  Table rt({"round", "phase", "tokens fed", "cache", "selected", "top candidates (probability)",
            "stop", "|Δ| recompute", "|Δ| training"});
  for (size_t i = 0; i < rounds.size(); ++i) {
    const Round& r = rounds[i];
    std::string top;
    for (const Candidate& c : r.top)
      top += (top.empty() ? "" : "  ") + c.token + " " + fmt(c.prob, 3);
    std::string fed = tokens_of(vocab, r.fed) + " " + list(r.fed);
    double vs_training = 0;
    if (i < full.size())
      for (size_t v = 0; v < r.logits.size(); ++v)
        vs_training = std::max(vs_training, std::abs(r.logits[v] - full[i].logits[v]));
    rt.add({std::to_string(r.index + 1), r.phase, fed,
            std::to_string(r.cache_before) + " -> " + std::to_string(r.cache_after),
            r.selected.token + " (" + std::to_string(r.selected.id) + ")", top,
            r.stop ? *r.stop : "-", r.max_abs_delta ? fmt_g(*r.max_abs_delta) : "n/a",
            i < full.size() ? fmt_g(vs_training) : "n/a"});
  }
  rt.print(os);
}

void print_logits_and_attention(std::ostream& os, const Vocab& vocab,
                                const std::vector<Round>& rounds) {
  Table lg({"round", "logits over <pad> 我 爱 学习 <bos> ！ <eos>"});
  for (const Round& r : rounds) {
    std::string s;
    for (double z : r.logits) s += (s.empty() ? "" : " ") + fmt(z, 3);
    lg.add({std::to_string(r.index + 1), s});
  }
  lg.print(os);

  Table at({"round", "self-attention of each position fed (query) over the cache (keys)"});
  for (const Round& r : rounds)
    for (const AttentionRows& a : r.attention)
      for (size_t q = 0; q < a.rows.size(); ++q) {
        std::string w;
        for (size_t k = 0; k < a.weights[q].size(); ++k)
          w += (k ? "  " : "") + vocab.token(r.sequence[static_cast<size_t>(a.cols[k])]) + " " +
               fmt(a.weights[q][k], 3);
        at.add({q == 0 ? std::to_string(r.index + 1) : "",
                vocab.token(r.sequence[static_cast<size_t>(a.rows[q])]) + " -> " + w});
      }
  os << "\n";
  at.print(os);
}

void print_greedy_rounds(std::ostream& os, const Vocab& vocab, DecoderOnly& model) {
  section(os, "3. Greedy generation from 我爱 = [1,2]");
  std::vector<int32_t> prompt = Tokenizer(vocab).encode("我爱");
  const std::vector<Round> rounds = greedy_rounds_cached(model, vocab, prompt, 8).rounds;
  const std::vector<Round> full = greedy_rounds_recompute(model, vocab, prompt, 8);
  print_rounds_table(os, vocab, rounds, full);
  std::vector<int32_t> sel;
  std::vector<int64_t> cache;
  for (const Round& r : rounds) sel.push_back(r.selected.id), cache.push_back(r.cache_after);
  os << "  selections " << list(sel) << ", cache lengths " << list(cache)
     << " (document: [3,5,6], [2,3,4])\n";
  os << "  decoded by the KV-cached engine (infer/): prefill feeds the prompt, each decode feeds "
        "only the token selected before it.\n"
        "  |Δ| recompute = max |cached logits - the same engine recomputing the whole prefix "
        "without a cache|;\n"
        "  |Δ| training  = max |cached logits - the training model's forward over the whole "
        "prefix| (float32).\n\n";
  print_logits_and_attention(os, vocab, rounds);
}

void print_state_example(std::ostream& os, const Vocab& vocab, DecoderOnly& model) {
  section(os, "4. Selected is not processed: the state example on prompt [1,2,3] (DecodeSession)");
  Table st({"event", "output", "cache length", "selected, not yet processed"});
  for (const StateRow& s : state_example(model))
    st.add({s.event, tokens_of(vocab, s.output) + " " + list(s.output), std::to_string(s.cache),
            s.pending.empty() ? "-" : tokens_of(vocab, s.pending)});
  st.print(os);
  os << "  the document's given probabilities [0.6,0.3,0.1] over ids [4,5,<eos>]: greedy picks "
     << greedy_pick({4, 5, 6}, {0.6, 0.3, 0.1}) << " (the highest; it does not sample)\n";
}

void print_streaming(std::ostream& os, const Vocab& vocab) {
  section(os, "5. Streaming: 学习 is one token of two characters");
  Utf8StreamBuffer buf;
  std::string shown;
  const std::string bytes = Tokenizer(vocab).decode(std::vector<int32_t>{3, 5});
  // Feed the bytes one at a time, as a stream might cut them, and show only complete characters.
  int held = 0;
  for (char c : bytes) {
    buf.feed(std::string(1, c));
    std::string out = buf.take_complete();
    if (out.empty()) ++held;
    shown += out;
  }
  shown += buf.finish();
  os << "  tokens [3,5] decode to \"" << shown << "\" (" << bytes.size()
     << " UTF-8 bytes); fed byte by byte, " << held
     << " of them were held back as incomplete characters.\n";
}

void print_f15(std::ostream& os, DecoderOnly& model, const F15Fit* fit, const std::string& origin) {
  heading(os, "F15: from the last row, to one token, to an answer (reference document 000)");
  Vocab vocab = f15_vocab();
  print_output_head(os);
  print_tiny_model(os, vocab, model, fit, origin);
  print_greedy_rounds(os, vocab, model);
  print_state_example(os, vocab, model);
  print_streaming(os, vocab);
}

void write_text(const std::string& path, const std::string& text) {
  if (!fs::path(path).parent_path().empty()) fs::create_directories(fs::path(path).parent_path());
  std::ofstream out(path, std::ios::binary);
  if (!out) fail(path, "cannot open for writing");
  out << text;
  out.flush();  // a full disk shows at the flush, not at the buffered <<
  if (!out) fail(path, "write failed");
}

// --out (of --embed-trace), --trace and --write-f15's files: never the trace or checkpoint read.
void check_outputs(const WalkArgs& a) {
  const std::vector<FlagPath> inputs = {{"--embed-trace", a.embed_in},
                                        {"--f15-checkpoint", a.f15_checkpoint}};
  for (const FlagPath& out : {FlagPath{"--out", a.embed_out}, FlagPath{"--trace", a.trace_out}}) {
    if (out.path.empty()) continue;
    check_not_a_directory(out);
    check_not_an_input(out, inputs);
  }
  if (!a.write_f15.empty())
    for (const char* name : {"vocab.txt", "checkpoint.bin", "run.json"})
      check_not_an_input({"--write-f15", (fs::path(a.write_f15) / name).string()}, inputs);
}

int run_walkthrough(const WalkArgs& a) {
  check_outputs(a);
  if (!a.embed_in.empty() || !a.embed_out.empty()) {
    if (a.embed_in.empty() || a.embed_out.empty())
      throw UsageError("--embed-trace needs both the trace JSON and --out FILE.js");
    std::ifstream in(a.embed_in);
    if (!in) fail(a.embed_in, "cannot open the trace");
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(in);
    } catch (const nlohmann::json::exception& e) {
      fail(a.embed_in, std::string("invalid JSON: ") + e.what());
    }
    if (j.value("format", "") != "seqtape-trace") fail(a.embed_in, "not a seqtape-trace file");
    write_text(
        a.embed_out,
        "// Generated by `seqtape walkthrough --embed-trace " +
            fs::path(a.embed_in).filename().string() +
            "`: a seqtape-trace (web/TRACE_FORMAT.md) embedded so that web/player.html\n"
            "// works from file://. The shipped F15 one comes from `seqtape generate --model "
            "datasets/f15/checkpoint.bin --input 我爱 --trace f15_trace.json`.\n"
            "window.SEQTAPE_EMBEDDED_TRACE = " +
            j.dump() + ";\n");
    std::cout << "wrote " << a.embed_out << "\n";
    return kOk;
  }
  if (!a.write_f15.empty()) {
    F15Model m = write_f15(a.write_f15);
    std::cout << "wrote " << (fs::path(a.write_f15) / "vocab.txt").string() << ", run.json and "
              << (fs::path(a.write_f15) / "checkpoint.bin").string() << " (head fitted in "
              << m.fit.steps << " steps)\n";
    return kOk;
  }
  F15Model m;
  std::string origin;
  if (!a.f15_checkpoint.empty()) {
    m.model = load_f15_model(a.f15_checkpoint);
    origin = "loaded from " + a.f15_checkpoint;
  } else {
    m = make_f15_model();
    origin = "frozen weights drawn from seed 15 (multiples of 0.01), head fitted now";
  }
  if (!a.trace_out.empty()) {
    Vocab vocab = f15_vocab();
    nlohmann::json j = greedy_rounds_cached(*m.model, vocab, {1, 2}, 8).trace;
    write_text(a.trace_out, j.dump(1) + "\n");
    std::cout << "wrote " << a.trace_out << "\n";
    return kOk;
  }
  std::cout << "seqtape walkthrough: the reference documents' examples, computed live by the "
               "library (document values in parentheses or beside).\n";
  if (!a.only_f15) print_encdec(std::cout);
  if (!a.only_encdec)
    print_f15(std::cout, *m.model, a.f15_checkpoint.empty() ? &m.fit : nullptr, origin);
  return kOk;
}

}  // namespace

void register_walkthrough(CLI::App& app, Runner& run) {
  auto a = std::make_shared<WalkArgs>();
  CLI::App* sub = app.add_subcommand(
      "walkthrough",
      "Print the reference documents' worked examples computed live: ids, positional encoding, "
      "causal mask, losses, the padded batch, the output head and the F15 generation rounds");
  sub->footer(
      "Examples:\n"
      "  seqtape walkthrough                      both documents\n"
      "  seqtape walkthrough --f15                the F15 model only\n"
      "  seqtape walkthrough --f15-checkpoint datasets/f15/checkpoint.bin\n"
      "  seqtape walkthrough --write-f15 datasets/f15   regenerate vocab.txt, checkpoint.bin, "
      "run.json\n"
      "  seqtape walkthrough --trace f15.json     the F15 run as a trace for web/player.html\n"
      "  seqtape walkthrough --embed-trace f15.json --out web/f15_trace.js");
  auto* f15 = sub->add_flag("--f15", a->only_f15, "print only the F15 (decoder-only) document");
  sub->add_flag("--encdec", a->only_encdec, "print only the encoder-decoder document")
      ->excludes(f15);
  sub->add_option("--f15-checkpoint", a->f15_checkpoint,
                  "use this F15 checkpoint instead of rebuilding the model from its seed")
      ->check(CLI::ExistingFile);
  sub->add_option(
      "--write-f15", a->write_f15,
      "write the F15 vocab.txt, checkpoint.bin and run.json (deterministic) into DIR and exit");
  sub->add_option("--trace", a->trace_out, "write the F15 greedy run as a trace JSON and exit");
  sub->add_option(
         "--embed-trace", a->embed_in,
         "wrap a trace JSON as a script defining window.SEQTAPE_EMBEDDED_TRACE (with --out)")
      ->check(CLI::ExistingFile);
  sub->add_option("--out", a->embed_out, "output .js file for --embed-trace");
  sub->callback([&run, a] { run = [a] { return run_walkthrough(*a); }; });
}

}  // namespace seqtape::cli
