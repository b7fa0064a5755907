// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// to_svg: the Active Memory Timeline of a snapshot as a self-contained SVG (no script, no
// fonts beyond the generic family), for people who do not have PyTorch at hand. Categories are
// stacked areas in the viewer's palette (d3 schemeTableau10) and category order, so a category
// has the colour the viewer gives it; x is the alloc / free event index. Past
// max_svg_categories the rest share one area, "other (N categories)": the drawing stays
// O(points x categories) and readable whatever the trace names.
#include <algorithm>
#include <cmath>
#include <array>
#include <cstdint>
#include <cstdio>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "headroom/core/bytes.hpp"
#include "headroom/trace/snapshot.hpp"
#include "headroom/trace/timeline.hpp"

namespace headroom::trace {

/// Areas drawn at most (the last one "other" when the trace has more categories).
inline constexpr std::size_t max_svg_categories = 32;

namespace detail {
inline constexpr std::array<char const*, 10> tableau10{"#4e79a7", "#f28e2c", "#e15759", "#76b7b2", "#59a14f",
                                                       "#edc949", "#af7aa1", "#ff9da7", "#9c755f", "#bab0ab"};

inline std::string escape_xml(std::string_view s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}
/// Tick positions for an axis from 0 to at least `peak`: `step` a round number (1, 2, 2.5 or 5
/// times a power of ten) of `unit`, `top` the first multiple of it at or above peak. unit is 1
/// for event counts, the binary unit of the peak for bytes (label "GiB", ...).
struct axis_ticks {
  double unit = 1;
  char const* unit_name = "";
  double step = 1;
  double top = 1;
};

[[nodiscard]] inline axis_ticks nice_ticks(double peak, bool bytes, int target_ticks = 5) {
  axis_ticks t;
  if (bytes) {
    constexpr std::array<char const*, 5> names{"B", "KiB", "MiB", "GiB", "TiB"};
    std::size_t u = 0;
    while (u + 1 < names.size() && peak >= 1024.0 * t.unit) {
      t.unit *= 1024.0;
      ++u;
    }
    t.unit_name = names[u];
  }
  double const v = peak / t.unit;
  if (!(v > 0)) return t;  // an empty axis: one tick, 0
  double const raw = v / target_ticks;
  double const magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  t.step = 10 * magnitude;
  for (double m : {1.0, 2.0, 2.5, 5.0}) {
    if (m * magnitude >= raw) {
      t.step = m * magnitude;
      break;
    }
  }
  if (!bytes || t.unit == 1) t.step = std::max(1.0, std::round(t.step));  // whole events, whole bytes
  t.top = std::ceil(v / t.step - 1e-9) * t.step;
  return t;
}

inline std::string tick_label(double value, char const* unit_name) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%g%s%s", value, *unit_name != '\0' ? " " : "", unit_name);
  return buf;
}

}  // namespace detail

