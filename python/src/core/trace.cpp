// headroom::trace from Python.
#include "bindings.hpp"

namespace headroom::python {

void bind_trace(nb::module_& m) {
  nb::module_ sub = m.def_submodule("trace", "headroom::trace");
  (void)sub;
}

}  // namespace headroom::python
