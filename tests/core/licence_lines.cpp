// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

// Every source file of the checkout — C++, CUDA, Python, CMake, shell — names its licence in an
// SPDX line among its first three lines (after a shebang), as LICENSE and the package metadata
// (Apache-2.0) say; a file copied out of the repository (examples are meant to be) keeps it.
#include <algorithm>
#include <string>
#include <string_view>
#include <vector>

#include "common/source_tree.hpp"

namespace {

constexpr std::string_view spdx = "SPDX-License-Identifier: Apache-2.0";

bool is_source(std::string const& name) {
  auto const slash = name.rfind('/');
  std::string const base = slash == std::string::npos ? name : name.substr(slash + 1);
  if (name.starts_with("tests/pool/traces/") || name.find("/corpus/") != std::string::npos) return false;
  for (std::string_view ext : {".hpp", ".h", ".cuh", ".cpp", ".cu", ".py", ".cmake", ".cmake.in", ".toml"})
    if (base.ends_with(ext)) return true;
  return base == "CMakeLists.txt" || name.starts_with("tools/") || name == ".ci/run";
}

// The licence line among the first three lines of `text`.
bool has_licence_line(std::string_view text) {
  std::size_t at = 0;
  for (int line = 0; line < 3 && at <= text.size(); ++line) {
    auto const end = std::min(text.find('\n', at), text.size());
    if (text.substr(at, end - at).find(spdx) != std::string_view::npos) return true;
    at = end + 1;
  }
  return false;
}

}  // namespace

TEST_CASE("every source file carries the SPDX licence line") {
  std::vector<std::string> missing;
  int sources = 0;
  headroom_test::for_each_source_text(HEADROOM_SOURCE_DIR, [&](std::string const& name, std::string const& text) {
    if (!is_source(name)) return;
    ++sources;
    if (!has_licence_line(text)) missing.push_back(name);
  });
  CHECK(sources > 300);  // the walk reached the sources
  for (auto const& name : missing)
    FAIL_CHECK(name << ": no '" << spdx << "' line among its first three lines (after a shebang: the second)");
}

TEST_CASE("the licence check finds the line where it belongs, and only there") {
  CHECK(has_licence_line("// SPDX-License-Identifier: Apache-2.0\n#pragma once\n"));
  CHECK(has_licence_line("#!/usr/bin/env bash\n# SPDX-License-Identifier: Apache-2.0\nset -e\n"));
  CHECK_FALSE(has_licence_line("#pragma once\n// a\n// b\n// SPDX-License-Identifier: Apache-2.0\n"));
  CHECK_FALSE(has_licence_line("// SPDX-License-Identifier: MIT\n"));
  CHECK(is_source("include/headroom/pool.hpp"));
  CHECK(is_source("tools/gpu-check"));
  CHECK(is_source("cmake/headroomConfig.cmake.in"));
  CHECK_FALSE(is_source("docs/pool.md"));
  CHECK_FALSE(is_source("tests/pool/traces/nemotronh_h1024.trace"));
}
