// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// rank_table: the result of gather. For every key, every rank's value and a summary: max, min,
// mean, and the rank holding the max (and the min). Ties go to the lowest rank, so the answer
// is the same on every rank and from run to run.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iomanip>
#include <ostream>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "headroom/core/error.hpp"
#include "headroom/stats/dynamic_report.hpp"
#include "headroom/stats/value.hpp"

namespace headroom::stats {

struct stat_summary {
  std::string name;
  value_kind kind = value_kind::int64;
  std::vector<stats::value> per_rank;  // index = rank
  stats::value max;
  stats::value min;
  double mean = 0.0;  // a double even for integer keys (rounded beyond 2^53)
  int argmax = 0;     // lowest rank holding max
  int argmin = 0;     // lowest rank holding min
};

class rank_table {
 public:
  rank_table() = default;
  rank_table(int ranks, std::vector<stat_summary> rows) : ranks_(ranks), rows_(std::move(rows)) {}

  [[nodiscard]] int ranks() const noexcept { return ranks_; }
  [[nodiscard]] std::size_t size() const noexcept { return rows_.size(); }
  [[nodiscard]] bool empty() const noexcept { return rows_.empty(); }
  [[nodiscard]] std::vector<stat_summary> const& rows() const noexcept { return rows_; }
  [[nodiscard]] auto begin() const noexcept { return rows_.begin(); }
  [[nodiscard]] auto end() const noexcept { return rows_.end(); }

  /// The row of `name`; throws invalid_argument naming the key when absent.
  [[nodiscard]] stat_summary const& at(std::string_view name) const {
    for (auto const& r : rows_)
      if (r.name == name) return r;
    throw invalid_argument(headroom::detail::concat("stats::rank_table: no key \"", name, "\" among ", rows_.size(), " keys"));
  }

  /// The per-key maxima as a report (what stats::max returns).
  [[nodiscard]] dynamic_report maxima() const {
    dynamic_report r;
    for (auto const& row : rows_) r.set(row.name, row.max);
    return r;
  }

  /// A table: key, max (rank), min (rank), mean, then one column per rank; columns as wide as
  /// their widest cell.
  friend std::ostream& operator<<(std::ostream& os, rank_table const& t) {
    auto text = [](stats::value const& v) {
      std::ostringstream s;
      s << std::setprecision(6);
      print_value(s, v);
      return s.str();
    };
    std::vector<std::vector<std::string>> cells;
    std::vector<std::string> header = {"key", "max (rank)", "min (rank)", "mean"};
    for (int r = 0; r < t.ranks_; ++r) header.push_back("rank " + std::to_string(r));
    cells.push_back(header);
    for (auto const& row : t.rows_) {
      std::ostringstream mean;
      mean << std::setprecision(6) << row.mean;
      std::vector<std::string> line = {row.name, text(row.max) + " (" + std::to_string(row.argmax) + ")",
                                       text(row.min) + " (" + std::to_string(row.argmin) + ")", mean.str()};
      for (auto const& v : row.per_rank) line.push_back(text(v));
      cells.push_back(std::move(line));
    }
    std::vector<std::size_t> width(header.size(), 0);
    std::ios_base::fmtflags const saved = os.flags();
    for (auto const& line : cells)
      for (std::size_t c = 0; c < line.size() && c < width.size(); ++c) width[c] = std::max(width[c], line[c].size());
    for (auto const& line : cells) {
      for (std::size_t c = 0; c < line.size() && c < width.size(); ++c) {
        if (c == 0) os << std::left << std::setw(static_cast<int>(width[c])) << line[c];
        else os << "  " << std::right << std::setw(static_cast<int>(width[c])) << line[c];
      }
      os << '\n';
    }
    os.flags(saved);
    return os;
  }

 private:
  int ranks_ = 1;
  std::vector<stat_summary> rows_;
};

}  // namespace headroom::stats
