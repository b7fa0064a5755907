// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

// docs/errors.md is a catalogue of bad input: every row names an entry point, the input it
// rejects, the error, a part of the message and the doctest case that proves it. This test
// keeps the catalogue honest: each row's test file and case must exist, its error must be a
// headroom::error subclass (or std::bad_alloc), and the quoted message part must appear in that
// test file. Every error class the headers declare must be in the "Error classes" table, and
// every module of the CUDA-free core must have a table. The checkers are also run on broken
// input to show that they catch it.
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
fs::path const root = HEADROOM_SOURCE_DIR;

struct row {
  int line = 0;
  std::string module, entry, error, message, file, test_case;
};

std::string read(fs::path const& p) {
  std::ifstream in(p);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string trim(std::string s) {
  auto const b = s.find_first_not_of(" \t");
  auto const e = s.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

// Rows of every table whose header starts with "| entry point |", tagged with the "## module".
std::vector<row> parse(std::string const& text, std::vector<std::string>& problems) {
  std::vector<row> rows;
  std::istringstream in(text);
  std::string line, module;
  bool in_table = false;
  static std::regex const test_re(R"(`([^`]+)`\s*::\s*"([^"]+)\")");
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.rfind("## ", 0) == 0) module = trim(line.substr(3));
    if (line.rfind("| entry point |", 0) == 0) {
      in_table = true;
      continue;
    }
    if (line.rfind("|", 0) != 0) {
      in_table = false;
      continue;
    }
    if (!in_table || line.rfind("|---", 0) == 0) continue;
    std::vector<std::string> cells;
    std::string cell;
    std::istringstream ls(line.substr(1));
    while (std::getline(ls, cell, '|')) cells.push_back(trim(cell));
    if (!cells.empty() && cells.back().empty()) cells.pop_back();
    if (cells.size() != 5) {
      problems.push_back("line " + std::to_string(n) + ": " + std::to_string(cells.size()) + " cells, expected 5");
      continue;
    }
    row r;
    r.line = n;
    r.module = module;
    r.entry = cells[0];
    r.error = cells[2];
    r.message = cells[3];
    std::smatch m;
    if (!std::regex_search(cells[4], m, test_re)) {
      problems.push_back("line " + std::to_string(n) + ": test cell '" + cells[4] + "' is not `file` :: \"case\"");
      continue;
    }
    r.file = m[1];
    r.test_case = m[2];
    rows.push_back(r);
  }
  return rows;
}

// A doctest case named `name`: TEST_CASE, TEST_CASE_TEMPLATE or TEST_CASE_FIXTURE on the line
// of the quoted name.
bool has_test_case(std::string const& src, std::string const& name) {
  std::string const quoted = "\"" + name + "\"";
  for (auto at = src.find(quoted); at != std::string::npos; at = src.find(quoted, at + 1)) {
    auto const line_start = src.rfind('\n', at);
    auto const macro = src.find("TEST_CASE", line_start == std::string::npos ? 0 : line_start);
    if (macro < at) return true;
  }
  return false;
}

// The error classes `headers` declare: headroom::error (the class derived from
// std::runtime_error) and every class derived from one of them, directly or not. `headers` maps
// a file name to its text; only lines of the form `class X : public Y` are read.
std::set<std::string> error_classes(std::map<std::string, std::string> const& headers) {
  static std::regex const decl(R"(^\s*(?:class|struct)\s+(\w+)\s*(?:final\s*)?:\s*public\s+([\w:]+))");
  std::map<std::string, std::string> base_of;
  for (auto const& [name, text] : headers) {
    std::istringstream in(text);
    for (std::string line; std::getline(in, line);) {
      std::smatch m;
      if (line.find("public") != std::string::npos && std::regex_search(line, m, decl)) {
        std::string base = m[2];
        if (base.rfind("headroom::", 0) == 0) base = base.substr(10);
        base_of[m[1]] = base;
      }
    }
  }
  std::set<std::string> out;
  if (base_of.contains("error") && base_of["error"] == "std::runtime_error") out.insert("error");
  for (bool grew = !out.empty(); grew;) {
    grew = false;
    for (auto const& [name, base] : base_of)
      if (out.contains(base) && out.insert(name).second) grew = true;
  }
  return out;
}

std::map<std::string, std::string> public_headers() {
  std::map<std::string, std::string> out;
  for (auto const& e : fs::recursive_directory_iterator(root / "include"))
    if (e.is_regular_file()) out[e.path().string()] = read(e.path());
  return out;
}

// Classes of `classes` without a row "| `name` |" in the "## Error classes" section of `doc`.
std::vector<std::string> undocumented_classes(std::string const& doc, std::set<std::string> const& classes) {
  auto const begin = doc.find("\n## Error classes\n");
  auto const end = begin == std::string::npos ? begin : doc.find("\n## ", begin + 1);
  std::string const section = begin == std::string::npos ? std::string() : doc.substr(begin, end - begin);
  std::vector<std::string> out;
  for (auto const& c : classes)
    if (section.find("\n| `" + c + "` |") == std::string::npos) out.push_back(c);
  return out;
}

std::set<std::string> const& known_errors() {
  static std::set<std::string> const errors = [] {
    auto s = error_classes(public_headers());
    s.insert("std::bad_alloc");
    return s;
  }();
  return errors;
}

// Everything wrong with one row, as messages.
std::vector<std::string> check(row const& r) {
  std::vector<std::string> out;
  auto const where = "line " + std::to_string(r.line) + " (" + r.entry + "): ";
  auto const& errors = known_errors();
  static std::regex const ticked("`([^`]+)`");
  int named = 0;
  for (std::sregex_iterator it(r.error.begin(), r.error.end(), ticked), end; it != end; ++it) {
    ++named;
    if (!errors.contains((*it)[1])) out.push_back(where + "error '" + std::string((*it)[1]) + "' is not a headroom error");
  }
  if (named == 0) out.push_back(where + "no error type in '" + r.error + "'");

  fs::path const file = root / r.file;
  if (!fs::is_regular_file(file)) {
    out.push_back(where + "test file " + r.file + " does not exist");
    return out;
  }
  std::string const src = read(file);
  if (!has_test_case(src, r.test_case)) out.push_back(where + "no TEST_CASE \"" + r.test_case + "\" in " + r.file);
  if (r.message != "—") {
    if (r.message.size() < 3 || r.message.front() != '`' || r.message.back() != '`')
      out.push_back(where + "message '" + r.message + "' is neither `text` nor —");
    else if (src.find(r.message.substr(1, r.message.size() - 2)) == std::string::npos)
      out.push_back(where + "message part " + r.message + " does not appear in " + r.file);
  }
  return out;
}

}  // namespace

TEST_CASE("docs/errors.md: every row names an existing test case that checks its message") {
  std::vector<std::string> problems;
  auto const rows = parse(read(root / "docs/errors.md"), problems);
  for (auto const& p : problems) FAIL_CHECK(p);
  REQUIRE(rows.size() >= 50);  // a parser that finds nothing must not pass
  std::map<std::string, int> per_module;
  for (auto const& r : rows) {
    ++per_module[r.module];
    for (auto const& p : check(r)) FAIL_CHECK(p);
  }
  // Every module of the CUDA-free core has a table.
  for (char const* m : {"core", "host (thread_group)", "cp", "pool", "stats", "lifetime", "pipeline", "trace"}) {
    CAPTURE(m);
    CHECK(per_module[m] >= 1);
  }
}

TEST_CASE("the catalogue check catches a missing test case, a missing file, an unquoted message and a foreign error") {
  std::string const doc =
      "## cp\n"
      "| entry point | bad input | error | message contains | test |\n"
      "|---|---|---|---|---|\n"
      "| `a` | x | `invalid_argument` | `empty` | `tests/cp/bad_input.cpp` :: \"no such case\" |\n"
      "| `b` | x | `invalid_argument` | — | `tests/cp/no_such_file.cpp` :: \"c\" |\n"
      "| `c` | x | `std::out_of_range` | `no message like this anywhere` | `tests/core/bytes.cpp` :: \"round_up rounds to any positive multiple\" |\n"
      "| `d` | x | `invalid_argument` | — | not a test reference |\n"
      "| `e` | x | `invalid_argument` | — |\n";
  std::vector<std::string> problems;
  auto const rows = parse(doc, problems);
  REQUIRE(rows.size() == 3);
  CHECK(problems.size() == 2);  // the malformed reference and the four-cell row
  CHECK(check(rows[0]).size() == 1);
  CHECK(check(rows[0])[0].find("no TEST_CASE \"no such case\"") != std::string::npos);
  CHECK(check(rows[1]).size() == 1);
  CHECK(check(rows[1])[0].find("does not exist") != std::string::npos);
  auto const c = check(rows[2]);
  REQUIRE(c.size() == 2);
  CHECK(c[0].find("std::out_of_range' is not a headroom error") != std::string::npos);
  CHECK(c[1].find("does not appear in tests/core/bytes.cpp") != std::string::npos);
}

TEST_CASE("docs/errors.md lists every error class the headers declare") {
  auto const classes = error_classes(public_headers());
  CAPTURE(classes.size());
  // The hierarchy of core/error.hpp; a parser that finds fewer must not pass.
  for (char const* c : {"error", "invalid_argument", "logic_error", "capacity_error", "collective_mismatch",
                        "group_aborted", "cuda_error", "nccl_error", "mpi_error"}) {
    CAPTURE(c);
    CHECK(classes.contains(c));
  }
  for (auto const& c : undocumented_classes(read(root / "docs/errors.md"), classes))
    FAIL_CHECK("error class " << c << " is declared in include/ but has no row in docs/errors.md's Error classes table");
}

TEST_CASE("the class check finds classes derived at any depth, and catches an undocumented one") {
  std::map<std::string, std::string> const headers = {
      {"a.hpp", "class error : public std::runtime_error {};\nclass invalid_argument : public error {};\n"},
      {"b.hpp", "  class plan_error final : public headroom::invalid_argument {\nclass unrelated : public std::vector<int> {};\n"}};
  auto const classes = error_classes(headers);
  CHECK(classes == std::set<std::string>{"error", "invalid_argument", "plan_error"});
  std::string const doc = "# errors\n\n## Error classes\n\n| class | when | message |\n|---|---|---|\n| `error` | x | y |\n"
                          "| `invalid_argument` | x | y |\n\n## core\n\n| `plan_error` | x | y |\n";
  CHECK(undocumented_classes(doc, classes) == std::vector<std::string>{"plan_error"});  // outside the section
  CHECK(undocumented_classes("no such section", classes).size() == 3);
}
