// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <atomic>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "headroom/host/thread_group.hpp"

using headroom::reduce_op;
using headroom::host::launch;
using headroom::host::thread_communicator;

namespace {
// Every rank draws the same per-rank data from a shared seed, so each can compute the
// expected collective result locally.
std::vector<std::int64_t> rank_data(int rank, std::size_t n, std::uint64_t seed) {
  std::mt19937_64 gen(seed * 1000003u + static_cast<std::uint64_t>(rank));
  std::uniform_int_distribution<std::int64_t> d(-1000000, 1000000);
  std::vector<std::int64_t> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}
}  // namespace

TEST_CASE("all_reduce sum, max, min match a local reference on random data") {
  for (int n : {1, 2, 3, 8}) {
    launch(n, [&](thread_communicator& c) {
      for (auto op : {reduce_op::sum, reduce_op::max, reduce_op::min}) {
        auto const mine = rank_data(c.rank(), 257, 7);
        std::vector<std::int64_t> out(mine.size(), -1);
        c.all_reduce(std::span<std::int64_t const>(mine), std::span<std::int64_t>(out), op);
        std::vector<std::int64_t> expect = rank_data(0, 257, 7);
        for (int r = 1; r < n; ++r) {
          auto const other = rank_data(r, 257, 7);
          for (std::size_t i = 0; i < expect.size(); ++i)
            expect[i] = op == reduce_op::sum   ? expect[i] + other[i]
                        : op == reduce_op::max ? std::max(expect[i], other[i])
                                               : std::min(expect[i], other[i]);
        }
        CHECK(out == expect);
      }
    });
  }
}

TEST_CASE("all_reduce in place and bitwise identical doubles on every rank") {
  std::vector<double> results(4);
  launch(4, [&](thread_communicator& c) {
    std::vector<double> v{0.1 * (c.rank() + 1), 1e16, -1e16};
    c.all_reduce(std::span<double const>(v), std::span<double>(v), reduce_op::sum);
    results[static_cast<std::size_t>(c.rank())] = v[0] + v[1] + v[2];
    CHECK(v[0] == doctest::Approx(1.0));
  });
  for (double r : results) CHECK(r == results[0]);
}

TEST_CASE("all_gather, reduce_scatter and broadcast") {
  launch(4, [](thread_communicator& c) {
    int const n = c.size();
    std::vector<std::int32_t> in{c.rank() * 10, c.rank() * 10 + 1};
    std::vector<std::int32_t> out(in.size() * static_cast<std::size_t>(n));
    c.all_gather(std::span<std::int32_t const>(in), std::span<std::int32_t>(out));
    for (int r = 0; r < n; ++r) {
      CHECK(out[2 * static_cast<std::size_t>(r)] == r * 10);
      CHECK(out[2 * static_cast<std::size_t>(r) + 1] == r * 10 + 1);
    }
    std::vector<float> rs_in(static_cast<std::size_t>(n) * 3);
    std::iota(rs_in.begin(), rs_in.end(), static_cast<float>(c.rank()));
    std::vector<float> rs_out(3);
    c.reduce_scatter(std::span<float const>(rs_in), std::span<float>(rs_out), reduce_op::sum);
    for (std::size_t j = 0; j < 3; ++j) {
      float expect = 0;
      for (int r = 0; r < n; ++r) expect += static_cast<float>(r) + static_cast<float>(static_cast<std::size_t>(c.rank()) * 3 + j);
      CHECK(rs_out[j] == expect);
    }
    std::vector<double> b(5, c.rank() == 2 ? 3.5 : -1.0);
    c.broadcast(std::span<double>(b), 2);
    for (double x : b) CHECK(x == 3.5);
  });
}

TEST_CASE("send/recv ring and FIFO order per pair") {
  launch(5, [](thread_communicator& c) {
    int const next = (c.rank() + 1) % c.size(), prev = (c.rank() + c.size() - 1) % c.size();
    for (int k = 0; k < 3; ++k) {
      std::int64_t const msg[2] = {c.rank(), k};
      c.send(std::span<std::int64_t const>(msg), next);
    }
    for (int k = 0; k < 3; ++k) {
      std::int64_t got[2] = {-1, -1};
      c.recv(std::span<std::int64_t>(got), prev);
      CHECK(got[0] == prev);
      CHECK(got[1] == k);
    }
  });
}

