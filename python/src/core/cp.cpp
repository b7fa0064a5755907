// headroom::cp from Python.
#include "bindings.hpp"

namespace headroom::python {

void bind_cp(nb::module_& m) {
  nb::module_ sub = m.def_submodule("cp", "headroom::cp");
  (void)sub;
}

}  // namespace headroom::python
