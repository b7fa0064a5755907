#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <fstream>
#include <sstream>
#include <string>

// README.md quotes examples/readme_usage.cpp (built and run as a test) and gives the commands
// that .ci/run executes; this keeps the quote and the commands from drifting.
namespace {

std::string read_source(std::string const& relative) {
  std::ifstream in(std::string(HEADROOM_SOURCE_DIR) + "/" + relative);
  REQUIRE_MESSAGE(in.good(), ("cannot open " + relative));
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

}  // namespace

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
  CHECK(readme.find("```sh\ncmake --workflow --preset test\n```") != std::string::npos);
  CHECK(readme.find("\n## Modules\n") != std::string::npos);
}
