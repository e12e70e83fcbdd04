// The differentiable ops of autograd/ops.h on seqtape.Tensor: operators with tensors and Python
// numbers, methods, the same ops as module functions, no_grad and gradcheck.
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <vector>

#include "autograd/gradcheck.h"
#include "autograd/ops.h"
#include "python/py_common.h"
#include "python/py_tensor.h"

namespace seqtape::python {

namespace {

// s − a and s / a for a Python number s.
Var scalar_minus(double s, const Var& a) {
  return rsub(s, a);
}
Var scalar_over(double s, const Var& a) {
  return div(Var(Tensor::full(Shape{}, s, a.dtype())), a);
}

Var sum_of(const Var& a, std::optional<int> axis, bool keepdim) {
  return axis ? sum(a, *axis, keepdim) : sum(a);
}
Var mean_of(const Var& a, std::optional<int> axis, bool keepdim) {
  return axis ? mean(a, *axis, keepdim) : mean(a);
}
Var reshape_of(const Var& a, const std::vector<int64_t>& shape) {
  return reshape(a, Shape(shape));
}
Var cross_entropy_of(const Var& logits, const std::vector<int32_t>& targets, int32_t ignore_index,
                     double label_smoothing) {
  return cross_entropy(logits, targets, CrossEntropyOptions{ignore_index, label_smoothing});
}

void bind_operators(py::class_<Var>& cls) {
  cls.def("__add__", [](const Var& a, const Var& b) { return add(a, b); })
      .def("__add__", [](const Var& a, double s) { return add(a, s); })
      .def("__radd__", [](const Var& a, double s) { return add(a, s); })
      .def("__sub__", [](const Var& a, const Var& b) { return sub(a, b); })
      .def("__sub__", [](const Var& a, double s) { return add(a, -s); })
      .def("__rsub__", [](const Var& a, double s) { return scalar_minus(s, a); })
      .def("__mul__", [](const Var& a, const Var& b) { return mul(a, b); })
      .def("__mul__", [](const Var& a, double s) { return mul(a, s); })
      .def("__rmul__", [](const Var& a, double s) { return mul(a, s); })
      .def("__truediv__", [](const Var& a, const Var& b) { return div(a, b); })
      .def("__truediv__", [](const Var& a, double s) { return mul(a, 1.0 / s); })
      .def("__rtruediv__", [](const Var& a, double s) { return scalar_over(s, a); })
      .def("__neg__", [](const Var& a) { return neg(a); })
      .def("__matmul__", [](const Var& a, const Var& b) { return matmul(a, b); });
}

// Each op as a method (t.tanh()) and a module function (seqtape.tanh(t)).
template <typename F, typename... Extra>
void both(py::class_<Var>& cls, py::module_& m, const char* name, F f, const Extra&... extra) {
  cls.def(name, f, extra...);
  if constexpr (sizeof...(Extra) > 0) {
    m.def(name, f, py::arg("x"), extra...);  // named arguments: the tensor's name too
  } else {
    m.def(name, f);
  }
}

void bind_methods(py::class_<Var>& cls, py::module_& m) {
  using Unary = Var (*)(const Var&);
  for (auto [name, f] : {std::pair<const char*, Unary>{"tanh", &tanh},
                         {"relu", &relu},
                         {"gelu", &gelu},
                         {"exp", &exp},
                         {"log", &log},
                         {"sqrt", &sqrt},
                         {"softmax", &softmax},
                         {"log_softmax", &log_softmax}})
    both(cls, m, name, f);
  both(cls, m, "matmul", &matmul, py::arg("b"), py::arg("trans_a") = false,
       py::arg("trans_b") = false);
  both(cls, m, "sum", &sum_of, py::arg("axis") = py::none(), py::arg("keepdim") = false);
  both(cls, m, "mean", &mean_of, py::arg("axis") = py::none(), py::arg("keepdim") = false);
  both(cls, m, "reshape", &reshape_of, py::arg("shape"));
  both(cls, m, "transpose", &transpose, py::arg("d0"), py::arg("d1"));
  both(cls, m, "slice", &slice, py::arg("axis"), py::arg("start"), py::arg("end"));
  both(cls, m, "cross_entropy", &cross_entropy_of, py::arg("targets"),
       py::arg("ignore_index") = -100, py::arg("label_smoothing") = 0.0);
  m.def(
      "concat", [](const std::vector<Var>& parts, int axis) { return concat(parts, axis); },
      py::arg("parts"), py::arg("axis"));
}

// `with seqtape.no_grad():` ops record nothing and results do not require grad.
struct NoGrad {
  std::optional<NoGradGuard> guard;
};

// fn(*inputs) checked against central differences (autograd/gradcheck.h), inputs float64.
GradcheckResult gradcheck_of(const py::function& fn, const std::vector<py::object>& inputs,
                             double eps, double atol, double rtol) {
  std::vector<Tensor> values;
  for (const py::object& x : inputs) values.push_back(var_from(x, false).value());
  const GradFn f = [&fn](const std::vector<Var>& xs) {
    py::tuple args(xs.size());
    for (size_t i = 0; i < xs.size(); ++i) args[i] = py::cast(xs[i]);
    return fn(*args).cast<Var>();
  };
  return gradcheck(f, values, GradcheckOptions{eps, atol, rtol});
}

void bind_gradcheck(py::module_& m) {
  py::class_<GradcheckResult>(m, "GradcheckResult")
      .def_readonly("passed", &GradcheckResult::pass)
      .def_readonly("max_abs_err", &GradcheckResult::max_abs_err)
      .def_readonly("max_rel_err", &GradcheckResult::max_rel_err)
      .def_readonly("entries", &GradcheckResult::entries)
      .def_readonly("worst", &GradcheckResult::worst)
      .def("__bool__", [](const GradcheckResult& r) { return r.pass; })
      .def("__repr__", [](const GradcheckResult& r) {
        return std::string("GradcheckResult(passed=") + (r.pass ? "True" : "False") +
               ", max_abs_err=" + std::to_string(r.max_abs_err) +
               ", entries=" + std::to_string(r.entries) + ", worst='" + r.worst + "')";
      });
  m.def("gradcheck", &gradcheck_of, py::arg("fn"), py::arg("inputs"), py::arg("eps") = 1e-6,
        py::arg("atol") = 1e-5, py::arg("rtol") = 1e-3);
}

}  // namespace

void bind_tensor_ops(py::class_<Var>& cls, py::module_& m) {
  bind_operators(cls);
  bind_methods(cls, m);
  py::class_<NoGrad>(m, "no_grad")
      .def(py::init<>())
      .def("__enter__", [](NoGrad& g) { g.guard.emplace(); })
      .def("__exit__", [](NoGrad& g, py::args) { g.guard.reset(); });
  bind_gradcheck(m);
}

}  // namespace seqtape::python
