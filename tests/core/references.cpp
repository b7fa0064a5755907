// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

// Every reference in the repository must point at something its user has: a file of this
// checkout, a public URL, or the fact itself. This test fails when a text file of the checkout
// cites what only the project's authors had: a notes folder beside the checkout, their reference
// notes, or their issue tracker by number. Public trackers are cited as "PR #N" or "#N" of a
// named project, which these patterns do not match.
#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "common/source_tree.hpp"

namespace {

struct hit {
  std::string file;
  int line = 0;
  std::string pattern, text;
};

// The patterns, lower case (the text is lowered before the search). '#' in a pattern stands for
// one digit. Spelled in pieces, so that this file does not match itself.
std::vector<std::string> const& patterns() {
  static std::vector<std::string> const p = {
      std::string("../") + "shared",     // the authors' notes folder beside the checkout
      std::string("reference") + "/",    // their reference notes
      std::string("reference") + " \xC2\xA7",  // "reference §N"
      std::string("maxpool") + ".md",    std::string("reduce_pp") + ".md",
      std::string("allocators") + ".md", std::string("cp_split") + ".md",
      std::string("issue") + " #",       // "issue 8", "Issue 13's": the project's own tracker
      std::string("/wo") + "rk/",        // the authors' machine
  };
  return p;
}

// A pattern as the failure message shows it.
std::string describe(std::string pattern) {
  if (auto const at = pattern.find('#'); at != std::string::npos) pattern.replace(at, 1, "<digit>");
  return pattern;
}

// Files that may name such a path, each for a reason that is not a citation.
std::set<std::string> const& allowed(std::string const& pattern) {
  // This file, which lists the patterns and tests them on examples.
  static std::set<std::string> const self = {"tests/core/references.cpp"};
  // Besides, an optional local tool folder, probed and reported as skipped when absent.
  static std::set<std::string> const shared_tools = {"tests/core/references.cpp", ".ci/run",
                                                     "tests/trace/viewer_check.py"};
  return pattern == patterns()[0] ? shared_tools : self;
}

bool matches_at(std::string_view text, std::size_t at, std::string_view pattern) {
  if (at + pattern.size() > text.size()) return false;
  for (std::size_t i = 0; i < pattern.size(); ++i) {
    char const c = text[at + i];
    if (pattern[i] == '#' ? !std::isdigit(static_cast<unsigned char>(c)) : c != pattern[i]) return false;
  }
  return true;
}

// The hits of every pattern in `text` (file name `name`), outside the allowed files.
std::vector<hit> find_references(std::string const& name, std::string const& text) {
  std::string lower(text);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  std::vector<hit> out;
  for (auto const& pattern : patterns()) {
    if (allowed(pattern).contains(name)) continue;
    for (std::size_t at = 0; at < lower.size(); ++at) {
      if (!matches_at(lower, at, pattern)) continue;
      auto const begin = text.rfind('\n', at);
      auto const line_start = begin == std::string::npos ? 0 : begin + 1;
      auto const line_end = std::min(text.find('\n', at), text.size());
      auto const line = 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at), '\n');
      out.push_back({name, static_cast<int>(line), pattern, text.substr(line_start, line_end - line_start)});
      at = line_end;
    }
  }
  return out;
}

}  // namespace

TEST_CASE("no file of the checkout cites what its user does not have") {
  std::vector<hit> hits;
  int const files = headroom_test::for_each_source_text(HEADROOM_SOURCE_DIR, [&](std::string const& name, std::string const& text) {
    auto const found = find_references(name, text);
    hits.insert(hits.end(), found.begin(), found.end());
  });
  CHECK(files > 300);  // the walk reached the sources
  for (auto const& h : hits)
    FAIL_CHECK(h.file << ":" << h.line << ": '" << describe(h.pattern)
                      << "' cites something a user of the repository does not have; state the fact, a public URL or a "
                         "docs/ page instead:\n    "
                      << h.text);
}

TEST_CASE("the reference check catches each pattern, in any case, and allows only what it lists") {
  CHECK(find_references("docs/x.md", std::string("see ../") + "shared/DESIGN.md").size() == 1);
  CHECK(find_references("docs/x.md", std::string("(Issue") + " 13's targets)").size() == 1);
  CHECK(find_references("docs/x.md", std::string("from reference") + " \xC2\xA7" "8").size() == 1);
  CHECK(find_references("docs/x.md", std::string("a\nb reference") + "/maxpool.md\n").size() == 2);
  CHECK(find_references("docs/x.md", std::string("a\nb reference") + "/maxpool.md\n")[0].line == 2);
  CHECK(find_references(".ci/run", std::string("../") + "shared/tools/vcpkg").empty());
  CHECK(find_references(".ci/run", std::string("issue") + " 8").size() == 1);
  CHECK(find_references("tools/x", std::string("../") + "shared/tools/vcpkg").size() == 1);
  for (char const* p : {"build/test", ".git", "python/headroom/__pycache__"}) CHECK_MESSAGE(headroom_test::skipped_in_tree(p), p);
  for (char const* p : {".ci/run", "docs/pool.md", "include/headroom/core.hpp"}) CHECK_MESSAGE(!headroom_test::skipped_in_tree(p), p);
  // Public trackers, named by project, pass.
  CHECK(find_references("docs/x.md", "AReaL PR #1223, PyTorch issue #159251, verl #5983").empty());
}
