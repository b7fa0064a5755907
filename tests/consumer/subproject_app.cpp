// SPDX-License-Identifier: Apache-2.0
// The program of the subdirectory/ and fetchcontent/ parent projects (copied in as app.cpp): uses headroom::core (a pool plan) and checks the result.
#include <cstdio>

#include <headroom/pool.hpp>
#include <headroom/version.hpp>

int main() {
  namespace hp = headroom::pool;
  hp::workload w{"two units", {}, {}};
  w.units.push_back({"a", {hp::elements_of(headroom::dtype::bf16, 1024)}});
  w.units.push_back({"b", {hp::elements_of(headroom::dtype::bf16, 1024)}});
  auto const plan = hp::make_plan<hp::max>(w);
  std::printf("headroom %s: %llu arena bytes for 2 units of 2 KiB, double-buffered\n", headroom::version.string,
              static_cast<unsigned long long>(plan.arena_bytes));
  return plan.arena_bytes >= 2 * 2048 ? 0 : 1;
}
