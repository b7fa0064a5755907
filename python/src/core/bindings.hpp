// SPDX-License-Identifier: Apache-2.0
#pragma once
// One function per headroom module adds that module's bindings to headroom._core; module.cpp
// calls them in order. Each lives in bind_<module>.cpp beside this file (a module with two parts:
// bind_<module>_<part>.cpp).
#include <nanobind/nanobind.h>

namespace headroom::python {

namespace nb = nanobind;

void bind_errors(nb::module_& m);
void bind_pool(nb::module_& m);
void bind_pool_lifetimes(nb::module_& sub);  // bind_pool_lifetimes.cpp, into headroom._core.pool (and .models)
void bind_pipeline(nb::module_& m);
void bind_pipeline_buffers(nb::module_& m);  // pipeline_buffers.cpp, into the pipeline submodule
void bind_cp(nb::module_& m);
void bind_stats(nb::module_& m);
void bind_trace(nb::module_& m);

}  // namespace headroom::python
