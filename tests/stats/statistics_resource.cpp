// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <cstdint>
#include <cstddef>
#include <climits>
#include <cstring>
#include <new>
#include <thread>
#include <vector>

#include "headroom/host/aligned_resource.hpp"
#include "headroom/host/thread_group.hpp"
#include "headroom/stats/reducer.hpp"
#include "headroom/stats/statistics_resource.hpp"
#include "headroom/stats/workspace.hpp"

namespace hs = headroom::stats;
using headroom::host::aligned_resource;
using headroom::host::inline_stream;
using stat_resource = hs::statistics_resource<aligned_resource>;

static_assert(headroom::stream_resource_with<stat_resource, inline_stream, headroom::host_accessible>);
static_assert(!headroom::has_property<stat_resource, headroom::device_accessible>);

namespace stats_test {
// Fails every allocation above a limit, as an exhausted device would.
struct limited_resource {
  std::size_t limit = 1024;
  void* allocate(inline_stream const& s, std::size_t bytes, std::size_t alignment) {
    headroom::expects<headroom::capacity_error>(bytes <= limit, "limited_resource: ", bytes, " bytes > limit ", limit);
    return aligned_resource{}.allocate(s, bytes, alignment);
  }
  void deallocate(inline_stream const& s, void* p, std::size_t bytes, std::size_t alignment) noexcept {
    aligned_resource{}.deallocate(s, p, bytes, alignment);
  }
  friend bool operator==(limited_resource const&, limited_resource const&) = default;
};
static_assert(headroom::stream_resource<hs::statistics_resource<limited_resource>, inline_stream>);
}  // namespace stats_test
using stats_test::limited_resource;

TEST_CASE("statistics_resource counts bytes and allocations under torch's key names") {
  stat_resource mr;
  inline_stream s;
  void* a = mr.allocate(s, 1000, 256);
  void* b = mr.allocate(s, 24, 64);
  std::memset(a, 1, 1000);  // the memory is real
  CHECK(reinterpret_cast<std::uintptr_t>(a) % 256 == 0);
  mr.deallocate(s, a, 1000, 256);
  void* c = mr.allocate(s, 500, 256);
  auto const r = mr.report();
  CHECK(r.get<"allocated_bytes.all.current">() == 524);
  CHECK(r.get<"allocated_bytes.all.peak">() == 1024);
  CHECK(r.get<"allocated_bytes.all.allocated">() == 1524);
  CHECK(r.get<"allocated_bytes.all.freed">() == 1000);
  CHECK(r.get<"allocation.all.current">() == 2);
  CHECK(r.get<"allocation.all.peak">() == 2);
  CHECK(r.get<"allocation.all.allocated">() == 3);
  CHECK(r.get<"allocation.all.freed">() == 1);
  CHECK(r.get<"num_ooms">() == 0);
  mr.deallocate(s, b, 24, 64);
  mr.deallocate(s, c, 500, 256);
  CHECK(mr.bytes() == hs::counter{0, 1024, 1524});
}

TEST_CASE("copies share counters and compare equal; separate adaptors do not") {
  stat_resource a;
  stat_resource copy = a;
  stat_resource other;
  CHECK(a == copy);
  CHECK_FALSE(a == other);
  inline_stream s;
  void* p = copy.allocate(s, 64, 64);
  CHECK(a.bytes().value == 64);
  a.deallocate(s, p, 64, 64);
  CHECK(copy.bytes().value == 0);
}

TEST_CASE("scopes measure one phase; take_window resets the peak for the next logging window") {
  stat_resource mr;
  inline_stream s;
  void* weights = mr.allocate(s, 4096, 256);
  {
    auto scope = mr.scope();
    void* act = mr.allocate(s, 1000, 256);
    mr.deallocate(s, act, 1000, 256);
    CHECK(mr.scope_depth() == 2);
    CHECK(mr.bytes() == hs::counter{0, 1000, 1000});  // only the phase
  }
  CHECK(mr.scope_depth() == 1);
  CHECK(mr.bytes() == hs::counter{4096, 5096, 5096});
  auto const w = mr.take_window();
  CHECK(w.get<"allocated_bytes.all.peak">() == 5096);
  CHECK(mr.report().get<"allocated_bytes.all.peak">() == 4096);
  mr.push_scope();
  void* x = mr.allocate(s, 8, 8);
  auto const popped = mr.pop_scope();
  CHECK(popped[stat_resource::bytes_counter] == hs::counter{8, 8, 8});
  CHECK_THROWS_AS(static_cast<void>(mr.pop_scope()), headroom::logic_error);
  mr.deallocate(s, x, 8, 8);
  mr.reset_peaks();
  mr.deallocate(s, weights, 4096, 256);
  CHECK(mr.bytes() == hs::counter{0, 4096, 5104});
}

