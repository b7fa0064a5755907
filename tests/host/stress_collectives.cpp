// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

// Concurrency stress of the thread_group (8 and 16 ranks), meant for ThreadSanitizer as much
// as for the plain build: random mixed collectives, some of them deliberately wrong on one
// rank (size, element type, root, op, kind), ranks that throw midway or return early, and
// split groups. The properties, from host/thread_group.hpp's contract:
//   - agreeing calls give every rank the reference result;
//   - a disagreement throws collective_mismatch on EVERY rank, and the group stays usable;
//   - a rank that throws aborts the group: the others get group_aborted, launch rethrows the
//     first rank's own error; an aborted group refuses every later call;
//   - a rank that returns early makes its peers' next collective or recv fail, not hang.
// Every run sits under a watchdog: a hang fails the test within seconds instead of at the
// ctest timeout.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <typeinfo>
#include <vector>

#include "common/error_of.hpp"
#include "headroom/host/thread_group.hpp"

using namespace headroom;
using headroom::host::thread_communicator;
using headroom_test::contains;

namespace {

constexpr auto watchdog = std::chrono::seconds(60);  // generous: TSan on 2 shared cores

/// Runs `body` on its own thread; a run that outlives the watchdog is a hang: report and exit
/// (the stuck threads cannot be joined, so failing fast is all a test can do).
template <class F>
void within_watchdog(char const* what, F&& body) {
  std::packaged_task<void()> task(std::forward<F>(body));
  auto done = task.get_future();
  std::thread t(std::move(task));
  if (done.wait_for(watchdog) != std::future_status::ready) {
    std::fprintf(stderr, "HANG: '%s' did not finish within %lld s\n", what, static_cast<long long>(watchdog.count()));
    std::fflush(stderr);
    std::_Exit(3);
  }
  t.join();
  done.get();  // rethrows what the body threw
}

enum class kind { all_reduce, all_gather, reduce_scatter, broadcast, barrier, sendrecv };
constexpr int kinds = 6;

enum class fault { none, size, type, root, op, other_kind };
constexpr int faults = 6;

struct step {
  kind k;
  std::size_t n;        // elements per rank
  int root;
  reduce_op op;
  fault f = fault::none;
  int culprit = -1;     // the rank that deviates
};

// The same schedule on every rank: drawn from a shared seed.
std::vector<step> schedule(std::uint64_t seed, int ranks, int steps, bool with_faults) {
  std::mt19937_64 gen(seed);
  std::vector<step> out;
  for (int i = 0; i < steps; ++i) {
    step s{static_cast<kind>(gen() % kinds), 1 + gen() % 9, static_cast<int>(gen() % static_cast<unsigned>(ranks)),
           static_cast<reduce_op>(gen() % 3)};
    if (with_faults && gen() % 3 == 0 && s.k != kind::sendrecv) {
      s.f = static_cast<fault>(1 + gen() % (faults - 1));
      s.culprit = static_cast<int>(gen() % static_cast<unsigned>(ranks));
      // Only fields the call has can disagree: a root only for broadcast, an op only for reductions.
      bool const reduces = s.k == kind::all_reduce || s.k == kind::reduce_scatter;
      if ((s.f == fault::root && s.k != kind::broadcast) || (s.f == fault::op && !reduces)) s.f = fault::size;
      if (s.k == kind::barrier) s.f = fault::other_kind;  // a barrier has nothing else to get wrong
    }
    out.push_back(s);
  }
  return out;
}

std::int64_t value_of(int rank, std::size_t i, int step) { return (rank + 1) * 1000 + static_cast<std::int64_t>(i) * 7 + step; }

std::int64_t reduce_ref(reduce_op op, int ranks, std::size_t i, int step) {
  std::int64_t acc = value_of(0, i, step);
  for (int r = 1; r < ranks; ++r) {
    std::int64_t const v = value_of(r, i, step);
    acc = op == reduce_op::sum ? acc + v : op == reduce_op::max ? std::max(acc, v) : std::min(acc, v);
  }
  return acc;
}

// Issues step `s` (number `idx`) on `comm`, deviating if this rank is the culprit; checks the
// result when the call succeeds.
void issue(thread_communicator& comm, step const& s, int idx) {
  int const r = comm.rank();
  int const n = comm.size();
  bool const me = s.culprit == r;
  std::size_t const count = me && s.f == fault::size ? s.n + 1 : s.n;
  reduce_op const op = me && s.f == fault::op ? static_cast<reduce_op>((static_cast<int>(s.op) + 1) % 3) : s.op;
  kind const k = me && s.f == fault::other_kind ? (s.k == kind::barrier ? kind::all_reduce : kind::barrier) : s.k;
  std::vector<std::int64_t> in(count * static_cast<std::size_t>(n));
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = value_of(r, i, idx);
  switch (k) {
    case kind::all_reduce: {
      if (me && s.f == fault::type) {
        std::vector<double> din(count, 1.0), dout(count);
        comm.all_reduce(std::span<double const>(din), std::span<double>(dout), op);
        FAIL("a mistyped all_reduce returned");
      }
      std::vector<std::int64_t> out(count);
      comm.all_reduce(std::span<std::int64_t const>(in.data(), count), std::span<std::int64_t>(out), op);
      for (std::size_t i = 0; i < count; ++i) REQUIRE(out[i] == reduce_ref(op, n, i, idx));
      break;
    }
    case kind::all_gather: {
      if (me && s.f == fault::type) {
        std::vector<float> fin(count), fout(count * static_cast<std::size_t>(n));
        comm.all_gather(std::span<float const>(fin), std::span<float>(fout));
        FAIL("a mistyped all_gather returned");
      }
      std::vector<std::int64_t> out(count * static_cast<std::size_t>(n));
      comm.all_gather(std::span<std::int64_t const>(in.data(), count), std::span<std::int64_t>(out));
      for (int q = 0; q < n; ++q)
        for (std::size_t i = 0; i < count; ++i) REQUIRE(out[static_cast<std::size_t>(q) * count + i] == value_of(q, i, idx));
      break;
    }
    case kind::reduce_scatter: {
      if (me && s.f == fault::type) {
        std::vector<int> iin(count * static_cast<std::size_t>(n)), iout(count);
        comm.reduce_scatter(std::span<int const>(iin), std::span<int>(iout), op);
        FAIL("a mistyped reduce_scatter returned");
      }
      std::vector<std::int64_t> out(count);
      comm.reduce_scatter(std::span<std::int64_t const>(in), std::span<std::int64_t>(out), op);
      for (std::size_t i = 0; i < count; ++i)
        REQUIRE(out[i] == reduce_ref(op, n, static_cast<std::size_t>(r) * count + i, idx));
      break;
    }
    case kind::broadcast: {
      int const root = me && s.f == fault::root ? (s.root + 1) % n : s.root;
      if (me && s.f == fault::type) {
        std::vector<char> c(count);
        comm.broadcast(std::span<char>(c), root);
        FAIL("a mistyped broadcast returned");
      }
      std::vector<std::int64_t> buf(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(count));
      comm.broadcast(std::span<std::int64_t>(buf), root);
      for (std::size_t i = 0; i < count; ++i) REQUIRE(buf[i] == value_of(root, i, idx));
      break;
    }
    case kind::barrier: comm.barrier(); break;
    case kind::sendrecv: {  // a ring: send to the right, receive from the left
      std::vector<std::int64_t> got(s.n);
      comm.send(std::span<std::int64_t const>(in.data(), s.n), (r + 1) % n);
      comm.recv(std::span<std::int64_t>(got), (r + n - 1) % n);
      for (std::size_t i = 0; i < s.n; ++i) REQUIRE(got[i] == value_of((r + n - 1) % n, i, idx));
      break;
    }
  }
}

bool is_fault(step const& s) { return s.f != fault::none; }

void random_collectives(int ranks, std::uint64_t seed, int steps, bool with_faults) {
  auto const plan = schedule(seed, ranks, steps, with_faults);
  std::vector<int> mismatches(static_cast<std::size_t>(ranks), 0);
  host::launch(ranks, [&](thread_communicator& comm) {
    for (int i = 0; i < static_cast<int>(plan.size()); ++i) {
      auto const& s = plan[static_cast<std::size_t>(i)];
      if (!is_fault(s)) {
        issue(comm, s, i);
        continue;
      }
      auto const msg = headroom_test::error_of<collective_mismatch>([&] { issue(comm, s, i); });
      REQUIRE_MESSAGE(msg != "<no exception>", "step ", i, ": a deviating call returned on rank ", comm.rank());
      ++mismatches[static_cast<std::size_t>(comm.rank())];
    }
    comm.barrier();  // still usable after every refused call
  });
  int const expected = static_cast<int>(std::count_if(plan.begin(), plan.end(), is_fault));
  for (int m : mismatches) CHECK(m == expected);
}

}  // namespace

