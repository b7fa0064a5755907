// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

// What every test source keeps to: doctest's runner is tests/common/doctest_main.cpp, linked into
// every test program once per build (cmake/headroom_targets.cmake); a test source that defines its
// own would compile doctest's implementation again (seconds per source and build preset: minutes
// of CI) and its main would silently replace the shared one.
#include <string>
#include <string_view>
#include <vector>

#include "common/source_tree.hpp"

namespace {

// (two literals, so that this file does not match itself)
constexpr std::string_view own_runner = "#define DOCTEST_" "CONFIG_IMPLEMENT";

bool is_test_source(std::string const& name) {
  return name.starts_with("tests/") && !name.starts_with("tests/common/") &&
         (name.ends_with(".cpp") || name.ends_with(".cu"));
}

}  // namespace

TEST_CASE("no test source defines doctest's runner: one runner per build serves them all") {
  std::vector<std::string> own;
  int tests = 0;
  headroom_test::for_each_source_text(HEADROOM_SOURCE_DIR, [&](std::string const& name, std::string const& text) {
    if (!is_test_source(name)) return;
    ++tests;
    if (text.find(own_runner) != std::string::npos) own.push_back(name);
  });
  CHECK(tests > 90);  // the walk reached the tests
  for (auto const& name : own)
    FAIL_CHECK(name << ": defines " << own_runner
                    << "...; test programs link tests/common/doctest_main.cpp (delete the line)");
}

TEST_CASE("the rule tells a test source from the runner and the helpers") {
  CHECK(is_test_source("tests/pool/arena.cpp"));
  CHECK(is_test_source("tests/pool/nccl_pool.cu"));
  CHECK_FALSE(is_test_source("tests/common/doctest_main.cpp"));
  CHECK_FALSE(is_test_source("tests/common/source_tree.hpp"));
  CHECK_FALSE(is_test_source("include/headroom/pool.hpp"));
}
