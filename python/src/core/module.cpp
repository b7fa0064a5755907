// headroom._core: the CUDA-free headers from Python. Thin by design (RMM-style): every type and
// function here is a headroom C++ one; the Pythonic surface is in python/headroom/*.py.
#include <nanobind/nanobind.h>

#include "bindings.hpp"
#include "headroom/version.hpp"

NB_MODULE(_core, m) {
  namespace nb = nanobind;
  // No "nanobind: leaked N instances" at exit: torch's dispatcher keeps the Python functions that
  // headroom.torch registers as custom ops (and through their globals every plan and partition the
  // module caches) until the process ends, after nanobind's check; those are not leaks.
  nb::set_leak_warnings(false);
  m.doc() = "headroom's C++ core (planners, schedules, CP index math, reports, snapshots)";
  m.attr("__version__") = headroom::version.string;
  m.attr("version_info") = nb::make_tuple(headroom::version.major, headroom::version.minor, headroom::version.patch);
  headroom::python::bind_errors(m);
  headroom::python::bind_pool(m);
  headroom::python::bind_pipeline(m);
  headroom::python::bind_pipeline_buffers(m);
  headroom::python::bind_cp(m);
  headroom::python::bind_stats(m);
  headroom::python::bind_trace(m);
}
