// SPDX-License-Identifier: Apache-2.0
#pragma once
// read_source("README.md"): a file of this checkout as a string, for the tests that keep docs,
// versions and sources from drifting apart. HEADROOM_SOURCE_DIR is set by CMake for every
// program (cmake/headroom_targets.cmake).
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace headroom_test {

// A file's bytes ("" when it cannot be opened).
inline std::string read_file(std::filesystem::path const& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

inline std::string read_source(std::string const& relative) {
  std::filesystem::path const p = std::string(HEADROOM_SOURCE_DIR) + "/" + relative;
  REQUIRE_MESSAGE(std::ifstream(p).good(), ("cannot open " + relative));
  return read_file(p);
}

}  // namespace headroom_test
