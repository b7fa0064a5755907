// headroom::stats from Python.
#include "bindings.hpp"

namespace headroom::python {

void bind_stats(nb::module_& m) {
  nb::module_ sub = m.def_submodule("stats", "headroom::stats");
  (void)sub;
}

}  // namespace headroom::python
