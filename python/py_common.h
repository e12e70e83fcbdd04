#pragma once
// What the files of the Python module share: the functions that add each part to the module,
// and how C++ errors become Python exceptions.

#include <pybind11/pybind11.h>

namespace seqtape::python {

namespace py = pybind11;

// seqtape.Tensor (buffer protocol both ways), its ops, backward, no_grad and gradcheck.
void bind_tensor(py::module_& m);
// seqtape.Model: load a checkpoint, run or export directory; generate from a JSON request.
void bind_model(py::module_& m);
// _seqtape._run_command: a CLI command in this process, training with a per-step callback.
void bind_train(py::module_& m);
// The CLI's errors as Python's: bad options or data → ValueError, files → OSError.
void register_errors(py::module_& m);

}  // namespace seqtape::python
