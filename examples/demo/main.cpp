// headroom-demo: shows each module at work on real data and checks the results.
// Exits non-zero when any check fails. Each module adds one line below (docs/CONTRIBUTING.md).
#include "printer.hpp"
#include "sections.hpp"

int main() {
  headroom::demo::printer p;
  p.run("substrates", demo_substrates);
  return p.finish();
}
