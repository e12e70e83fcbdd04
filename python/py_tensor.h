#pragma once
// NumPy arrays ↔ seqtape tensors without copies (see py_tensor.cpp for the policy).

#include <pybind11/numpy.h>

#include "autograd/tape.h"
#include "tensor/tensor.h"

namespace seqtape::python {

namespace py = pybind11;

// The array's memory as a tensor (the tensor keeps the array alive); `where` names the caller
// in the TypeError / ValueError of a dtype, layout or alignment it cannot adopt.
Tensor tensor_from_array(const py::array& a, const char* where);
// The tensor's memory as an array whose base is `base` (what keeps the memory alive).
py::array array_of(const Tensor& t, py::handle base);
// A tensor's value shared, an array adopted, anything else NumPy can make an array of (a list,
// a number) copied into a new float64 array.
Var var_from(const py::object& data, bool requires_grad);

}  // namespace seqtape::python
