// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "headroom/host/thread_group.hpp"
#include "headroom/lifetime/host.hpp"
#include "headroom/lifetime/work.hpp"

using namespace headroom;
using namespace headroom::lifetime;

namespace counting {

// aligned_resource that counts its live blocks, so tests see when a stash is released.
class resource {
 public:
  void* allocate(host::inline_stream const& s, std::size_t n, std::size_t a = default_alignment) {
    void* p = heap_.allocate(s, n, a);
    ++live_;
    return p;
  }
  void deallocate(host::inline_stream const& s, void* p, std::size_t n, std::size_t a = default_alignment) noexcept {
    heap_.deallocate(s, p, n, a);
    --live_;
  }
  [[nodiscard]] int live() const noexcept { return live_; }
  friend bool operator==(resource const& a, resource const& b) noexcept { return &a == &b; }

 private:
  host::aligned_resource heap_;
  int live_ = 0;
};
static_assert(stream_resource<resource, host::inline_stream>);

using G = guard<resource, host::inline_stream, host::inline_event, stream_ordered>;

}  // namespace counting
using counting::G;

namespace {
std::vector<double> rank_values(int rank, std::size_t n) {
  std::mt19937_64 rng(1000 + static_cast<unsigned>(rank));
  std::uniform_real_distribution<double> dist(-1.0, 1.0);
  std::vector<double> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}
constexpr double poison = -12345.0;
}  // namespace

TEST_CASE("all_reduce_async in place: every rank gets the rank-ordered sum; the caller keeps the buffer") {
  constexpr int ranks = 4;
  constexpr std::size_t n = 1000;
  host::launch(ranks, [&](host::thread_communicator& comm) {
    counting::resource heap;
    host::inline_stream compute, comm_stream;
    G buf(heap, compute, n * sizeof(double), alignof(double));
    auto mine = rank_values(comm.rank(), n);
    std::copy(mine.begin(), mine.end(), buf.as_span<double>().begin());
    auto work = all_reduce_async<double>(comm, buf, reduce_op::sum, compute, comm_stream);
    CHECK(work.valid());
    CHECK(work.stashed() == 0);
    CHECK(work.ready());
    work.wait(compute);
    std::vector<double> expected(n, 0.0);
    for (int r = 0; r < ranks; ++r) {
      auto v = rank_values(r, n);
      for (std::size_t i = 0; i < n; ++i) expected[i] += v[i];
    }
    auto got = buf.as_span<double>();
    CHECK(std::equal(got.begin(), got.end(), expected.begin()));
    CHECK(buf.live());
    CHECK(heap.live() == 1);
  });
}

TEST_CASE("out-of-place all_reduce_async: an rvalue input is stashed until wait, an lvalue input stays") {
  constexpr int ranks = 3;
  constexpr std::size_t n = 257;
  host::launch(ranks, [&](host::thread_communicator& comm) {
    counting::resource heap;
    host::inline_stream s;
    G in(heap, s, n * sizeof(double), alignof(double));
    G out(heap, s, n * sizeof(double), alignof(double));
    auto mine = rank_values(comm.rank(), n);
    std::copy(mine.begin(), mine.end(), in.as_span<double>().begin());
    std::fill(out.as_span<double>().begin(), out.as_span<double>().end(), poison);
    auto work = all_reduce_async<double>(comm, std::move(in), out, reduce_op::max, s, s);
    CHECK_FALSE(in.live());
    CHECK(work.stashed() == 1);
    CHECK(heap.live() == 2);
    work.wait(s);
    CHECK(work.stashed() == 0);
    CHECK(heap.live() == 1);  // the input went back at wait()
    std::vector<double> expected = rank_values(0, n);
    for (int r = 1; r < ranks; ++r) {
      auto v = rank_values(r, n);
      for (std::size_t i = 0; i < n; ++i) expected[i] = std::max(expected[i], v[i]);
    }
    auto got = out.as_span<double>();
    CHECK(std::equal(got.begin(), got.end(), expected.begin()));

    G keep(heap, s, n * sizeof(double), alignof(double));
    std::copy(mine.begin(), mine.end(), keep.as_span<double>().begin());
    auto w2 = all_reduce_async<double>(comm, keep, out, reduce_op::min, s, s);
    CHECK(w2.stashed() == 0);
    CHECK(keep.live());
    w2.synchronize();
  });
}