TEST_CASE("an upstream failure is counted in num_ooms and rethrown unchanged; nothing else is counted") {
  hs::statistics_resource<limited_resource> mr(limited_resource{100});
  inline_stream s;
  CHECK_THROWS_WITH_AS(static_cast<void>(mr.allocate(s, 101, 8)), doctest::Contains("101 bytes > limit 100"),
                       headroom::capacity_error);
  CHECK_THROWS_AS(static_cast<void>(mr.allocate(s, 1000, 8)), headroom::capacity_error);
  CHECK(mr.failed_allocations() == 2);
  CHECK(mr.report().get<"num_ooms">() == 2);
  CHECK(mr.bytes() == hs::counter{});
  void* p = mr.allocate(s, 100, 8);
  mr.deallocate(s, p, 100, 8);
  CHECK(mr.allocations().total == 1);
  CHECK_THROWS_WITH_AS(static_cast<void>(mr.allocate(s, SIZE_MAX, 8)), doctest::Contains("exceed what an int64 counter holds"),
                       headroom::invalid_argument);
  CHECK(mr.failed_allocations() == 2);  // rejected before upstream was asked
}

TEST_CASE("8 threads allocating through one adaptor: counts stay exact") {
  stat_resource mr;
  {
    std::vector<std::jthread> threads;
    for (int t = 0; t < 8; ++t)
      threads.emplace_back([mr, t]() mutable {
        inline_stream s;
        std::vector<std::pair<void*, std::size_t>> live;
        for (int i = 0; i < 2000; ++i) {
          std::size_t const n = 16 + static_cast<std::size_t>((i * 31 + t) % 512);
          live.emplace_back(mr.allocate(s, n, 16), n);
          if (i % 3 == 2)
            for (auto [p, k] : live) mr.deallocate(s, p, k, 16);
          if (i % 3 == 2) live.clear();
        }
        for (auto [p, k] : live) mr.deallocate(s, p, k, 16);
      });
  }
  CHECK(mr.bytes().value == 0);
  CHECK(mr.allocations().value == 0);
  CHECK(mr.allocations().total == 16000);
  CHECK(mr.allocations().peak <= 24);
}

TEST_CASE("workspace takes its bytes from any resource and gives them back in stream order") {
  stat_resource mr;
  {
    hs::workspace<stat_resource, inline_stream> ws(mr, inline_stream{}, 4096);
    CHECK(ws.size() == 4096);
    CHECK(ws.bytes().size() == 4096);
    CHECK(mr.bytes().value == 4096);
  }
  CHECK(mr.bytes().value == 0);
  hs::workspace<stat_resource, inline_stream> const empty(mr, inline_stream{}, 0);
  CHECK(empty.data() == nullptr);
  CHECK(mr.allocations().total == 1);
}

TEST_CASE("the adaptor's report reduces across 4 pipeline stages: stage 0 holds the peak") {
  headroom::host::launch(4, [](headroom::host::thread_communicator& c) {
    stat_resource mr;
    inline_stream s;
    // 1F1B: stage k keeps (4 - k) micro-batches of activations in flight.
    std::vector<void*> in_flight;
    for (int mb = 0; mb < 4 - c.rank(); ++mb) in_flight.push_back(mr.allocate(s, 1 << 20, 256));
    for (void* p : in_flight) mr.deallocate(s, p, 1 << 20, 256);
    auto const t = hs::gather(mr.report(), c);
    CHECK(t.at("allocated_bytes.all.peak").max == hs::value(std::int64_t{4} << 20));
    CHECK(t.at("allocated_bytes.all.peak").argmax == 0);
    CHECK(t.at("allocated_bytes.all.peak").argmin == 3);
    CHECK(hs::max(mr.report(), c).get<"allocation.all.peak">() == 4);
  });
}
