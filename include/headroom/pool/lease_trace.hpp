// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// A lease trace: what one allocator was asked for, in order — its declared buckets and, step
// after step, each acquire and release. Recorded by an adapter (Python's headroom.pool.LeaseTrace,
// learning_arena), written as text, read back and planned on a CPU (plan_lifetimes).
//
//   pool::lease_trace t;
//   t.declare({.id = 0, .unit = 0, .group = 0, .dtype = "bfloat16", .bytes = 4096});
//   t.acquire(0, 4352);  t.release(0);  t.end_step();
//   auto const again = pool::parse_lease_trace(t.to_text());   // again == t
//
// Rules, checked when recorded and when parsed (errors name the bucket, and the line when
// parsed): a bucket is declared once before its first acquire, with bytes > 0 and a dtype name
// without blanks; a bucket is acquired only when not held and released only when held; nothing is
// held at a step boundary. The event clock of a lease is the index of its events: a lease is the
// half-open interval [its acquire, its release).
//
// Text format, version 1 (docs/pool.md, "The lease trace format"): the first line is
// `headroom-lease-trace 1`; then one record a line, fields separated by one or more blanks:
//   bucket <id> <unit or -> <group> <dtype> <bytes>     a declaration
//   acquire <id> <bytes>
//   release <id>
//   step                                                a step boundary
// Blank lines and lines starting with '#' are ignored. Integers are decimal, unsigned, < 2^62.
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "headroom/core/error.hpp"
#include "headroom/pool/workload.hpp"

namespace headroom::pool {

inline constexpr std::uint64_t no_trace_unit = std::numeric_limits<std::uint64_t>::max();

/// A declared bucket. `bytes` is what Megatron plans it by (unpadded elements x element size):
/// the replays rank buckets by it; requests (acquire) may be larger (padded).
struct trace_bucket {
  std::uint64_t id = 0;
  std::uint64_t unit = no_trace_unit;  ///< FSDP unit; no_trace_unit: outside every unit (never pooled)
  std::uint64_t group = 0;             ///< the replays keep separate slot lists per group (one MaxPool each)
  std::string dtype;                   ///< the replays' key for `max` ("bfloat16", "float32", ...)
  std::uint64_t bytes = 0;

  friend bool operator==(trace_bucket const&, trace_bucket const&) = default;
};

enum class lease_event_kind : std::uint8_t { acquire, release, step };

struct lease_event {
  lease_event_kind kind = lease_event_kind::step;
  std::uint64_t bucket = 0;  ///< acquire, release
  std::uint64_t bytes = 0;   ///< acquire: the request

  friend bool operator==(lease_event const&, lease_event const&) = default;
};

class lease_trace {
 public:
  static constexpr std::string_view header = "headroom-lease-trace";
  static constexpr int version = 1;

  /// Throws invalid_argument for an id declared before, 0 bytes, bytes beyond 2^62 or a dtype name
  /// that is empty or has blanks.
  void declare(trace_bucket b) {
    expects(!index_.contains(b.id), where_, "bucket ", b.id, " is declared twice; expected one declaration a bucket");
    expects(b.bytes > 0 && b.bytes <= max_workload_bytes, where_, "bucket ", b.id, " declared with ", b.bytes,
            " bytes; expected 1 .. 2^62");
    expects(!b.dtype.empty() && b.dtype.find_first_of(" \t\r\n") == std::string::npos, where_, "bucket ", b.id,
            " declared with dtype '", b.dtype, "'; expected a name without blanks");
    index_.emplace(b.id, buckets_.size());
    buckets_.push_back(std::move(b));
  }
  /// Throws invalid_argument for an undeclared bucket or 0 / beyond 2^62 bytes; logic_error when the
  /// bucket is held.
  void acquire(std::uint64_t bucket, std::uint64_t bytes) {
    expects(index_.contains(bucket), where_, "acquire of bucket ", bucket, ", which was never declared");
    expects(bytes > 0 && bytes <= max_workload_bytes, where_, "acquire of bucket ", bucket, " for ", bytes,
            " bytes; expected 1 .. 2^62");
    expects<logic_error>(!held_.contains(bucket), where_, "acquire of bucket ", bucket,
                         ", which is held (acquired and not released)");
    held_.insert(bucket);
    events_.push_back({lease_event_kind::acquire, bucket, bytes});
  }
  /// Throws logic_error when the bucket is not held (invalid_argument when never declared).
  void release(std::uint64_t bucket) {
    expects(index_.contains(bucket), where_, "release of bucket ", bucket, ", which was never declared");
    expects<logic_error>(held_.erase(bucket) == 1, where_, "release of bucket ", bucket, ", which is not held");
    events_.push_back({lease_event_kind::release, bucket, 0});
  }
  /// Throws logic_error when a bucket is held: nothing is live at a step boundary.
  void end_step() {
    expects<logic_error>(held_.empty(), where_, "step boundary with ", held_.size(), " bucket(s) held (first: ",
                         held_.empty() ? 0 : *held_.begin(), "); expected every bucket released at a step boundary");
    events_.push_back({lease_event_kind::step, 0, 0});
    ++steps_;
  }

  [[nodiscard]] std::vector<trace_bucket> const& buckets() const noexcept { return buckets_; }
  [[nodiscard]] std::vector<lease_event> const& events() const noexcept { return events_; }
  /// The declaration of `id`, or nothing.
  [[nodiscard]] trace_bucket const* find(std::uint64_t id) const {
    auto it = index_.find(id);
    return it == index_.end() ? nullptr : &buckets_[it->second];
  }
  [[nodiscard]] std::size_t steps() const noexcept { return steps_; }  ///< step boundaries recorded
  [[nodiscard]] std::set<std::uint64_t> const& held() const noexcept { return held_; }