/// The Active Memory Timeline of `s`: categories stacked in the viewer's order and colours,
/// y ticks at round byte values, x ticks at round event indices, the legend beside the plot.
/// At most `max_points` x positions are drawn; each keeps the peak of the events it covers.
[[nodiscard]] inline std::string to_svg(snapshot const& s, std::string_view title = "Active Memory Timeline",
                                        std::size_t max_points = 2000) {
  auto const t = make_active_timeline(s, max_svg_categories);
  constexpr double width = 1024, height = 576, left = 80, right = 170, top = 44, bottom = 50;
  double const plot_w = width - left - right, plot_h = height - top - bottom;
  std::size_t const n = t.bytes.size();
  std::size_t const buckets = std::max<std::size_t>(1, std::min(n, std::max<std::size_t>(max_points, 1)));
  // Per bucket, the point with the largest total.
  std::vector<std::size_t> picks;
  for (std::size_t b = 0; b < buckets; ++b) {
    std::size_t const lo = b * n / buckets, hi = std::max(lo + 1, (b + 1) * n / buckets);
    std::size_t best = lo;
    for (std::size_t i = lo; i < hi && i < n; ++i) {
      if (t.total(i) > t.total(best)) best = i;
    }
    picks.push_back(best);
  }
  auto const yt = detail::nice_ticks(static_cast<double>(t.peak), true);
  auto const xt = detail::nice_ticks(static_cast<double>(n > 0 ? n - 1 : 0), false, 8);
  double const ymax = t.peak == 0 ? 1.0 : yt.top * yt.unit;
  auto x_of = [&](std::size_t k) { return left + plot_w * (static_cast<double>(k) / static_cast<double>(buckets)); };
  auto x_of_event = [&](double i) { return left + plot_w * (i / static_cast<double>(std::max<std::size_t>(n, 1))); };
  auto y_of = [&](double v) { return top + plot_h * (1.0 - v / ymax); };
  auto colour = [](std::size_t c) { return detail::tableau10[c % detail::tableau10.size()]; };

  std::ostringstream o;
  o.setf(std::ios::fixed);
  o.precision(1);
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
    << "\" viewBox=\"0 0 " << width << ' ' << height << "\" font-family=\"sans-serif\" font-size=\"11\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"" << left << "\" y=\"18\" font-size=\"14\">" << detail::escape_xml(title) << "</text>\n"
    << "<text x=\"" << left << "\" y=\"34\">device " << s.device << ", peak " << format_bytes(t.peak) << ", "
    << (n > 0 ? n - 1 : 0) << " alloc/free events";
  if (s.dropped > 0) o << ", " << s.dropped << " older events dropped";
  if (s.untracked > 0) o << ", " << s.untracked << " blocks left out (live table full)";
  o << "</text>\n";
  // Grid lines under the data, then the stacked areas (bottom category first).
  for (double v = 0; t.peak > 0 && v <= yt.top + 1e-9; v += yt.step) {
    double const y = y_of(v * yt.unit);
    o << "<line x1=\"" << left << "\" y1=\"" << y << "\" x2=\"" << left + plot_w << "\" y2=\"" << y
      << "\" stroke=\"#e0e0e0\"/>\n";
  }
  auto label = [&](std::size_t c) {
    std::string l = detail::escape_xml(t.categories[c]);
    if (t.merged > 0 && c + 1 == t.categories.size()) l += " (" + std::to_string(t.merged) + " categories)";
    return l;
  };
  std::vector<double> below(picks.size(), 0.0);  // bytes of the categories drawn so far, per point
  for (std::size_t c = 0; c < t.categories.size(); ++c) {
    std::ostringstream lo, up;
    for (auto* os : {&lo, &up}) {
      os->setf(std::ios::fixed);
      os->precision(1);
    }
    for (std::size_t k = 0; k < picks.size(); ++k)
      lo << x_of(k) << ',' << y_of(below[k]) << ' ' << x_of(k + 1) << ',' << y_of(below[k]) << ' ';
    for (std::size_t k = 0; k < picks.size(); ++k) below[k] += static_cast<double>(t.bytes[picks[k]][c]);
    for (std::size_t k = picks.size(); k-- > 0;)
      up << x_of(k + 1) << ',' << y_of(below[k]) << ' ' << x_of(k) << ',' << y_of(below[k]) << ' ';
    o << "<polygon fill=\"" << colour(c) << "\" points=\"" << lo.str() << up.str() << "\"><title>" << label(c)
      << "</title></polygon>\n";
  }
  if (t.peak == 0) {
    o << "<text x=\"" << left + plot_w / 2 << "\" y=\"" << top + plot_h / 2
      << "\" text-anchor=\"middle\" fill=\"#666\">no memory held by blocks in this trace</text>\n";
  }
  // Axes and ticks.
  o << "<line x1=\"" << left << "\" y1=\"" << top << "\" x2=\"" << left << "\" y2=\"" << top + plot_h
    << "\" stroke=\"black\"/>\n<line x1=\"" << left << "\" y1=\"" << top + plot_h << "\" x2=\"" << left + plot_w
    << "\" y2=\"" << top + plot_h << "\" stroke=\"black\"/>\n";
  for (double v = 0; v <= (t.peak > 0 ? yt.top : 0) + 1e-9; v += yt.step) {
    double const y = y_of(v * yt.unit);
    o << "<line x1=\"" << left - 4 << "\" y1=\"" << y << "\" x2=\"" << left << "\" y2=\"" << y
      << "\" stroke=\"black\"/><text x=\"" << left - 6 << "\" y=\"" << y + 4 << "\" text-anchor=\"end\">"
      << detail::tick_label(v, yt.unit_name) << "</text>\n";
  }
  for (double i = 0; i <= xt.top + 1e-9 && i <= static_cast<double>(n > 0 ? n - 1 : 0) + 1e-9; i += xt.step) {
    double const x = x_of_event(i);
    o << "<line x1=\"" << x << "\" y1=\"" << top + plot_h << "\" x2=\"" << x << "\" y2=\"" << top + plot_h + 4
      << "\" stroke=\"black\"/><text x=\"" << x << "\" y=\"" << top + plot_h + 16 << "\" text-anchor=\"middle\">"
      << detail::tick_label(i, "") << "</text>\n";
  }
  o << "<text x=\"" << left + plot_w / 2 << "\" y=\"" << height - 10
    << "\" text-anchor=\"middle\">alloc / free event</text>\n";
  // Legend, right of the plot: it never covers data.
  double const lx = left + plot_w + 16;
  for (std::size_t c = 0; c < t.categories.size(); ++c) {
    double const y = top + 15.0 * static_cast<double>(c);
    o << "<rect x=\"" << lx << "\" y=\"" << y << "\" width=\"10\" height=\"10\" fill=\"" << colour(c)
      << "\"/><text x=\"" << lx + 16 << "\" y=\"" << y + 9 << "\">" << label(c) << "</text>\n";
  }
  o << "</svg>\n";
  return o.str();
}

}  // namespace headroom::trace
