// C++ exceptions → Python exceptions, with the messages the CLI prints.
#include <CLI/CLI.hpp>
#include <filesystem>
#include <string>

#include "cli/commands.h"
#include "python/py_common.h"
#include "serve/request.h"
#include "tensor/tensor.h"

namespace seqtape::python {

void register_errors(py::module_&) {
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const std::filesystem::filesystem_error& e) {
      // OSError(errno, message, path): Python picks the subclass (FileNotFoundError, ...).
      py::object err = py::module_::import("builtins")
                           .attr("OSError")(e.code().value(), e.what(), e.path1().string());
      PyErr_SetObject(PyExc_OSError, err.ptr());
    } catch (const cli::UsageError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const serve::RequestError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const CLI::ParseError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const Error& e) {  // seqtape's: an op's shapes, a bad file's contents, an option
      PyErr_SetString(PyExc_ValueError, e.what());
    }
  });
}

}  // namespace seqtape::python
