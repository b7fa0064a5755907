// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <string>

#include "common/source_file.hpp"
#include "headroom/version.hpp"

// The version lives in four places; this test keeps them equal to include/headroom/version.hpp.
using headroom_test::read_source;

namespace {

// The text that follows the first occurrence of `key` (after spaces, '=' and ':'), up to the next
// quote, space or ')': enough for `VERSION 1.2.3`, `version = "1.2.3"` and `"version": "1.2.3"`.
std::string value_after(std::string const& text, std::string const& key) {
  auto pos = text.find(key);
  if (pos == std::string::npos) return "<" + key + " not found>";
  pos += key.size();
  while (pos < text.size() && (text[pos] == ' ' || text[pos] == '=' || text[pos] == ':' || text[pos] == '"')) ++pos;
  auto const stop = text.find_first_of("\" )\n", pos);
  return text.substr(pos, stop == std::string::npos ? std::string::npos : stop - pos);
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

TEST_CASE("CMake project version matches version.hpp") {
  CHECK(value_after(read_source("CMakeLists.txt"), "project(headroom VERSION") == header_version);
}

TEST_CASE("Conan recipe version matches version.hpp") {
  CHECK(value_after(read_source("conanfile.py"), "\n    version =") == header_version);
}

TEST_CASE("vcpkg port version matches version.hpp") {
  CHECK(value_after(read_source("ports/headroom/vcpkg.json"), "\"version\"") == header_version);
}

TEST_CASE("releases are tags v<version>: the release port and the FetchContent snippet take that tag") {
  // docs/install.md, "Releases": tag vX.Y.Z on the commit whose four version strings are X.Y.Z.
  CHECK(read_source("ports/headroom/portfile.release.cmake").find("REF \"v${VERSION}\"") != std::string::npos);
  std::string const tag = "GIT_TAG        v" + header_version + ")";
  CHECK(read_source("tests/consumer/fetchcontent/CMakeLists.txt").find(tag) != std::string::npos);
  CHECK(read_source("docs/integrate.md").find(tag) != std::string::npos);
  CHECK(read_source("docs/install.md").find("`v" + header_version + "`") != std::string::npos);
}
