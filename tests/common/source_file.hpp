#pragma once
// read_source("README.md"): a file of this checkout as a string, for the tests that keep docs,
// versions and sources from drifting apart. HEADROOM_SOURCE_DIR is set by CMake for every
// program (cmake/headroom_targets.cmake).
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>
#include <string>

namespace headroom_test {

inline std::string read_source(std::string const& relative) {
  std::ifstream in(std::string(HEADROOM_SOURCE_DIR) + "/" + relative);
  REQUIRE_MESSAGE(in.good(), ("cannot open " + relative));
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

}  // namespace headroom_test
