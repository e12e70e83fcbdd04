// `seqtape gradcheck`: every op's float64 Jacobian against central differences, as a table.
#include <cstdio>
#include <string>

#include "autograd/op_checks.h"
#include "cli/commands.h"

namespace seqtape::cli {

namespace {
struct GradcheckArgs {
  uint64_t seed = 1234;
  std::string only;
  bool quiet = false;
};
}  // namespace

void register_gradcheck(CLI::App& app, Runner& run) {
  auto args = std::make_shared<GradcheckArgs>();
  CLI::App* sub =
      app.add_subcommand("gradcheck",
                         "Check every op's gradient (float64 central differences, eps 1e-6, "
                         "|analytic-numeric| <= 1e-5 + 1e-3*|numeric|); exits 1 on any failure");
  sub->add_option("--seed", args->seed, "seed of the random inputs")->capture_default_str();
  sub->add_option("--op", args->only, "check only this op (e.g. matmul)");
  sub->add_flag("--quiet", args->quiet, "print only the summary line");
  sub->callback([&run, args] {
    run = [args] {
      int failed = 0, total = 0;
      if (!args->quiet)
        std::printf("%-14s %-44s %8s %12s %12s  %s\n", "op", "case", "entries", "max|abs err|",
                    "max rel err", "result");
      for (const OpCheck& c : op_checks(args->seed)) {
        if (!args->only.empty() && c.op != args->only) continue;
        GradcheckResult r = gradcheck(c.fn, c.inputs);
        ++total;
        failed += !r.pass;
        if (!args->quiet || !r.pass)
          std::printf("%-14s %-44s %8lld %12.3e %12.3e  %s%s\n", c.op.c_str(), c.case_.c_str(),
                      static_cast<long long>(r.entries), r.max_abs_err, r.max_rel_err,
                      r.pass ? "pass" : "FAIL ", r.pass ? "" : r.worst.c_str());
      }
      if (total == 0) throw UsageError("no gradient check matches --op " + args->only);
      std::printf("gradcheck: %d op checks, %d passed, %d failed\n", total, total - failed, failed);
      return failed ? kCheckFailed : kOk;
    };
  });
}

}  // namespace seqtape::cli
