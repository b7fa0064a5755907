// headroom::pipeline from Python.
#include "bindings.hpp"

namespace headroom::python {

void bind_pipeline(nb::module_& m) {
  nb::module_ sub = m.def_submodule("pipeline", "headroom::pipeline");
  (void)sub;
}

}  // namespace headroom::python