TEST_CASE("all_gather_async and reduce_scatter_async match host references; broadcast_async copies the root") {
  constexpr int ranks = 4;
  constexpr std::size_t n = 64;
  host::launch(ranks, [&](host::thread_communicator& comm) {
    counting::resource heap;
    host::inline_stream s;
    int const me = comm.rank();
    {
      G in(heap, s, n * sizeof(double), alignof(double));
      G out(heap, s, ranks * n * sizeof(double), alignof(double));
      auto mine = rank_values(me, n);
      std::copy(mine.begin(), mine.end(), in.as_span<double>().begin());
      std::fill(out.as_span<double>().begin(), out.as_span<double>().end(), poison);
      auto w = all_gather_async<double>(comm, std::move(in), out, s, s);
      w.wait(s);
      for (int r = 0; r < ranks; ++r) {
        auto v = rank_values(r, n);
        auto got = out.as_span<double>().subspan(static_cast<std::size_t>(r) * n, n);
        CHECK(std::equal(got.begin(), got.end(), v.begin()));
      }
    }
    {
      G in(heap, s, ranks * n * sizeof(double), alignof(double));
      G out(heap, s, n * sizeof(double), alignof(double));
      auto mine = rank_values(me, ranks * n);
      std::copy(mine.begin(), mine.end(), in.as_span<double>().begin());
      std::fill(out.as_span<double>().begin(), out.as_span<double>().end(), poison);
      auto w = reduce_scatter_async<double>(comm, std::move(in), out, reduce_op::sum, s, s);
      w.wait(s);
      std::vector<double> expected(n, 0.0);
      for (int r = 0; r < ranks; ++r) {
        auto v = rank_values(r, ranks * n);
        for (std::size_t i = 0; i < n; ++i) expected[i] += v[static_cast<std::size_t>(me) * n + i];
      }
      auto got = out.as_span<double>();
      CHECK(std::equal(got.begin(), got.end(), expected.begin()));
    }
    {
      G buf(heap, s, n * sizeof(double), alignof(double));
      auto mine = rank_values(me, n);
      std::copy(mine.begin(), mine.end(), buf.as_span<double>().begin());
      auto w = broadcast_async<double>(comm, buf, 2, s, s);
      w.wait(s);
      auto root = rank_values(2, n);
      CHECK(std::equal(buf.as_span<double>().begin(), buf.as_span<double>().end(), root.begin()));
    }
    CHECK(heap.live() == 0);
  });
}

TEST_CASE("shapes that disagree across ranks: collective_mismatch on every rank, and no guard is lost") {
  constexpr int ranks = 2;
  std::vector<int> mismatches(ranks, 0);
  host::launch(ranks, [&](host::thread_communicator& comm) {
    counting::resource heap;
    host::inline_stream s;
    std::size_t const n = comm.rank() == 0 ? 8 : 16;
    G in(heap, s, n * sizeof(float), alignof(float));
    G out(heap, s, n * sizeof(float), alignof(float));
    try {
      auto w = all_reduce_async<float>(comm, std::move(in), out, reduce_op::sum, s, s);
    } catch (collective_mismatch const&) {
      mismatches[static_cast<std::size_t>(comm.rank())] = 1;
    }
    CHECK(in.live());  // the collective failed before the input was handed over
    CHECK(out.live());
    CHECK(heap.live() == 2);
  });
  CHECK(mismatches == std::vector<int>{1, 1});
}

TEST_CASE("bad local arguments throw before any collective is issued") {
  // Every rank passes the same bad argument, so none of them enters the collective.
  host::launch(2, [&](host::thread_communicator& comm) {
    counting::resource heap;
    host::inline_stream s;
    G odd(heap, s, 10);
    CHECK_THROWS_WITH_AS((void)all_reduce_async<double>(comm, odd, reduce_op::sum, s, s),
                         "lifetime::guard::as_span: 10 bytes is not a multiple of the element size 8", invalid_argument);
    G gone(heap, s, 16);
    gone.release();
    G out(heap, s, 16);
    CHECK_THROWS_AS((void)all_reduce_async<double>(comm, std::move(gone), out, reduce_op::sum, s, s), logic_error);
    G empty;
    CHECK_THROWS_AS((void)broadcast_async<double>(comm, empty, 0, s, s), logic_error);
    comm.barrier();  // the group is still usable: nobody entered a collective
  });
}

TEST_CASE("a work handle that is empty throws; one dropped without wait still releases its stash") {
  collective_work<G> none;
  host::inline_stream s;
  CHECK_FALSE(none.valid());
  CHECK_THROWS_WITH_AS(none.wait(s), "lifetime::collective_work::wait: the handle is empty (moved-from or default-constructed)",
                       logic_error);
  CHECK_THROWS_AS(none.synchronize(), logic_error);
  CHECK_THROWS_AS((void)none.ready(), logic_error);
  host::launch(2, [&](host::thread_communicator& comm) {
    counting::resource heap;
    G in(heap, s, 32 * sizeof(float), alignof(float));
    G out(heap, s, 32 * sizeof(float), alignof(float));
    std::fill(in.as_span<float>().begin(), in.as_span<float>().end(), 1.0f);
    {
      auto w = all_reduce_async<float>(comm, std::move(in), out, reduce_op::sum, s, s);
      auto moved = std::move(w);
      CHECK_FALSE(w.valid());
      CHECK(moved.stashed() == 1);
    }
    CHECK(heap.live() == 1);
    for (float x : out.as_span<float>()) CHECK(x == 2.0f);
  });
}

TEST_CASE("deferred guards through a work handle: on the host substrate every stream is the owner, so no quarantine") {
  // All inline streams compare equal, so the comm stream's use is a use on the owner stream:
  // nothing to wait for, and the deferred release frees at once.
  host::launch(2, [&](host::thread_communicator& comm) {
    host::aligned_resource heap;
    host_reclaimer quarantine(heap);
    host::inline_stream s;
    host_deferred_guard in(quarantine, s, 64 * sizeof(std::int64_t), alignof(std::int64_t));
    host_deferred_guard out(quarantine, s, 128 * sizeof(std::int64_t), alignof(std::int64_t));
    std::int64_t const me = comm.rank();
    for (auto& x : in.as_span<std::int64_t>()) x = me + 1;
    auto w = all_gather_async<std::int64_t>(comm, std::move(in), out, s, s);
    w.wait(s);
    CHECK(quarantine.stats().blocks_deferred == 0);
    CHECK(quarantine.stats().quarantined_blocks == 0);
    auto got = out.as_span<std::int64_t>();
    for (std::size_t i = 0; i < got.size(); ++i) CHECK(got[i] == (i < 64 ? 1 : 2));
  });
}
