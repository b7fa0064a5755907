#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "headroom/version.hpp"

// The version lives in four places; this test keeps them equal to include/headroom/version.hpp.
namespace {

std::string read_source(std::string const& relative) {
  std::ifstream in(std::string(HEADROOM_SOURCE_DIR) + "/" + relative);
  REQUIRE_MESSAGE(in.good(), ("cannot open " + relative));
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

std::string first_match(std::string const& text, std::string const& pattern) {
  std::smatch m;
  if (!std::regex_search(text, m, std::regex(pattern))) return "<no match for " + pattern + ">";
  return m[1].str();
}

std::string const header_version = std::to_string(HEADROOM_VERSION_MAJOR) + "." +
                                   std::to_string(HEADROOM_VERSION_MINOR) + "." +
                                   std::to_string(HEADROOM_VERSION_PATCH);

}  // namespace

TEST_CASE("version macros agree with each other") {
  CHECK(header_version == HEADROOM_VERSION_STRING);
  CHECK(HEADROOM_VERSION == HEADROOM_VERSION_MAJOR * 10000 + HEADROOM_VERSION_MINOR * 100 + HEADROOM_VERSION_PATCH);
  CHECK(headroom::version.major == HEADROOM_VERSION_MAJOR);
  CHECK(headroom::version.minor == HEADROOM_VERSION_MINOR);
  CHECK(headroom::version.patch == HEADROOM_VERSION_PATCH);
  CHECK(std::string(headroom::version.string) == HEADROOM_VERSION_STRING);
}

char const* const cmake_pattern = R"re(project\(headroom\s+VERSION\s+([0-9]+\.[0-9]+\.[0-9]+))re";
char const* const conan_pattern = R"re((?:^|\n)\s*version\s*=\s*"([^"]+)")re";
char const* const vcpkg_pattern = R"re("version(?:-semver)?"\s*:\s*"([^"]+)")re";

TEST_CASE("CMake project version matches version.hpp") {
  std::string const found = first_match(read_source("CMakeLists.txt"), cmake_pattern);
  CHECK(found == header_version);
}

TEST_CASE("Conan recipe version matches version.hpp") {
  std::string const found = first_match(read_source("conanfile.py"), conan_pattern);
  CHECK(found == header_version);
}

TEST_CASE("vcpkg port version matches version.hpp") {
  std::string const found = first_match(read_source("ports/headroom/vcpkg.json"), vcpkg_pattern);
  CHECK(found == header_version);
}
