#pragma once
// Tracing a decoding run: every model call and every selection that generate() makes, recorded
// through its observer hooks (GenerateOptions::on_call, on_select, on_attention) as the
// seqtape-trace JSON described in web/TRACE_FORMAT.md, which web/player.html replays.
//
// For each call: the phase (prefill/decode), the tokens fed, the cache length before and after,
// the raw logits and the top candidates with probabilities, self- and cross-attention weights
// per layer and head for the positions fed, and (verify_cache) max |Δ| of the logits against
// recomputing the whole prefix without the cache. For each selection: the token, the
// hypothesis' summed log-probability and the stop check. Beam search is recorded per
// hypothesis (a step per kept or ended candidate, with its parent; a hypothesis whose call
// kept no candidate is recorded as pruned).
//
// Dimension key: V vocabulary, H heads, Nq positions fed in a call, Nk keys.

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "infer/model.h"
#include "infer/search.h"

namespace seqtape {

struct TraceOptions {
  int64_t top_candidates = 5;  // candidates listed per call
  bool attention = true;       // record attention weights
  bool verify_cache = true;    // also recompute every call without the cache: |Δ| per step
  std::string input_text;      // the input as the user wrote it (default: decoded ids)
  std::string source = "seqtape generate";
};

struct TracedRun {
  GenerateResult result;
  nlohmann::json trace;
};

// Runs generate() with `strategy` on one input (encoder ids for Seq2Seq, the prompt for
// DecoderOnly) and records it; the strategy describes itself in the trace's "search". opt.on_call /
// on_select / on_attention must be unset (the tracer uses them); opt.verify_cache is taken from
// topt.
TracedRun generate_traced(const InferenceModel& model, const std::vector<int32_t>& input,
                          GenerateOptions opt, const SearchStrategy& strategy,
                          const TraceOptions& topt = {});

}  // namespace seqtape