TEST_CASE("8 and 16 ranks: agreeing random collectives give every rank the reference result") {
  for (int ranks : {8, 16}) {
    CAPTURE(ranks);
    within_watchdog("agreeing collectives", [&] { random_collectives(ranks, 0x5eed0000u + static_cast<unsigned>(ranks), 60, false); });
  }
}

TEST_CASE("8 and 16 ranks: a deviating rank (size, type, root, op, kind) fails the call on every rank") {
  for (int ranks : {8, 16})
    for (std::uint64_t seed = 1; seed <= 3; ++seed) {
      CAPTURE(ranks);
      CAPTURE(seed);
      within_watchdog("mismatched collectives", [&] { random_collectives(ranks, seed * 7919, 40, true); });
    }
}

TEST_CASE("a mismatch names every rank's call") {
  within_watchdog("mismatch message", [] {
    std::vector<std::string> msgs(8);
    host::launch(8, [&](thread_communicator& comm) {
      std::vector<float> in(comm.rank() == 5 ? 3 : 2, 1.f), out(in.size());
      msgs[static_cast<std::size_t>(comm.rank())] = headroom_test::error_of<collective_mismatch>(
          [&] { comm.all_reduce(std::span<float const>(in), std::span<float>(out), reduce_op::sum); });
    });
    for (auto const& m : msgs) {
      CHECK(contains(m, "[rank 5] all_reduce"));
      CHECK(contains(m, "in=3"));
      CHECK(m == msgs[0]);  // the same verdict, word for word, on every rank
    }
  });
}