TEST_CASE("mismatched collectives raise collective_mismatch on every rank, then the group still works") {
  std::atomic<int> errors{0};
  launch(4, [&](thread_communicator& c) {
    std::vector<float> in(c.rank() == 3 ? 5 : 4, 1.0f), out(in.size());
    try {
      c.all_reduce(std::span<float const>(in), std::span<float>(out), reduce_op::sum);
    } catch (headroom::collective_mismatch const& e) {
      CHECK(std::string(e.what()).find("rank 3") != std::string::npos);
      ++errors;
    }
    // different element type on one rank
    std::vector<double> d(4, 1.0);
    std::vector<float> f(4, 1.0f);
    if (c.rank() == 1)
      CHECK_THROWS_AS(c.all_reduce(std::span<double const>(d), std::span<double>(d), reduce_op::sum),
                      headroom::collective_mismatch);
    else
      CHECK_THROWS_AS(c.all_reduce(std::span<float const>(f), std::span<float>(f), reduce_op::sum),
                      headroom::collective_mismatch);
    // different op
    CHECK_THROWS_AS(c.all_reduce(std::span<float const>(f), std::span<float>(f), c.rank() == 0 ? reduce_op::max : reduce_op::sum),
                    headroom::collective_mismatch);
    // wrong output size for all_gather on every rank: a contract violation seen by all
    std::vector<float> small(4);
    CHECK_THROWS_AS(c.all_gather(std::span<float const>(f), std::span<float>(small)), headroom::collective_mismatch);
    // broadcast root out of range
    CHECK_THROWS_AS(c.broadcast(std::span<float>(f), 9), headroom::collective_mismatch);
    // group still usable
    std::vector<int> one{1}, sum{0};
    c.all_reduce(std::span<int const>(one), std::span<int>(sum), reduce_op::sum);
    CHECK(sum[0] == 4);
  });
  CHECK(errors == 4);
}

TEST_CASE("a rank that fails outside a collective aborts the others instead of hanging") {
  std::atomic<int> aborted{0};
  auto run = [&] {
    launch(4, [&](thread_communicator& c) {
      if (c.rank() == 2) throw headroom::invalid_argument("rank 2 gave up");
      std::vector<int> v{1};
      try {
        c.all_reduce(std::span<int const>(v), std::span<int>(v), reduce_op::sum);
      } catch (headroom::group_aborted const&) {
        ++aborted;
        throw;
      }
    });
  };
  CHECK_THROWS_WITH_AS(run(), "rank 2 gave up", headroom::invalid_argument);
  CHECK(aborted == 3);
}

TEST_CASE("recv type or size mismatch and bad peers are errors") {
  launch(2, [](thread_communicator& c) {
    if (c.rank() == 0) {
      std::int32_t const v[3] = {1, 2, 3};
      c.send(std::span<std::int32_t const>(v), 1);
      CHECK_THROWS_AS(c.send(std::span<std::int32_t const>(v), 2), headroom::invalid_argument);
      CHECK_THROWS_AS(c.send(std::span<std::int32_t const>(v), 0), headroom::invalid_argument);
    } else {
      std::int64_t w[3];
      CHECK_THROWS_AS(c.recv(std::span<std::int64_t>(w), 0), headroom::collective_mismatch);
      CHECK_THROWS_AS(c.recv(std::span<std::int64_t>(w), -1), headroom::invalid_argument);
    }
  });
  CHECK_THROWS_AS(headroom::host::thread_group(0), headroom::invalid_argument);
  headroom::host::thread_group g(2);
  CHECK_THROWS_AS((void)g.communicator(2), headroom::invalid_argument);
}

