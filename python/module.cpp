// _seqtape: the compiled half of the `seqtape` Python package (seqtape/__init__.py is the
// other half).
#include <pybind11/pybind11.h>

#include "python/py_common.h"

PYBIND11_MODULE(_seqtape, m) {
  m.doc() = "seqtape: tensors and autograd, training and batched decoding (see docs/python.md)";
  seqtape::python::register_errors(m);
  seqtape::python::bind_tensor(m);
  seqtape::python::bind_model(m);
  seqtape::python::bind_train(m);
}
