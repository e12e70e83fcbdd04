#include "train/signals.h"

#include <csignal>

namespace seqtape {

namespace {

volatile std::sig_atomic_t g_received = 0;
struct sigaction g_old_int, g_old_term;

extern "C" void on_stop_signal(int sig) {
  if (g_received != 0) {  // the second request: do not wait for the step to end
    std::signal(sig, SIG_DFL);
    std::raise(sig);
    return;
  }
  g_received = sig;
}

}  // namespace

StopSignals::StopSignals() {
  g_received = 0;
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, &g_old_int);
  sigaction(SIGTERM, &sa, &g_old_term);
}

StopSignals::~StopSignals() {
  sigaction(SIGINT, &g_old_int, nullptr);
  sigaction(SIGTERM, &g_old_term, nullptr);
}

int StopSignals::received() {
  return static_cast<int>(g_received);
}

}  // namespace seqtape
