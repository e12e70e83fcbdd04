// seqtape.Model: a trained model for decoding. Its requests are serve's (serve/request.h): the
// Python side turns generate()'s keyword arguments into that JSON body, so that the options,
// their checks and their messages are the server's and the CLI's (the field names are the
// CLI's flag names), and the results are result_json's objects, as `generate --json` prints.
#include <pybind11/stl.h>

#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/compute_type.h"
#include "infer/load.h"
#include "infer/result_json.h"
#include "infer/search.h"
#include "python/py_common.h"
#include "serve/request.h"

namespace seqtape::python {

namespace {

struct Model {
  std::shared_ptr<const InferenceModel> model;
  std::string path;
};

// A Python caller has no server to protect: only the model's and the memory's own limits hold
// (max_positions in encode_input, the memory budget in the request's check).
serve::Limits no_server_limits() {
  serve::Limits l;
  l.max_body_bytes = std::numeric_limits<size_t>::max();
  l.max_input_bytes = std::numeric_limits<size_t>::max();
  l.max_inputs = std::numeric_limits<size_t>::max();
  l.max_new = std::numeric_limits<int64_t>::max();
  l.max_beam = std::numeric_limits<int64_t>::max();
  return l;
}

// One batch: the request body ({"inputs": [...], options}) → a JSON array of result objects,
// decoded together without the GIL (other Python threads run meanwhile).
std::string generate_json(const Model& m, const std::string& body) {
  py::gil_scoped_release nogil;
  const serve::GenerateRequest r =
      serve::parse_generate_request(body, *m.model, no_server_limits());
  const auto t0 = std::chrono::steady_clock::now();
  const std::vector<GenerateResult> results = generate(*m.model, r.inputs, r.options);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  nlohmann::json out = nlohmann::json::array();
  for (size_t b = 0; b < results.size(); ++b)
    out.push_back(result_json(r.texts[b], unk_count(m.model->vocab(), r.inputs[b]), results[b],
                              r.options, secs));
  return out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// compute_type as generate's --compute-type ("" when not given: the files' own type).
Model load(const std::string& path, const std::string& compute_type) {
  py::gil_scoped_release nogil;
  return Model{std::make_shared<const InferenceModel>(cli::load_decoding_model(path, compute_type)),
               path};
}

}  // namespace

void bind_model(py::module_& m) {
  py::class_<Model>(m, "_Model")
      .def_static("load", &load, py::arg("path"), py::arg("compute_type") = "")
      .def("_generate_json", &generate_json, py::arg("body"))
      .def_readonly("path", &Model::path)
      .def_property_readonly("config",
                             [](const Model& x) { return x.model->config().to_json().dump(); })
      .def_property_readonly("vocab_size", [](const Model& x) { return x.model->vocab().size(); });
  m.def("_request_fields", &serve::request_fields);
  m.def("_request_options", [] { return serve::request_options().dump(); });
}

}  // namespace seqtape::python
