// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <string>

#include "common/source_file.hpp"

// README.md quotes examples/readme_usage.cpp (built and run as a test) and gives the commands
// that .ci/run executes; this keeps the quote and the commands from drifting.
using headroom_test::read_source;

TEST_CASE("README quotes examples/readme_usage.cpp verbatim") {
  std::string const readme = read_source("README.md");
  std::string const example = read_source("examples/readme_usage.cpp");
  std::string const block = "```cpp\n" + example + "```\n";
  CHECK_MESSAGE(readme.find(block) != std::string::npos,
                "README.md must contain examples/readme_usage.cpp as a ```cpp block, byte for byte");
}

TEST_CASE("README gives the demo and test commands") {
  std::string const readme = read_source("README.md");
  CHECK(readme.find("```sh\ncmake --workflow --preset demo\n```") != std::string::npos);
  CHECK(readme.find("```sh\ntools/test\n```") != std::string::npos);
  // tools/test is what runs every host test, the Python package's included: it must end in the
  // test preset, with the interpreter it installed the package into.
  std::string const script = read_source("tools/test");
  CHECK(script.find("HEADROOM_PYTHON=$python cmake --workflow --preset test") != std::string::npos);
  CHECK(readme.find("\n## Modules\n") != std::string::npos);
}

TEST_CASE("README's install line is the one configure prints when something is missing") {
  std::string const cmake = read_source("cmake/headroom_prerequisites.cmake");
  std::string const key = "set(HEADROOM_INSTALL_LINE \"";
  auto const begin = cmake.find(key);
  REQUIRE_MESSAGE(begin != std::string::npos, (std::string("cmake/headroom_prerequisites.cmake has no ") + key));
  auto const end = cmake.find("\")", begin);
  REQUIRE(end != std::string::npos);
  std::string const line = cmake.substr(begin + key.size(), end - begin - key.size());
  CHECK(line.find("apt-get install") != std::string::npos);
  std::string const readme = read_source("README.md");
  auto const try_it = readme.find("\n## Try it\n");
  REQUIRE(try_it != std::string::npos);
  // The first code block of "Try it" is that line.
  auto const block = readme.find("```", try_it);
  REQUIRE(block != std::string::npos);
  std::string const expected = "```sh\n" + line + "\n```";
  CHECK_MESSAGE(readme.compare(block, expected.size(), expected) == 0,
                (std::string("the first block of README's \"Try it\" must be: ") + line));
}
