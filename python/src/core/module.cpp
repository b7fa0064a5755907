// SPDX-License-Identifier: Apache-2.0
// headroom._core: the CUDA-free headers from Python. Thin by design (RMM-style): every type and
// function here is a headroom C++ one; the Pythonic surface is in python/headroom/*.py.
#include <nanobind/nanobind.h>

#include <cstdint>

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
#ifdef HEADROOM_PYTHON_SANITIZER_SELF_TEST
  // Only in .ci/run's ASan build (-DHEADROOM_PYTHON_SANITIZER_SELF_TEST): a read of freed heap
  // memory that the sanitizer must report (python/tests/test_sanitizer_build.py), so the check
  // over the pytest suite is shown able to fail.
  m.def("_planted_use_after_free", [] {
    auto* p = new std::int64_t[4]{1, 2, 3, 4};
    std::int64_t volatile* q = p;
    delete[] p;
    return static_cast<std::int64_t>(q[1]);
  });
#endif
}
