#pragma once
// RowSearch: the search of one input on its own rows of a decoding session, advanced one model
// call at a time — it says what its rows are fed, takes their logits and chooses. DecodeLoop
// steps any set of them together, one Stepper call per step over all their rows. generate()
// starts every input at once (SearchStrategy::run); the server's continuous scheduler adds
// inputs as rows free up and removes them when they finish. The strategies (greedy, sampling,
// beam) make them: SearchStrategy::start().
//
// Since every row's logits are independent of the other rows of a call (infer/layers), a
// search advances the same way whichever searches share its steps.
//
// Dimension key: n rows one search feeds in a call, V vocabulary.

#include <cstdint>
#include <span>
#include <vector>

#include "infer/options.h"
#include "infer/stepper.h"

namespace seqtape {

// The rows and tokens of one call: row rows[i] is fed tokens[offsets[i] .. offsets[i + 1]).
struct Feed {
  std::vector<int32_t> rows, tokens, offsets{0};
  void clear();
  void add(int32_t row, std::span<const int32_t> fed);
};

class RowSearch {
 public:
  virtual ~RowSearch() = default;
  // Appends this call's feed of every live row, in the order the logits come back (the first
  // call prefills <bos> or the prompt, later ones the tokens chosen last).
  virtual void feed(Feed& f) const = 0;
  // Takes the logits [n, V] of the rows it fed, in feed order, and chooses.
  virtual void advance(const float* logits, const Stepper& st) = 0;
  // After advance: rows whose cache must become another row's (beams), as (row, parent) pairs,
  // parent < 0 for a row left empty. Nothing for one-row searches.
  virtual void reorder(std::vector<int32_t>& rows, std::vector<int32_t>& parents) const {
    (void)rows, (void)parents;
  }
  virtual bool done() const = 0;
  // Stops now: the unfinished hypotheses end with stop reason cancelled.
  virtual void cancel() = 0;
  // Once done: the input's result (beam search streams its text here).
  virtual GenerateResult result(const Stepper& st) = 0;
};

// Steps a set of searches (not owned) together: one Stepper call over all their rows.
class DecodeLoop {
 public:
  DecodeLoop(Stepper& st, int64_t vocab_size) : st_(st), V_(vocab_size) {}
  void add(RowSearch* s) { live_.push_back(s); }
  bool empty() const { return live_.empty(); }
  const std::vector<RowSearch*>& live() const { return live_; }
  // One call (a step, or a prefill when some row is fed more than one token); each search
  // chooses, beams re-gather, and the searches that finished leave.
  void step();
  // Drops finished searches (e.g. after cancel()).
  void remove_done();

 private:
  Stepper& st_;
  int64_t V_;
  std::vector<RowSearch*> live_;
  Feed feed_;
  std::vector<size_t> first_;  // per live search: its first row in feed_
  std::vector<std::vector<int32_t>> lists_;
  std::vector<int32_t> reorder_rows_, reorder_parents_;
};

}  // namespace seqtape
