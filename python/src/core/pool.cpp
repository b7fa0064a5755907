// headroom::pool from Python.
#include "bindings.hpp"

namespace headroom::python {

void bind_pool(nb::module_& m) {
  nb::module_ sub = m.def_submodule("pool", "headroom::pool");
  (void)sub;
}

}  // namespace headroom::python
