// `seqtape gradcheck`: every op's float64 Jacobian against central differences, as a table.
#include <algorithm>
#include <cstdio>
#include <string>

#include "autograd/op_checks.h"
#include "cli/commands.h"
#include "nn/model_gradcheck.h"

namespace seqtape::cli {

namespace {
struct GradcheckArgs {
  uint64_t seed = 1234;
  std::string only;
  bool quiet = false;
  bool ops_only = false;
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
  sub->add_flag("--quiet", args->quiet, "print only the summary lines (and failures)");
  sub->add_flag("--ops-only", args->ops_only, "skip the whole-model checks");
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
      int model_failed = 0;
      if (!args->ops_only && args->only.empty()) {
        struct Named {
          const char* name;
          ModelConfig cfg;
        };
        const Named models[] = {
            {"Seq2Seq post-norm (d 4, 2 heads, 1+1 layers, batch of 2 with padding)",
             tiny_gradcheck_config(Arch::Seq2Seq, NormPlacement::Post)},
            {"Seq2Seq pre-norm (d 4, 2 heads, 1+1 layers, batch of 2 with padding)",
             tiny_gradcheck_config(Arch::Seq2Seq, NormPlacement::Pre)},
            {"DecoderOnly (d 4, 2 heads, 1 layer, batch of 2 with padding)",
             tiny_gradcheck_config(Arch::DecoderOnly, NormPlacement::Post)}};
        ModelGradcheckOptions mo;
        mo.seed = args->seed;
        for (const Named& m : models) {
          auto rows = gradcheck_config(m.cfg, mo);
          bool ok = all_passed(rows);
          model_failed += !ok;
          std::printf("\nwhole model, float64, 20 sampled coordinates per parameter: %s\n", m.name);
          if (!args->quiet || !ok) std::printf("%s", format_gradcheck(rows).c_str());
          double worst = 0;
          for (const auto& r : rows) worst = std::max(worst, r.max_abs_err);
          std::printf("  %zu parameter tensors, max |abs err| %.3e: %s\n", rows.size(), worst,
                      ok ? "pass" : "FAIL");
        }
        std::printf("gradcheck: 3 whole-model checks, %d passed, %d failed\n", 3 - model_failed,
                    model_failed);
      }
      return failed || model_failed ? kCheckFailed : kOk;
    };
  });
}

}  // namespace seqtape::cli