TEST_CASE("split carves groups by color ordered by key") {
  launch(8, [](thread_communicator& c) {
    // pipeline-parallel groups of 4: color = rank % 2, key reverses the order
    auto sub = c.split(c.rank() % 2, -c.rank());
    CHECK(sub.size() == 4);
    CHECK(sub.rank() == (7 - c.rank()) / 2);
    std::vector<int> in{c.rank()}, out(4);
    sub.all_gather(std::span<int const>(in), std::span<int>(out));
    for (int r = 0; r < 4; ++r) CHECK(out[static_cast<std::size_t>(r)] % 2 == c.rank() % 2);
    auto again = c.split(0, c.rank());  // second split: one group of all
    CHECK(again.size() == 8);
    CHECK(again.rank() == c.rank());
    CHECK_THROWS_AS((void)c.split(c.rank() == 5 ? -1 : 0, 0), headroom::invalid_argument);
  });
}

TEST_CASE("stress: 16 ranks x 10000 mixed collectives") {
  constexpr int iterations = 10000;
  launch(16, [](thread_communicator& c) {
    constexpr int n = 16;
    std::mt19937 shared(12345);  // same sequence of choices on every rank
    std::vector<std::int64_t> buf(n * 4), out(n * 4);
    for (int it = 0; it < iterations; ++it) {
      int const kind = static_cast<int>(shared() % 5);
      std::size_t const m = 1 + shared() % 4;
      for (std::size_t i = 0; i < m; ++i) buf[i] = c.rank() + it + static_cast<std::int64_t>(i);
      switch (kind) {
        case 0: {
          c.all_reduce(std::span<std::int64_t const>(buf.data(), m), std::span<std::int64_t>(out.data(), m), reduce_op::sum);
          REQUIRE(out[0] == static_cast<std::int64_t>(n) * it + n * (n - 1) / 2);
          break;
        }
        case 1: {
          c.all_gather(std::span<std::int64_t const>(buf.data(), m), std::span<std::int64_t>(out.data(), m * n));
          REQUIRE(out[m * 3] == 3 + it);
          break;
        }
        case 2: {
          std::vector<std::int64_t> in(m * n, 1), o(m);
          c.reduce_scatter(std::span<std::int64_t const>(in), std::span<std::int64_t>(o), reduce_op::sum);
          REQUIRE(o[0] == n);
          break;
        }
        case 3: {
          int const root = it % n;
          c.broadcast(std::span<std::int64_t>(buf.data(), m), root);
          REQUIRE(buf[0] == root + it);
          break;
        }
        default: {
          std::int64_t const v = it;
          c.send(std::span<std::int64_t const>(&v, 1), (c.rank() + 1) % n);
          std::int64_t got = -1;
          c.recv(std::span<std::int64_t>(&got, 1), (c.rank() + n - 1) % n);
          REQUIRE(got == it);
        }
      }
    }
  });
}

TEST_CASE("a rank that returns early cannot leave its peers waiting") {
  // One rank skips the last collective: the others get collective_mismatch, not a hang.
  std::atomic<int> mismatches{0};
  launch(3, [&](thread_communicator& c) {
    std::vector<int> v{1};
    c.all_reduce(std::span<int const>(v), std::span<int>(v), reduce_op::sum);
    if (c.rank() == 0) return;
    try {
      c.all_reduce(std::span<int const>(v), std::span<int>(v), reduce_op::sum);
    } catch (headroom::collective_mismatch const& e) {
      CHECK(std::string(e.what()).find("rank 0") != std::string::npos);
      ++mismatches;
    }
  });
  CHECK(mismatches == 2);
  // A recv whose sender returned without sending.
  launch(2, [](thread_communicator& c) {
    if (c.rank() == 1) {
      int x = 0;
      CHECK_THROWS_AS(c.recv(std::span<int>(&x, 1), 0), headroom::collective_mismatch);
    }
  });
  // The same holds inside a split group.
  launch(4, [](thread_communicator& c) {
    auto sub = c.split(c.rank() / 2, c.rank());
    if (c.rank() == 1) return;
    if (c.rank() == 0) CHECK_THROWS_AS(sub.barrier(), headroom::collective_mismatch);
  });
}
