// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "headroom/host.hpp"
#include "headroom/trace.hpp"

using namespace headroom;
namespace tr = headroom::trace;
using host::aligned_resource;
using host::inline_stream;

namespace {
inline_stream const hs{};
void const* at(std::uintptr_t a) { return reinterpret_cast<void const*>(a); }
}  // namespace

TEST_CASE("event_ring keeps the newest events and counts the dropped ones") {
  tr::event_ring ring(3);
  for (std::uint64_t i = 1; i <= 5; ++i) ring.push({.addr = i * 16, .size = i});
  CHECK(ring.size() == 3);
  CHECK(ring.dropped() == 2);
  CHECK(ring[0].size == 3);
  CHECK(ring[1].size == 4);
  CHECK(ring[2].size == 5);
  ring.clear();
  CHECK(ring.size() == 0);
  CHECK(ring.dropped() == 0);
  ring.push({.addr = 16, .size = 9});
  CHECK(ring[0].size == 9);
  CHECK_THROWS_WITH_AS(tr::event_ring(0), doctest::Contains("max_entries is 0"), invalid_argument);
}

TEST_CASE("live_table agrees with std::map under random inserts and erases") {
  std::mt19937_64 rng(std::random_device{}());
  tr::live_table table(512);
  std::map<std::pair<std::uint64_t, bool>, std::uint64_t> oracle;
  for (int i = 0; i < 20000; ++i) {
    // A small address space forces collisions, re-inserts and erases of absent keys.
    std::uint64_t const addr = 16 * (1 + rng() % 700);
    bool const seg = rng() % 4 == 0;
    if (rng() % 2 == 0) {
      bool const fits = oracle.contains({addr, seg}) || oracle.size() < 512;
      CHECK(table.insert({.addr = addr, .size = static_cast<std::uint64_t>(i), .segment = seg}) == fits);
      if (fits) oracle[{addr, seg}] = static_cast<std::uint64_t>(i);
    } else {
      CHECK(table.erase(addr, seg) == (oracle.erase({addr, seg}) == 1));
    }
    REQUIRE(table.size() == oracle.size());
  }
  for (auto const& [key, size] : oracle) {
    auto const* e = table.find(key.first, key.second);
    REQUIRE(e != nullptr);
    CHECK(e->size == size);
  }
  std::size_t seen = 0;
  table.for_each([&](tr::live_entry const& e) {
    ++seen;
    CHECK(oracle.contains({e.addr, e.segment}));
  });
  CHECK(seen == oracle.size());
}

TEST_CASE("a full live_table counts what it could not track") {
  tr::live_table table(2);
  CHECK(table.insert({.addr = 16, .size = 1}));
  CHECK(table.insert({.addr = 32, .size = 1}));
  CHECK_FALSE(table.insert({.addr = 48, .size = 1}));
  CHECK(table.untracked() == 1);
  CHECK(table.insert({.addr = 16, .size = 7}));  // replacing a live key needs no room
  CHECK(table.find(16, false)->size == 7);
}

TEST_CASE("recorder: events only while recording, live blocks always") {
  tr::recorder<> rec({.max_entries = 8});
  rec.alloc(at(0x1000), 64, 0, tr::categories::activation);
  CHECK(rec.events().size() == 0);
  CHECK(rec.live().size() == 1);
  rec.start();
  CHECK(rec.recording());
  rec.free_requested(at(0x1000), 64, 7);
  CHECK(rec.live().find(0x1000, false)->pending_free);
  rec.free_completed(at(0x1000), 64, 7);
  rec.segment_alloc(at(0x2000), 4096, 0, tr::categories::pool);
  rec.free_completed(nullptr, 0, 0);  // freeing null records nothing
  rec.stop();
  rec.alloc(at(0x3000), 32, 0);
  REQUIRE(rec.events().size() == 3);
  CHECK(rec.events()[0].kind == tr::action::free_requested);
  // A free without a category takes the category its block was allocated with.
  CHECK(rec.events()[0].what == tr::categories::activation);
  CHECK(rec.events()[1].kind == tr::action::free_completed);
  CHECK(rec.events()[1].what == tr::categories::activation);
  CHECK(rec.events()[1].stream == 7);
  CHECK(rec.events()[2].kind == tr::action::segment_alloc);
  CHECK(rec.events()[0].time <= rec.events()[2].time);
  CHECK(rec.live().find(0x1000, false) == nullptr);
  CHECK(rec.live().find(0x2000, true) != nullptr);
  CHECK(rec.live().find(0x3000, false) != nullptr);
  CHECK_THROWS_WITH_AS(tr::recorder<>({.max_entries = 0}), doctest::Contains("max_entries is 0"), invalid_argument);
  CHECK_THROWS_WITH_AS(tr::recorder<>({.device = -1}), doctest::Contains("device -1"), invalid_argument);
}

