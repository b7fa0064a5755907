#pragma once
// to_svg: the Active Memory Timeline of a snapshot as a self-contained SVG (no script, no
// fonts beyond the generic family), for people who do not have PyTorch at hand. Categories are
// stacked areas in the viewer's palette (d3 Tableau10); x is the alloc / free event index.
#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <sstream>
#include <string>
#include <string_view>

#include "headroom/core/bytes.hpp"
#include "headroom/trace/snapshot.hpp"
#include "headroom/trace/timeline.hpp"

namespace headroom::trace {

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
}  // namespace detail

/// At most `max_points` x positions are drawn; each keeps the peak of the events it covers.
[[nodiscard]] inline std::string to_svg(snapshot const& s, std::string_view title = "Active Memory Timeline",
                                        std::size_t max_points = 2000) {
  auto const t = make_active_timeline(s);
  constexpr double width = 1024, height = 576, left = 90, right = 20, top = 40, bottom = 40;
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
  double const ymax = t.peak == 0 ? 1.0 : static_cast<double>(t.peak);
  auto x_of = [&](std::size_t k) { return left + plot_w * (static_cast<double>(k) / static_cast<double>(buckets)); };
  auto y_of = [&](double v) { return top + plot_h * (1.0 - v / ymax); };

  std::ostringstream o;
  o.setf(std::ios::fixed);
  o.precision(1);
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << width << "\" height=\"" << height
    << "\" viewBox=\"0 0 " << width << ' ' << height << "\" font-family=\"sans-serif\" font-size=\"11\">\n"
    << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n"
    << "<text x=\"" << left << "\" y=\"22\" font-size=\"14\">" << detail::escape_xml(title) << " (device " << s.device
    << ", peak " << format_bytes(t.peak) << ", " << n - 1 << " alloc/free events";
  if (s.dropped > 0) o << ", " << s.dropped << " older events dropped";
  o << ")</text>\n";
  // Stacked areas, bottom category first; each a step polygon over the picked points.
  for (std::size_t c = 0; c < t.categories.size(); ++c) {
    std::ostringstream lo, up;
    for (auto* os : {&lo, &up}) {
      os->setf(std::ios::fixed);
      os->precision(1);
    }
    for (std::size_t k = 0; k < picks.size(); ++k) {
      double below = 0;
      for (std::size_t j = 0; j < c; ++j) below += static_cast<double>(t.bytes[picks[k]][j]);
      lo << x_of(k) << ',' << y_of(below) << ' ' << x_of(k + 1) << ',' << y_of(below) << ' ';
    }
    for (std::size_t k = picks.size(); k-- > 0;) {
      double upto = 0;
      for (std::size_t j = 0; j <= c; ++j) upto += static_cast<double>(t.bytes[picks[k]][j]);
      up << x_of(k + 1) << ',' << y_of(upto) << ' ' << x_of(k) << ',' << y_of(upto) << ' ';
    }
    o << "<polygon fill=\"" << detail::tableau10[c % detail::tableau10.size()] << "\" points=\"" << lo.str()
      << up.str() << "\"><title>" << detail::escape_xml(t.categories[c]) << "</title></polygon>\n";
  }
  // Axes, ticks, legend.
  o << "<line x1=\"" << left << "\" y1=\"" << top << "\" x2=\"" << left << "\" y2=\"" << top + plot_h
    << "\" stroke=\"black\"/>\n<line x1=\"" << left << "\" y1=\"" << top + plot_h << "\" x2=\"" << left + plot_w
    << "\" y2=\"" << top + plot_h << "\" stroke=\"black\"/>\n";
  for (int i = 0; i <= 4; ++i) {
    double const v = ymax * i / 4.0;
    o << "<text x=\"" << left - 6 << "\" y=\"" << y_of(v) + 4 << "\" text-anchor=\"end\">"
      << format_bytes(static_cast<std::uint64_t>(v)) << "</text>\n";
  }
  o << "<text x=\"" << left + plot_w / 2 << "\" y=\"" << height - 10
    << "\" text-anchor=\"middle\">alloc / free event</text>\n";
  for (std::size_t c = 0; c < t.categories.size(); ++c) {
    double const y = top + 8 + 15.0 * static_cast<double>(c);
    o << "<rect x=\"" << left + 10 << "\" y=\"" << y << "\" width=\"10\" height=\"10\" fill=\""
      << detail::tableau10[c % detail::tableau10.size()] << "\"/><text x=\"" << left + 26 << "\" y=\"" << y + 9
      << "\">" << detail::escape_xml(t.categories[c]) << "</text>\n";
  }
  o << "</svg>\n";
  return o.str();
}

}  // namespace headroom::trace
