// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

// docs/integrate.md quotes code that is built and tested: every ```cpp block is a run of lines
// of tests/integrate/skeletons.cpp, tests/integrate/cuda_engine.cu or examples/pipeline_stages.cpp,
// every ```cmake block one of the parent projects of tests/consumer/ (built by the
// consumer_subdirectory and consumer_fetchcontent tests). A block may drop an indentation the
// source lines share; nothing else may differ.
#include <cstddef>
#include <string>
#include <vector>

#include "common/source_file.hpp"

using headroom_test::read_source;

namespace {

std::vector<std::string> lines_of(std::string const& text) {
  std::vector<std::string> lines;
  std::size_t begin = 0;
  while (begin < text.size()) {
    auto end = text.find('\n', begin);
    if (end == std::string::npos) end = text.size();
    lines.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  return lines;
}

struct block {
  std::string language;
  std::size_t line;  // 1-based line of the opening fence
  std::vector<std::string> lines;
};

std::vector<block> fenced_blocks(std::string const& markdown) {
  std::vector<block> blocks;
  auto const lines = lines_of(markdown);
  for (std::size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].rfind("```", 0) != 0) continue;
    block b{lines[i].substr(3), i + 1, {}};
    for (++i; i < lines.size() && lines[i] != "```"; ++i) b.lines.push_back(lines[i]);
    REQUIRE_MESSAGE(i < lines.size(), "docs/integrate.md: the block opened at line " << b.line << " is not closed");
    blocks.push_back(std::move(b));
  }
  return blocks;
}

// True when `quote` is a run of consecutive lines of `source`, each with the same indentation
// prefix added (empty lines stay empty).
bool quotes(std::vector<std::string> const& source, std::vector<std::string> const& quote) {
  if (quote.empty()) return false;
  for (std::size_t i = 0; i + quote.size() <= source.size(); ++i) {
    auto const& first = source[i];
    if (first.size() < quote[0].size() || first.compare(first.size() - quote[0].size(), std::string::npos, quote[0]) != 0)
      continue;
    std::string const indent = first.substr(0, first.size() - quote[0].size());
    if (indent.find_first_not_of(' ') != std::string::npos) continue;
    bool all = true;
    for (std::size_t j = 0; j < quote.size() && all; ++j)
      all = quote[j].empty() ? source[i + j].empty() : source[i + j] == indent + quote[j];
    if (all) return true;
  }
  return false;
}

}  // namespace

TEST_CASE("quotes() finds indented runs of lines and nothing else") {
  std::vector<std::string> const src{"void f() {", "  int a = 1;", "", "  return;", "}"};
  CHECK(quotes(src, {"int a = 1;", "", "return;"}));
  CHECK(quotes(src, {"void f() {", "  int a = 1;"}));
  CHECK_FALSE(quotes(src, {"int a = 1;", "return;"}));  // not consecutive
  CHECK_FALSE(quotes(src, {"int a = 2;"}));
  CHECK_FALSE(quotes(src, {"a = 1;"}));  // only whitespace may be dropped
}

TEST_CASE("docs/integrate.md quotes the tested skeletons, the example and the consumer projects verbatim") {
  auto const blocks = fenced_blocks(read_source("docs/integrate.md"));
  struct source {
    std::string path;
    std::string language;
    std::vector<std::string> lines;
    int quoted = 0;
  };
  std::vector<source> sources{{"tests/integrate/skeletons.cpp", "cpp", {}},
                              {"tests/integrate/cuda_engine.cu", "cpp", {}},
                              {"examples/pipeline_stages.cpp", "cpp", {}},
                              {"tests/consumer/subdirectory/CMakeLists.txt", "cmake", {}},
                              {"tests/consumer/fetchcontent/CMakeLists.txt", "cmake", {}}};
  for (auto& s : sources) s.lines = lines_of(read_source(s.path));

  int checked = 0;
  for (auto const& b : blocks) {
    if (b.language != "cpp" && b.language != "cmake") continue;
    ++checked;
    bool found = false;
    for (auto& s : sources)
      if (s.language == b.language && quotes(s.lines, b.lines)) {
        ++s.quoted;
        found = true;
        break;
      }
    CHECK_MESSAGE(found, "docs/integrate.md line " << b.line << ": this ```" << b.language
                                                   << " block is not in any of the tested sources");
  }
  CHECK(checked >= 10);
  for (auto const& s : sources) CHECK_MESSAGE(s.quoted > 0, "docs/integrate.md quotes nothing of " << s.path);
}
