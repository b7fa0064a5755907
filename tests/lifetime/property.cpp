// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

// Random schedules on the manual substrate. Guards are allocated on an owner stream and filled
// there with a fresh tag; readers on random comm streams check the tag when they finally run;
// guards are released at random moments and streams advance at random. Whatever the schedule,
// no reader may see another guard's tag. A policy that frees without waiting must be caught.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <random>
#include <string_view>
#include <vector>

#include "headroom/lifetime/deferred_reclaimer.hpp"
#include "headroom/lifetime/guard.hpp"
#include "headroom/lifetime/manual.hpp"
#include "unordered.hpp"

using namespace headroom;
using namespace headroom::lifetime;

namespace property {

using mstream = manual::stream;
using mevent = manual::event;
using reclaimer = deferred_reclaimer<manual::resource, mstream, mevent>;

using lifetime_test::unordered;

// The guard type of each policy: deferred releases into a quarantine, the others into the pool.
template <class Policy>
struct guard_for {
  using type = guard<manual::resource, mstream, mevent, Policy>;
};
template <>
struct guard_for<deferred> {
  using type = guard<reclaimer, mstream, mevent, deferred>;
};

struct report {
  std::size_t readers = 0, readers_wrong = 0, host_waits = 0, releases = 0;
  std::size_t peak_reserved = 0, peak_live_bytes = 0;
};

template <class Policy>
report run(std::uint32_t seed, int steps) {
  constexpr int comm_streams = 3;
  std::mt19937 rng(seed);
  auto pick = [&](int n) { return std::uniform_int_distribution<int>(0, n - 1)(rng); };

  manual::timeline t;
  mstream owner = t.make_stream("owner");
  std::vector<mstream> comms;
  for (int i = 0; i < comm_streams; ++i) comms.push_back(t.make_stream("comm"));
  manual::resource pool(t);
  reclaimer quarantine(pool);
  constexpr bool is_deferred = std::is_same_v<Policy, deferred>;
  using G = typename guard_for<Policy>::type;
  auto& res = [&]() -> auto& {
    if constexpr (is_deferred)
      return quarantine;
    else
      return pool;
  }();

  report rep;
  struct live_guard {
    G g;
    std::uint32_t tag;
  };
  std::vector<live_guard> live;
  std::uint32_t next_tag = 1;
  std::size_t live_bytes = 0;
  for (int step = 0; step < steps; ++step) {
    switch (pick(4)) {
      case 0: {  // allocate on the owner stream and fill it there
        std::size_t const words = std::size_t{256} << pick(3);
        G g(res, owner, words * sizeof(std::uint32_t), alignof(std::uint32_t));
        auto* p = static_cast<std::uint32_t*>(g.data());
        std::uint32_t const tag = next_tag++;
        t.submit(owner, [p, words, tag] { std::fill(p, p + words, tag); });
        live_bytes += g.size();
        rep.peak_live_bytes = std::max(rep.peak_live_bytes, live_bytes);
        live.push_back({std::move(g), tag});
        break;
      }
      case 1: {  // a reader on a comm stream, after the fill
        if (live.empty()) break;
        auto& lg = live[static_cast<std::size_t>(pick(static_cast<int>(live.size())))];
        mstream comm = comms[static_cast<std::size_t>(pick(comm_streams))];
        mevent filled;
        filled.record(owner);
        filled.wait_on(comm);
        auto const* p = static_cast<std::uint32_t const*>(lg.g.data());
        std::size_t const words = lg.g.size() / sizeof(std::uint32_t);
        std::uint32_t const tag = lg.tag;
        t.submit(comm, [p, words, tag, &rep] {
          ++rep.readers;
          rep.readers_wrong += !std::all_of(p, p + words, [tag](std::uint32_t v) { return v == tag; });
        });
        lg.g.use_on(comm);
        break;
      }
      case 2: {  // release one
        if (live.empty()) break;
        auto const i = static_cast<std::size_t>(pick(static_cast<int>(live.size())));
        live_bytes -= live[i].g.size();
        live[i].g.release();
        live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
        ++rep.releases;
        break;
      }
      default: {  // the device makes some progress on one stream
        mstream s = pick(comm_streams + 1) == 0 ? owner : comms[static_cast<std::size_t>(pick(comm_streams))];
        for (int k = pick(4); k > 0 && t.step(s); --k) {
        }
        break;
      }
    }
  }
  live.clear();  // destructors release the rest
  t.run_all();
  rep.host_waits = t.host_waits();
  rep.peak_reserved = pool.usage().reserved_high;
  return rep;
}

}  // namespace property

TEST_CASE_TEMPLATE("random schedules: no reader ever sees a reused block", P, stream_ordered, deferred, blocking) {
  for (std::uint32_t seed = 1; seed <= 40; ++seed) {
    CAPTURE(seed);
    auto r = property::run<P>(seed, 400);
    CHECK(r.readers > 0);
    CHECK(r.readers_wrong == 0);
    if constexpr (!std::is_same_v<P, blocking>) CHECK(r.host_waits == 0);
  }
}

TEST_CASE("random schedules: a free without the wait is caught") {
  std::size_t wrong = 0, readers = 0;
  for (std::uint32_t seed = 1; seed <= 40; ++seed) {
    auto r = property::run<property::unordered>(seed, 400);
    wrong += r.readers_wrong;
    readers += r.readers;
  }
  CHECK(readers > 0);
  CHECK(wrong > 0);
}

TEST_CASE("random schedules: stream_ordered never reserves more than deferred") {
  for (std::uint32_t seed = 1; seed <= 20; ++seed) {
    CAPTURE(seed);
    auto so = property::run<stream_ordered>(seed, 400);
    auto de = property::run<deferred>(seed, 400);
    CHECK(so.peak_reserved <= de.peak_reserved);
  }
}