TEST_CASE("8 and 16 ranks: a rank that throws midway aborts the group, nobody hangs") {
  for (int ranks : {8, 16})
    for (int at : {0, 3, 11}) {
      CAPTURE(ranks);
      CAPTURE(at);
      within_watchdog("throw midway", [&] {
        int const culprit = (at * 5 + 1) % ranks;
        auto const plan = schedule(0xab0 + static_cast<unsigned>(at), ranks, 16, false);
        std::vector<std::string> seen(static_cast<std::size_t>(ranks));
        auto const msg = headroom_test::error_of<std::runtime_error>([&] {
          host::launch(ranks, [&](thread_communicator& comm) {
            try {
              for (int i = 0; i < static_cast<int>(plan.size()); ++i) {
                if (comm.rank() == culprit && i == at) throw std::runtime_error("rank failed on purpose");
                issue(comm, plan[static_cast<std::size_t>(i)], i);
              }
            } catch (group_aborted const& e) {
              seen[static_cast<std::size_t>(comm.rank())] = "aborted";
              throw;
            }
            seen[static_cast<std::size_t>(comm.rank())] = "finished";
          });
        });
        CHECK(msg == "rank failed on purpose");  // launch rethrows the culprit's own error
        int aborted = 0;
        for (int r = 0; r < ranks; ++r)
          if (r != culprit) aborted += seen[static_cast<std::size_t>(r)] == "aborted";
        CHECK(aborted >= 1);  // somebody was waiting on the culprit, and got out
      });
    }
}

