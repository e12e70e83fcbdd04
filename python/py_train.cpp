// _seqtape._run_command: a `seqtape` command line (train, gen-copy, export, ...) parsed by the
// CLI's own parser and run in this process without the GIL. A training run's callback sees every
// step (step, loss, lr, tokens/s) and stops the run by returning True or raising StopIteration
// (any other exception also stops it, and is raised once the run has saved).
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "python/py_common.h"

namespace seqtape::python {

namespace {

// The callback as TrainOptions::on_step: called without the GIL, so it takes it.
cli::TrainStepHook step_hook(const py::object& callback,
                             std::optional<py::error_already_set>& raised) {
  if (callback.is_none()) return {};
  return [&callback, &raised](const StepStats& s, double tokens_per_second) {
    py::gil_scoped_acquire gil;
    try {
      return callback(s.step, s.loss, s.lr, tokens_per_second).is(py::bool_(true));
    } catch (py::error_already_set& e) {
      if (!e.matches(PyExc_StopIteration)) raised = std::move(e);
      return true;
    }
  };
}

// The command's exit code (0; 1 for a failed check; 128 + a signal that stopped training); usage
// and data errors are raised (py_errors.cpp).
int run_command(const std::vector<std::string>& args, const py::object& callback) {
  std::optional<py::error_already_set> raised;
  CLI::App app{"seqtape"};
  cli::Runner run;
  cli::add_commands(app, run, cli::Hooks{step_hook(callback, raised)});
  std::vector<std::string> words = {"seqtape"};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  const int argc = static_cast<int>(argv.size());
  if (const std::string p = cli::argv_problem(app, argc, argv.data()); !p.empty())
    throw cli::UsageError(p);
  try {
    app.parse(argc, argv.data());
  } catch (const CLI::Success& e) {  // --help, --version: printed, as the CLI does
    return app.exit(e);
  }  // any other CLI::ParseError → ValueError with CLI11's message
  int code = 0;
  {
    py::gil_scoped_release nogil;
    code = run();
  }
  if (raised) throw std::move(*raised);
  return code;
}

}  // namespace

void bind_train(py::module_& m) {
  m.def("_run_command", &run_command, py::arg("args"), py::arg("callback") = py::none());
}

}  // namespace seqtape::python
