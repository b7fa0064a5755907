// SPDX-License-Identifier: Apache-2.0
#pragma once
// Test substrate of the pool tests: named streams, events that log record / wait, an upstream
// that counts and checks its allocations, and small workloads. Include after doctest.
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "headroom/pool.hpp"

namespace pool_test {

using namespace headroom;
using namespace headroom::pool;

inline bucket bf16(std::uint64_t n) { return elements_of(dtype::bf16, n); }

inline workload uniform(std::size_t n, std::uint64_t elements = 8) {
  workload w{"uniform", {}, {}};
  for (std::size_t i = 0; i < n; ++i) w.units.push_back({"u" + std::to_string(i), {bf16(elements)}});
  return w;
}

inline plan_options buffers(std::size_t n) {
  plan_options o;
  o.buffers = n;
  return o;
}

template <class E, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (E const& e) {
    return e.what();
  }
  return "<no exception>";
}

inline bool contains(std::string const& s, std::string const& part) { return s.find(part) != std::string::npos; }

// ---- a recording substrate: named streams, events that log record / wait, counting upstream ----

struct log_t {
  std::vector<std::string> lines;
};

struct named_stream {
  int id = 0;
  void synchronize() const noexcept {}
  friend bool operator==(named_stream, named_stream) noexcept = default;
};
static_assert(headroom::stream<named_stream>);

struct recording_event {
  static inline log_t* log = nullptr;  // test-local sink, set by each test
  static inline bool fail_waits = false;  // wait_on throws cuda_error, as a failed cudaStreamWaitEvent
  int serial = next();
  int recorded_on = -1;
  void record(named_stream const& s) {
    recorded_on = s.id;
    if (log) log->lines.push_back("record e" + std::to_string(serial) + " on s" + std::to_string(s.id));
  }
  [[nodiscard]] bool ready() const noexcept { return true; }
  void wait_on(named_stream const& s) const {
    if (fail_waits) throw cuda_error("cudaStreamWaitEvent: failed (test)");
    if (log)
      log->lines.push_back("s" + std::to_string(s.id) + " waits e" + std::to_string(serial) + " (recorded on s" +
                           std::to_string(recorded_on) + ")");
  }
  void synchronize() const noexcept {}
  static int next() {
    static int n = 0;
    return n++;
  }
};
static_assert(headroom::event<recording_event, named_stream>);

struct counting_resource {
  struct counters {
    std::map<void*, std::size_t> live;
    std::size_t allocations = 0;
    std::size_t deallocations = 0;
    std::vector<int> free_streams;
    std::size_t fail_after = SIZE_MAX;  // allocations allowed before throwing
  };
  std::shared_ptr<counters> c = std::make_shared<counters>();

  void* allocate(named_stream const&, std::size_t n, std::size_t a) {
    if (c->allocations >= c->fail_after) throw capacity_error("counting_resource: out of memory (test)");
    ++c->allocations;
    void* p = ::operator new(n == 0 ? 1 : n, std::align_val_t{a});
    c->live[p] = n;
    return p;
  }
  void deallocate(named_stream const& s, void* p, std::size_t n, std::size_t a) noexcept {
    ++c->deallocations;
    c->free_streams.push_back(s.id);
    CHECK(c->live.count(p) == 1);
    CHECK(c->live[p] == n);
    c->live.erase(p);
    ::operator delete(p, std::align_val_t{a});
  }
  friend bool operator==(counting_resource const& a, counting_resource const& b) noexcept { return a.c == b.c; }
};
static_assert(stream_resource<counting_resource, named_stream>);

template <class Assignment = strict, class NonUnit = dynamic, class ReleaseOrder = record_if_cross_stream,
          class OffTrace = reject_off_trace>
using test_pool = unit_pool<named_stream, recording_event, counting_resource, Assignment, NonUnit, ReleaseOrder, OffTrace>;

inline std::size_t count_lines(log_t const& log, std::string const& part) {
  return static_cast<std::size_t>(
      std::count_if(log.lines.begin(), log.lines.end(), [&](auto const& l) { return l.find(part) != std::string::npos; }));
}

}  // namespace pool_test
