// seqtape.Tensor: a Var (autograd/tape.h) seen from Python. NumPy arrays cross both ways without
// a copy: Tensor(array) adopts a C-contiguous float32/float64 array's memory (keeping the array
// alive), and the buffer protocol (numpy.asarray(t), t.numpy()) exposes the tensor's own.
// A non-contiguous, read-only or misaligned array is refused rather than silently copied.
#include "python/py_tensor.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <string>
#include <vector>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "python/py_common.h"

namespace seqtape::python {

namespace {

// Tensor::adopt's release: the last tensor over an array's memory drops the array, holding the
// GIL (decoding threads may drop it). Nothing to drop once the interpreter is gone.
void release_array(void* owner) {
  if (!Py_IsInitialized()) return;
  const PyGILState_STATE g = PyGILState_Ensure();
  Py_DECREF(static_cast<PyObject*>(owner));
  PyGILState_Release(g);
}

std::string shape_of(const py::array& a) {
  std::string s = "(";
  for (py::ssize_t i = 0; i < a.ndim(); ++i) s += (i ? ", " : "") + std::to_string(a.shape(i));
  return s + (a.ndim() == 1 ? ",)" : ")");
}

// The array's dtype as seqtape's, or a TypeError naming it.
DType dtype_of_array(const py::array& a, const char* where) {
  if (a.dtype().is(py::dtype::of<float>())) return DType::F32;
  if (a.dtype().is(py::dtype::of<double>())) return DType::F64;
  const std::string got = py::str(a.dtype());
  throw py::type_error(std::string(where) + ": an array of dtype " + got +
                       " (seqtape tensors are float32 or float64: convert with "
                       "a.astype(numpy.float32))");
}

}  // namespace

Tensor tensor_from_array(const py::array& a, const char* where) {
  const DType dtype = dtype_of_array(a, where);
  const std::string what = std::string(where) + ": the array of shape " + shape_of(a);
  if (!(a.flags() & py::array::c_style))
    throw py::value_error(what +
                          " is not C-contiguous (a slice, transpose or Fortran-order array); "
                          "seqtape never copies silently: pass numpy.ascontiguousarray(a)");
  if (!a.writeable())
    throw py::value_error(what + " is read-only; pass a writable copy (a.copy())");
  if (!(a.flags() & py::detail::npy_api::NPY_ARRAY_ALIGNED_))
    throw py::value_error(what + " is not aligned to its element size; pass a.copy()");
  Shape shape;
  for (py::ssize_t i = 0; i < a.ndim(); ++i) shape.push_back(a.shape(i));
  py::array owner = a;
  void* data = owner.mutable_data();
  return Tensor::adopt(data, std::move(shape), dtype, release_array, owner.release().ptr());
}

py::array array_of(const Tensor& t, py::handle base) {
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end());
  const auto item = static_cast<py::ssize_t>(dtype_size(t.dtype()));
  std::vector<py::ssize_t> strides(shape.size(), item);
  for (size_t i = shape.size(); i-- > 1;) strides[i - 1] = strides[i] * shape[i];
  py::dtype dt = t.dtype() == DType::F32 ? py::dtype::of<float>() : py::dtype::of<double>();
  return py::array(dt, shape, strides, const_cast<void*>(t.raw()), base);
}

Var var_from(const py::object& data, bool requires_grad) {
  if (py::isinstance<Var>(data)) return Var(data.cast<Var>().value(), requires_grad);
  if (py::isinstance<py::array>(data))
    return Var(tensor_from_array(data.cast<py::array>(), "seqtape.Tensor"), requires_grad);
  py::array a = py::module_::import("numpy").attr("array")(data, "float64");
  return Var(tensor_from_array(a, "seqtape.Tensor"), requires_grad);
}

namespace {

// The gradient as an array sharing its storage (a capsule keeps the storage alive), or None.
py::object grad_of(const Var& v) {
  if (!v.has_grad()) return py::none();
  auto* keep = new Tensor(v.grad());
  py::capsule owner(keep, [](void* p) { delete static_cast<Tensor*>(p); });
  return array_of(*keep, owner);
}

py::buffer_info buffer_of(Var& v) {
  const Tensor& t = v.value();
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end());
  const auto item = static_cast<py::ssize_t>(dtype_size(t.dtype()));
  std::vector<py::ssize_t> strides(shape.size(), item);
  for (size_t i = shape.size(); i-- > 1;) strides[i - 1] = strides[i] * shape[i];
  const std::string format = t.dtype() == DType::F32 ? py::format_descriptor<float>::format()
                                                     : py::format_descriptor<double>::format();
  return py::buffer_info(const_cast<void*>(t.raw()), item, format,
                         static_cast<py::ssize_t>(shape.size()), shape, strides);
}

// Reverse mode from v, then the tape is dropped (as PyTorch frees its graph): a training loop
// in Python does not grow it, and a second backward through the same graph is refused by name.
void backward_of(const Var& v, const py::object& upstream) {
  Tape& tape = Tape::current();
  if (upstream.is_none()) {
    tape.backward(v);
  } else {
    tape.backward(v, var_from(upstream, false).value());
  }
  tape.clear();
}

std::string repr_of(const Var& v) {
  std::string s =
      "seqtape.Tensor(shape=" + shape_str(v.shape()) + ", dtype=" + dtype_name(v.dtype());
  return s + (v.requires_grad() ? ", requires_grad=True)" : ")");
}

}  // namespace

void bind_tensor_ops(py::class_<Var>& cls, py::module_& m);

void bind_tensor(py::module_& m) {
  py::class_<Var> cls(m, "Tensor", py::buffer_protocol(),
                      "An N-dimensional float32/float64 array on the autograd tape");
  cls.def(py::init(&var_from), py::arg("data"), py::arg("requires_grad") = false)
      .def_buffer(&buffer_of)
      .def(
          "numpy", [](py::object self) { return array_of(self.cast<Var&>().value(), self); },
          "the values as a NumPy array sharing this tensor's memory")
      .def_property_readonly("grad", &grad_of)
      .def_property("requires_grad", &Var::requires_grad, &Var::set_requires_grad)
      .def_property_readonly(
          "shape",
          [](const Var& v) {
            return py::tuple(py::cast(std::vector<int64_t>(v.shape().begin(), v.shape().end())));
          })
      .def_property_readonly("dtype", [](const Var& v) { return dtype_name(v.dtype()); })
      .def_property_readonly("ndim", &Var::ndim)
      .def("item", &Var::item)
      .def("zero_grad", &Var::zero_grad)
      .def("detach", [](const Var& v) { return Var(v.value(), false); })
      .def("backward", &backward_of, py::arg("gradient") = py::none())
      .def("__repr__", &repr_of)
      .def("__len__", [](const Var& v) { return v.ndim() ? v.dim(0) : 0; });
  bind_tensor_ops(cls, m);
}

}  // namespace seqtape::python