TEST_CASE("recording_resource records blocks with the caller's line, or segments") {
  tr::recorder<> rec;
  rec.start();
  tr::recording_resource blocks(aligned_resource{}, rec, tr::categories::activation);
  static_assert(stream_resource_with<decltype(blocks), inline_stream, host_accessible>);
  int const line = __LINE__ + 1;
  void* p = blocks.allocate(hs, 1000, 64);
  CHECK(reinterpret_cast<std::uintptr_t>(p) % 64 == 0);
  blocks.deallocate(hs, p, 1000, 64);
  auto const events = rec.events();
  REQUIRE(events.size() == 2);
  auto const& a = events[0];
  CHECK(a.kind == tr::action::alloc);
  CHECK(a.addr == reinterpret_cast<std::uintptr_t>(p));
  CHECK(a.size == 1000);
  CHECK(a.stream == 0);
  CHECK(a.line == static_cast<std::uint32_t>(line));
  CHECK(std::string_view(a.filename).ends_with("recorder.cpp"));
  CHECK(rec.events()[1].kind == tr::action::free_completed);

  tr::recording_resource<aligned_resource, tr::recorder<>, tr::segment_events> segments(aligned_resource{}, rec);
  void* s = segments.allocate(hs, 4096);
  segments.deallocate(hs, s, 4096);
  CHECK(rec.events()[2].kind == tr::action::segment_alloc);
  CHECK(rec.events()[3].kind == tr::action::segment_free);
  CHECK(blocks == blocks);
  tr::recorder<> other;
  CHECK_FALSE(blocks == tr::recording_resource(aligned_resource{}, other));
}

TEST_CASE("trace::off holds nothing and forwards every call") {
  tr::recorder<tr::off> rec;
  using off_resource = tr::recording_resource<aligned_resource, tr::recorder<tr::off>>;
  static_assert(sizeof(off_resource) == sizeof(aligned_resource));
  static_assert(stream_resource_with<off_resource, inline_stream, host_accessible>);
  off_resource r(aligned_resource{}, rec, tr::categories::activation);
  void* p = r.allocate(hs, 128);
  CHECK(p != nullptr);
  r.deallocate(hs, p, 128);
  CHECK_FALSE(rec.recording());
  CHECK(rec.dropped() == 0);
}

TEST_CASE("shared policy: threads record concurrently without losing events") {
  constexpr int threads = 4, per_thread = 2000;
  tr::recorder<tr::shared> rec({.max_entries = 2 * threads * per_thread});
  rec.start();
  tr::recording_resource r(aligned_resource{}, rec, tr::categories::activation);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&] {
      for (int i = 0; i < per_thread; ++i) {
        void* p = r.allocate(hs, 64);
        r.deallocate(hs, p, 64);
      }
    });
  }
  for (auto& t : pool) t.join();
  auto const events = rec.events();  // per-thread buffers, merged in time order
  CHECK(events.size() == 2u * threads * per_thread);
  CHECK(rec.dropped() == 0);
  CHECK(rec.live().size() == 0);
  CHECK(std::ranges::is_sorted(events, {}, &tr::event::time));
  // Per address, events alternate alloc / free.
  std::map<std::uint64_t, bool> live;
  for (auto const& e : events) {
    bool const is_alloc = e.kind == tr::action::alloc;
    CHECK(live[e.addr] != is_alloc);
    live[e.addr] = is_alloc;
  }
}

