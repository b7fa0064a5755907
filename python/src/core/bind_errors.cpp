// SPDX-License-Identifier: Apache-2.0
// headroom::error and its subclasses as Python exception classes of the same names and messages.
// Each also derives from the built-in exception a Python caller would catch: ValueError for bad
// arguments and sizes, RuntimeError for everything that goes wrong while running.
#include <nanobind/nanobind.h>

#include "bindings.hpp"
#include "headroom/core/error.hpp"

namespace headroom::python {

namespace {
template <class E>
nb::object add_error(nb::module_& m, char const* name, nb::handle base, nb::handle builtin, char const* doc) {
  nb::object bases = builtin.is_valid() ? nb::object(nb::make_tuple(base, builtin)) : nb::borrow(base);
  // Translators run newest first, so subclasses (registered after `error`) are matched first.
  nb::exception<E> type(m, name, bases);
  nb::setattr(type, "__doc__", nb::str(doc));
  return type;
}

/// Registered after the headroom classes, so it runs first (newest first) and passes on what
/// it does not handle.
void translate_std(std::exception_ptr const& p, void* capacity_type) {
  try {
    std::rethrow_exception(p);
  } catch (std::bad_alloc const& e) {
    PyErr_SetString(PyExc_MemoryError,
                    (std::string("headroom: out of memory (") + e.what() +
                     "); the request needs more host memory than the process could get")
                        .c_str());
  } catch (std::bad_cast const& e) {
    PyErr_SetString(PyExc_TypeError,
                    (std::string("headroom: an argument or element has a type the call cannot convert (") +
                     e.what() + "); see the function's signature for what it takes")
                        .c_str());
  } catch (std::length_error const& e) {
    PyErr_SetString(static_cast<PyObject*>(capacity_type),
                    (std::string("headroom: a size exceeds what a container can hold (") + e.what() +
                     "); expected a smaller count")
                        .c_str());
  }
}
}  // namespace

void bind_errors(nb::module_& m) {
  nb::object base = add_error<headroom::error>(m, "error", PyExc_RuntimeError, nb::handle(),
                                               "Base of every error headroom raises.");
  add_error<invalid_argument>(m, "invalid_argument", base, PyExc_ValueError,
                              "A value outside what the function accepts (sizes, ranks, layouts).");
  nb::object capacity = add_error<capacity_error>(m, "capacity_error", base, PyExc_ValueError,
                                                  "A pool, plan or size cannot hold the request (exhaustion, overflow).");
  add_error<logic_error>(m, "logic_error", base, PyExc_RuntimeError,
                         "An object used in a state that forbids the call.");
  add_error<collective_mismatch>(m, "collective_mismatch", base, PyExc_RuntimeError,
                                 "Ranks of one group called a collective with different arguments.");
  add_error<group_aborted>(m, "group_aborted", base, PyExc_RuntimeError,
                           "Another rank failed, so the group was aborted.");
  add_error<cuda_error>(m, "cuda_error", base, PyExc_RuntimeError, "A CUDA runtime call failed.");
  add_error<nccl_error>(m, "nccl_error", base, PyExc_RuntimeError, "An NCCL call failed.");
  add_error<mpi_error>(m, "mpi_error", base, PyExc_RuntimeError, "An MPI call failed.");
  // The module keeps the class alive for as long as the process can raise it.
  nb::register_exception_translator(translate_std, capacity.ptr());
}

}  // namespace headroom::python