TEST_CASE("a rank that returns early: peers' next collective and recv fail instead of hanging") {
  for (int ranks : {8, 16}) {
    CAPTURE(ranks);
    within_watchdog("return early", [&] {
      std::vector<std::string> collective_msgs(static_cast<std::size_t>(ranks)), recv_msgs(static_cast<std::size_t>(ranks));
      host::launch(ranks, [&](thread_communicator& comm) {
        comm.barrier();
        if (comm.rank() == ranks - 1) return;  // leaves: launch declares it departed
        auto const r = static_cast<std::size_t>(comm.rank());
        collective_msgs[r] = headroom_test::error_of<collective_mismatch>([&] { comm.barrier(); });
        // Again, and with data: a call must never complete without the departed rank (counting
        // a stale arrival would read its freed buffers), however many ranks retry.
        for (int retry = 0; retry < 3; ++retry) {
          std::vector<int> in(2, comm.rank()), out(2);
          REQUIRE(headroom_test::throws<collective_mismatch>([&] { comm.barrier(); }));
          REQUIRE(headroom_test::throws<collective_mismatch>(
              [&] { comm.all_reduce(std::span<int const>(in), std::span<int>(out), reduce_op::sum); }));
        }
        std::vector<int> got(1);
        recv_msgs[r] = headroom_test::error_of<collective_mismatch>(
            [&] { comm.recv(std::span<int>(got), ranks - 1); });
      });
      for (int r = 0; r + 1 < ranks; ++r) {
        CHECK(contains(collective_msgs[static_cast<std::size_t>(r)], "left the group"));
        CHECK(contains(recv_msgs[static_cast<std::size_t>(r)], "returned without sending"));
      }
    });
  }
}

TEST_CASE("an aborted group refuses every later call with group_aborted") {
  within_watchdog("aborted group", [] {
    host::thread_group group(8);
    group.abort("stop");
    for (int r = 0; r < 8; ++r) {
      auto comm = group.communicator(r);
      std::vector<int> v(1);
      CHECK(contains(headroom_test::error_of<group_aborted>([&] { comm.barrier(); }), "stop"));
      CHECK(headroom_test::throws<group_aborted>([&] { comm.send(std::span<int const>(v), (r + 1) % 8); }));
      CHECK(headroom_test::throws<group_aborted>([&] { comm.recv(std::span<int>(v), (r + 1) % 8); }));
    }
  });
}

TEST_CASE("16 ranks split into 4 groups: mismatches stay local, an abort reaches the children") {
  within_watchdog("split groups", [] {
    std::atomic<int> child_mismatches{0}, child_aborts{0};
    auto const msg = headroom_test::error_of<std::runtime_error>([&] {
      host::launch(16, [&](thread_communicator& comm) {
        auto child = comm.split(comm.rank() % 4, comm.rank());
        CHECK(child.size() == 4);
        // A mismatch inside child 1 only: the other children go on.
        std::vector<int> in(child.rank() == 2 && comm.rank() % 4 == 1 ? 2 : 1, 1), out(in.size());
        try {
          child.all_reduce(std::span<int const>(in), std::span<int>(out), reduce_op::sum);
          CHECK(out[0] == 4);
        } catch (collective_mismatch const&) {
          ++child_mismatches;
        }
        comm.barrier();
        // Rank 3 of the parent fails; children blocked in a collective are released.
        if (comm.rank() == 3) throw std::runtime_error("parent rank 3 failed");
        try {
          child.barrier();
          child.barrier();
        } catch (group_aborted const&) {
          ++child_aborts;
          throw;
        }
      });
    });
    CHECK(msg == "parent rank 3 failed");
    CHECK(child_mismatches == 4);  // the four members of child 1, and nobody else
    CHECK(child_aborts >= 1);      // child 3's members waited on parent rank 3
  });
}

TEST_CASE("bad ranks and peers are invalid_argument, before any rendezvous") {
  host::thread_group group(8);
  CHECK(contains(headroom_test::error_of<invalid_argument>([&] { (void)group.communicator(8); }), "rank 8 out of range [0, 8)"));
  CHECK(headroom_test::throws<invalid_argument>([&] { (void)group.communicator(-1); }));
  CHECK(contains(headroom_test::error_of<invalid_argument>([] { host::thread_group g(0); }), "size 0 must be >= 1"));
  auto comm = group.communicator(2);
  std::vector<int> v(1);
  CHECK(contains(headroom_test::error_of<invalid_argument>([&] { comm.send(std::span<int const>(v), 2); }), "equal to own rank"));
  CHECK(headroom_test::throws<invalid_argument>([&] { comm.recv(std::span<int>(v), 8); }));
  CHECK(headroom_test::throws<invalid_argument>([&] { comm.send(std::span<int const>(v), -1); }));
}