TEST_CASE("shared policy: a thread's full buffer cuts the merged trace to the window every thread covers") {
  tr::recorder<tr::shared> rec({.max_entries = 8});
  rec.start();
  std::thread busy([&] {
    for (int i = 0; i < 20; ++i) rec.alloc(at(0x10000 + 16 * static_cast<std::uintptr_t>(i)), 16, 0);
  });
  busy.join();
  rec.alloc(at(0x1000), 64, 0);  // this thread: one event, after all of the other's
  auto const h = rec.history();
  REQUIRE(h.events.size() == 8);  // the newest 8 of 21
  CHECK(h.dropped == 13);
  CHECK(h.events.back().addr == 0x1000);
  CHECK(h.events.front().addr == 0x10000 + 16 * 13);
}

TEST_CASE("frees carry the frame and category of their block's allocation; deferred frees are flagged") {
  tr::recorder<> rec;
  rec.start();
  auto const where = tr::frame::current();
  rec.alloc(at(0x1000), 64, 0, tr::categories::activation, where);
  rec.alloc(at(0x2000), 64, 0, tr::categories::communication, where);
  rec.free_completed(at(0x1000), 64, 0);
  rec.free_requested(at(0x2000), 64, 0);
  rec.free_completed(at(0x2000), 64, 0);
  auto const events = rec.events();
  REQUIRE(events.size() == 5);
  for (std::size_t i = 2; i < 5; ++i) {
    CHECK(events[i].line == where.line);
    CHECK(std::string_view(events[i].function) == where.function);
  }
  CHECK(events[2].what == tr::categories::activation);
  CHECK(events[2].flags == 0);
  CHECK(events[4].what == tr::categories::communication);
  CHECK(events[4].flags == tr::event::deferred);
}

TEST_CASE("a full live table flags the allocations it leaves out") {
  tr::recorder<> rec({.max_live = 1});
  rec.start();
  rec.alloc(at(0x1000), 64, 0);
  rec.alloc(at(0x2000), 64, 0);
  auto const events = rec.events();
  CHECK(events[0].flags == 0);
  CHECK(events[1].flags == tr::event::untracked);
  CHECK(rec.live().untracked() == 1);
}

TEST_CASE("a live table or ring past 2^32 entries is a capacity_error, not an overflowed size") {
  // bit_ceil(max_live * 2) overflowed past 2^63: a one-slot table whose second insert never ended.
  for (std::size_t n : {std::size_t{1} << 62 | 1, std::size_t{1} << 33, std::numeric_limits<std::size_t>::max()}) {
    CHECK_THROWS_AS(tr::recorder<>{{.max_live = n}}, capacity_error);
    CHECK_THROWS_AS(tr::live_table{n}, capacity_error);
    CHECK_THROWS_AS(tr::recorder<>{{.max_entries = n}}, capacity_error);
  }
}

TEST_CASE("ticks are monotonic and convert to Unix-epoch time") {
  auto const before = std::chrono::system_clock::now();
  auto const t0 = tr::ticks();
  auto const t1 = tr::ticks();
  CHECK(t1 >= t0);
  auto const base = tr::time_base::now();
  auto const epoch = std::chrono::system_clock::time_point(std::chrono::nanoseconds(base.epoch_ns(t1)));
  // The conversion's error is the rate's over the time since the origin: far below a second.
  CHECK(epoch > before - std::chrono::seconds(1));
  CHECK(epoch < std::chrono::system_clock::now() + std::chrono::seconds(1));
  MESSAGE("tick source: " << std::string(tr::tick_source()) << ", " << base.ns_per_tick() << " ns per tick");
}

TEST_CASE("hooks: a scoped workspace and a deferred release") {
  tr::recorder<> rec;
  rec.start();
  std::vector<std::byte> buffer(256);
  {
    tr::scoped_block ws(rec, std::span(buffer), 3, tr::categories::cp_logits);
    CHECK(rec.live().find(reinterpret_cast<std::uintptr_t>(buffer.data()), false) != nullptr);
  }
  tr::free_requested(rec, std::span(buffer), 3);
  REQUIRE(rec.events().size() == 3);
  CHECK(rec.events()[0].kind == tr::action::alloc);
  CHECK(rec.events()[0].what == tr::categories::cp_logits);
  CHECK(rec.events()[1].kind == tr::action::free_completed);
  CHECK(rec.events()[2].kind == tr::action::free_requested);
}
