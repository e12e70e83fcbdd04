// DecodeLoop: one model call per step over the rows of every live search.
//
// Dimension key: R rows fed in one call, V vocabulary.
#include "infer/row_search.h"

#include <algorithm>

namespace seqtape {

void Feed::clear() {
  rows.clear();
  tokens.clear();
  offsets.assign(1, 0);
}

void Feed::add(int32_t row, std::span<const int32_t> fed) {
  rows.push_back(row);
  tokens.insert(tokens.end(), fed.begin(), fed.end());
  offsets.push_back(static_cast<int32_t>(tokens.size()));
}

void DecodeLoop::step() {
  feed_.clear();
  first_.clear();
  for (const RowSearch* s : live_) {
    first_.push_back(feed_.rows.size());
    s->feed(feed_);
  }
  if (feed_.rows.empty()) return remove_done();
  const float* logits = nullptr;  // [R, V]
  if (feed_.tokens.size() == feed_.rows.size()) {
    logits = st_.step(feed_.rows, feed_.tokens);
  } else {  // some row is prefilled (a prompt)
    lists_.resize(feed_.rows.size());
    for (size_t i = 0; i < feed_.rows.size(); ++i)
      lists_[i].assign(feed_.tokens.begin() + feed_.offsets[i],
                       feed_.tokens.begin() + feed_.offsets[i + 1]);
    logits = st_.prefill(feed_.rows, lists_);
  }
  for (size_t i = 0; i < live_.size(); ++i) live_[i]->advance(logits + first_[i] * size_t(V_), st_);
  reorder_rows_.clear();
  reorder_parents_.clear();
  for (const RowSearch* s : live_) s->reorder(reorder_rows_, reorder_parents_);
  if (!reorder_rows_.empty()) st_.reorder(reorder_rows_, reorder_parents_);
  remove_done();
}

void DecodeLoop::remove_done() {
  std::erase_if(live_, [](const RowSearch* s) { return s->done(); });
}

}  // namespace seqtape
