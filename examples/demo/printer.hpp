// SPDX-License-Identifier: Apache-2.0
#pragma once
// Output helpers for headroom-demo: sections, indented lines, aligned tables, and a tally of
// checks so that the demo exits non-zero when any check fails.
//
//   void demo_mymodule(headroom::demo::printer& p) {
//     p.section("mymodule: what it shows");
//     p.line("plan for ", n, " units");
//     headroom::demo::table t{"unit", "bytes", "slot"};
//     t.row("attn.0", 4096, 1);
//     p.print(t);
//     p.check(result == expected, "plan matches the hand-computed one");
//   }
#include <algorithm>
#include <cstddef>
#include <exception>
#include <functional>
#include <initializer_list>
#include <iostream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace headroom::demo {

namespace detail {
template <class... Parts>
[[nodiscard]] std::string to_text(Parts const&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}

// Numbers (and sizes such as "1.50 MiB") are right-aligned, text is left-aligned.
[[nodiscard]] inline bool looks_numeric(std::string_view cell) noexcept {
  if (cell.empty()) return false;
  char const c = cell.front();
  return (c >= '0' && c <= '9') || ((c == '-' || c == '+') && cell.size() > 1 && cell[1] >= '0' && cell[1] <= '9');
}
}  // namespace detail

/// Rows of cells under a header; printed with every column as wide as its widest cell.
class table {
 public:
  table(std::initializer_list<std::string> header) : header_(header) {}

  /// Adds a row; each cell is anything `operator<<` prints. Missing cells print empty.
  template <class... Cells>
  table& row(Cells const&... cells) {
    rows_.push_back({detail::to_text(cells)...});
    return *this;
  }

  [[nodiscard]] std::vector<std::string> const& header() const noexcept { return header_; }
  [[nodiscard]] std::vector<std::vector<std::string>> const& rows() const noexcept { return rows_; }

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
};

class printer {
 public:
  explicit printer(std::ostream& out = std::cout) : out_(out) {}

  /// A titled block; everything until the next section belongs to it.
  void section(std::string_view title) {
    out_ << "\n== " << title << " " << std::string(title.size() < 72 ? 72 - title.size() : 0, '=') << "\n";
  }

  /// One indented line made of `parts`.
  template <class... Parts>
  void line(Parts const&... parts) {
    out_ << "  " << detail::to_text(parts...) << "\n";
  }

  void print(table const& t) {
    std::size_t columns = t.header().size();
    for (auto const& r : t.rows()) columns = std::max(columns, r.size());
    std::vector<std::size_t> width(columns, 0);
    std::vector<bool> numeric(columns, true);
    auto cell = [](std::vector<std::string> const& r, std::size_t c) -> std::string const& {
      static std::string const empty;
      return c < r.size() ? r[c] : empty;
    };
    for (std::size_t c = 0; c < columns; ++c) {
      width[c] = cell(t.header(), c).size();
      for (auto const& r : t.rows()) {
        width[c] = std::max(width[c], cell(r, c).size());
        if (!cell(r, c).empty() && !detail::looks_numeric(cell(r, c))) numeric[c] = false;
      }
    }
    auto print_row = [&](std::vector<std::string> const& r, bool header) {
      out_ << "  ";
      for (std::size_t c = 0; c < columns; ++c) {
        std::string const& text = cell(r, c);
        std::string const pad(width[c] - text.size(), ' ');
        bool const last = c + 1 == columns;
        out_ << (c == 0 ? "" : "  ") << (numeric[c] && !header ? pad + text : last ? text : text + pad);
      }
      out_ << "\n";
    };
    print_row(t.header(), true);
    std::size_t total = 0;
    for (std::size_t c = 0; c < columns; ++c) total += width[c] + (c == 0 ? 0 : 2);
    out_ << "  " << std::string(total, '-') << "\n";
    for (auto const& r : t.rows()) print_row(r, false);
  }

  /// Records one check; prints it with its verdict. Returns `ok`.
  template <class... Parts>
  bool check(bool ok, Parts const&... what) {
    ++(ok ? passed_ : failed_);
    out_ << "  [" << (ok ? "pass" : "FAIL") << "] " << detail::to_text(what...) << "\n";
    return ok;
  }

  /// Runs one demo section; an exception it throws counts as a failed check.
  void run(std::string_view name, std::function<void(printer&)> const& body) {
    try {
      body(*this);
    } catch (std::exception const& e) {
      check(false, name, " threw: ", e.what());
    } catch (...) {
      check(false, name, " threw a non-standard exception");
    }
  }

  [[nodiscard]] int passed() const noexcept { return passed_; }
  [[nodiscard]] int failed() const noexcept { return failed_; }

  /// Prints the tally; returns the process exit code (0 only when every check passed).
  [[nodiscard]] int finish() {
    section("summary");
    line(passed_, " check(s) passed, ", failed_, " failed");
    out_.flush();
    return failed_ == 0 && passed_ > 0 ? 0 : 1;
  }

 private:
  std::ostream& out_;
  int passed_ = 0;
  int failed_ = 0;
};

}  // namespace headroom::demo