  /// Records one event (acquire, release or step boundary), with the checks above.
  void record(lease_event const& e) {
    switch (e.kind) {
      case lease_event_kind::acquire: acquire(e.bucket, e.bytes); break;
      case lease_event_kind::release: release(e.bucket); break;
      case lease_event_kind::step: end_step(); break;
    }
  }

  [[nodiscard]] std::string to_text() const {
    std::ostringstream os;
    os << header << ' ' << version << '\n';
    for (auto const& b : buckets_) {
      os << "bucket " << b.id << ' ';
      if (b.unit == no_trace_unit) os << '-';
      else os << b.unit;
      os << ' ' << b.group << ' ' << b.dtype << ' ' << b.bytes << '\n';
    }
    for (auto const& e : events_) {
      switch (e.kind) {
        case lease_event_kind::acquire: os << "acquire " << e.bucket << ' ' << e.bytes << '\n'; break;
        case lease_event_kind::release: os << "release " << e.bucket << '\n'; break;
        case lease_event_kind::step: os << "step\n"; break;
      }
    }
    return os.str();
  }

  friend bool operator==(lease_trace const& a, lease_trace const& b) {
    return a.buckets_ == b.buckets_ && a.events_ == b.events_;
  }

  /// Prefix of every error message (parse_lease_trace sets "line N: ").
  void set_error_prefix(std::string prefix) { where_ = std::move(prefix); }

 private:
  std::vector<trace_bucket> buckets_;
  std::map<std::uint64_t, std::size_t> index_;
  std::vector<lease_event> events_;
  std::set<std::uint64_t> held_;
  std::size_t steps_ = 0;
  std::string where_ = "pool::lease_trace: ";
};

namespace detail {

inline std::vector<std::string_view> split_blanks(std::string_view line) {
  std::vector<std::string_view> out;
  std::size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    std::size_t const start = i;
    while (i < line.size() && line[i] != ' ' && line[i] != '\t') ++i;
    if (i > start) out.push_back(line.substr(start, i - start));
  }
  return out;
}

inline std::uint64_t parse_integer(std::string_view field, std::size_t line, std::string_view what) {
  std::uint64_t v = 0;
  bool ok = !field.empty() && field.size() <= 19;
  for (char c : field) {
    if (c < '0' || c > '9') ok = false;
    else v = v * 10 + static_cast<std::uint64_t>(c - '0');
  }
  expects(ok && v <= max_workload_bytes, "pool::parse_lease_trace: line ", line, ": ", what, " '", field,
          "' is not a decimal integer in [0, 2^62]");
  return v;
}

}  // namespace detail

/// Reads the text format (header comment). Throws invalid_argument naming the line and the value
/// for a missing or unknown header or version, an unknown record, a wrong field count, a field
/// that is not an integer, or a record that breaks the rules (logic_error for held / not held);
/// a trace that ends with buckets held is an error too.
[[nodiscard]] inline lease_trace parse_lease_trace(std::string_view text) {
  lease_trace t;
  std::size_t line_no = 0;
  bool header_seen = false;
  std::size_t pos = 0;
  while (pos <= text.size()) {
    std::size_t const nl = text.find('\n', pos);
    std::string_view line = text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos);
    pos = nl == std::string_view::npos ? text.size() + 1 : nl + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    auto const f = detail::split_blanks(line);
    if (f.empty() || f[0].front() == '#') continue;
    std::string const at = headroom::detail::concat("pool::parse_lease_trace: line ", line_no, ": ");
    if (!header_seen) {
      expects(f.size() == 2 && f[0] == lease_trace::header, at, "'", line, "' is not a lease trace header; expected '",
              lease_trace::header, " ", lease_trace::version, "'");
      expects(f[1] == std::to_string(lease_trace::version), at, "lease trace version '", f[1],
              "'; this reader knows version ", lease_trace::version);
      header_seen = true;
      continue;
    }
    t.set_error_prefix(at);
    auto const want = [&](std::size_t n) {
      expects(f.size() == n, at, "'", f[0], "' record has ", f.size() - 1, " fields; expected ", n - 1, " ('", line,
              "')");
    };
    auto const integer = [&](std::size_t i, std::string_view what) { return detail::parse_integer(f[i], line_no, what); };
    if (f[0] == "bucket") {
      want(6);
      trace_bucket b;
      b.id = integer(1, "bucket id");
      b.unit = f[2] == "-" ? no_trace_unit : integer(2, "unit");
      b.group = integer(3, "group");
      b.dtype = std::string(f[4]);
      b.bytes = integer(5, "bytes");
      t.declare(std::move(b));
    } else if (f[0] == "acquire") {
      want(3);
      t.acquire(integer(1, "bucket id"), integer(2, "bytes"));
    } else if (f[0] == "release") {
      want(2);
      t.release(integer(1, "bucket id"));
    } else if (f[0] == "step") {
      want(1);
      t.end_step();
    } else {
      throw invalid_argument(headroom::detail::concat(at, "unknown record '", f[0],
                                                      "'; expected bucket, acquire, release or step"));
    }
  }
  expects(header_seen, "pool::parse_lease_trace: no header line; expected '", lease_trace::header, " ",
          lease_trace::version, "' first");
  expects(t.held().empty(), "pool::parse_lease_trace: the trace ends with ", t.held().size(),
          " bucket(s) held (first: ", t.held().empty() ? 0 : *t.held().begin(), "); expected every lease released");
  t.set_error_prefix("pool::lease_trace: ");
  return t;
}

}  // namespace headroom::pool
