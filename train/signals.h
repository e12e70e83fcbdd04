#pragma once
// SIGINT and SIGTERM during training: the first one only sets a flag, which the step loop reads
// between steps to save a checkpoint and stop (exit 130 or 143 from the CLI); a second one
// restores the default action, so a stuck run still dies at once.

namespace seqtape {

class StopSignals {
 public:
  StopSignals();   // installs the handlers (and clears any earlier request)
  ~StopSignals();  // restores the previous handlers
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  // The signal number received since construction, or 0.
  static int received();
};

}  // namespace seqtape
