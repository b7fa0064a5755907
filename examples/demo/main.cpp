// SPDX-License-Identifier: Apache-2.0
// headroom-demo: shows each module at work on real data and checks the results.
// Exits non-zero when any check fails. Each module adds one line below (docs/CONTRIBUTING.md).
#include "printer.hpp"
#include "sections.hpp"

int main() {
  headroom::demo::printer p;
  p.run("substrates", demo_substrates);
  p.run("lifetime", demo_lifetime);
  p.run("pool", demo_pool);
  p.run("stats", demo_stats);
  p.run("cp", demo_cp);
  p.run("pipeline", demo_pipeline);
  p.run("trace", demo_trace);
  return p.finish();
}
