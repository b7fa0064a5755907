// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "headroom/lifetime/manual.hpp"

using namespace headroom;
using namespace headroom::lifetime;

TEST_CASE("manual streams complete work only when advanced, in order") {
  manual::timeline t;
  auto s = t.make_stream("s");
  std::vector<int> log;
  t.submit(s, [&] { log.push_back(1); });
  t.submit(s, [&] { log.push_back(2); });
  CHECK(log.empty());
  CHECK(t.pending(s) == 2);
  CHECK(t.step(s));
  CHECK(log == std::vector<int>{1});
  CHECK(t.run(s) == 1);
  CHECK(log == std::vector<int>{1, 2});
  CHECK_FALSE(t.step(s));
  CHECK(t.host_waits() == 0);
  CHECK(t.name(s) == "s");
}

TEST_CASE("a wait holds its stream until the event's stream reaches the mark") {
  manual::timeline t;
  auto a = t.make_stream("a");
  auto b = t.make_stream("b");
  std::vector<std::string> log;
  t.submit(a, [&] { log.push_back("a1"); });
  manual::event e;
  CHECK(e.ready());  // never recorded
  e.record(a);
  CHECK_FALSE(e.ready());
  t.submit(a, [&] { log.push_back("a2"); });  // after the mark: not waited for
  e.wait_on(b);
  t.submit(b, [&] { log.push_back("b1"); });
  CHECK(t.run(b) == 0);
  CHECK(t.step(a));
  CHECK(e.ready());
  CHECK(t.run(b) == 2);
  CHECK(log == std::vector<std::string>{"a1", "b1"});
  t.run_all();
  CHECK(log == std::vector<std::string>{"a1", "b1", "a2"});
}

TEST_CASE("host synchronization forces completion through waits and is counted") {
  manual::timeline t;
  auto a = t.make_stream("a");
  auto b = t.make_stream("b");
  int done = 0;
  t.submit(a, [&] { ++done; });
  manual::event e;
  e.record(a);
  e.wait_on(b);
  t.submit(b, [&] { ++done; });
  b.synchronize();
  CHECK(done == 2);
  CHECK(t.host_waits() == 1);
  t.submit(a, [&] { ++done; });
  e.record(a);
  e.synchronize();
  CHECK(done == 3);
  CHECK(t.host_waits() == 2);
  manual::event never;
  never.synchronize();  // not recorded: returns at once, like CUDA
  never.wait_on(a);     // and waiting on it is a no-op
  CHECK(t.pending(a) == 0);
  CHECK(t.host_waits() == 2);
}

TEST_CASE("a destroyed stream refuses new work but finishes what it holds") {
  manual::timeline t;
  auto a = t.make_stream("a");
  int done = 0;
  t.submit(a, [&] { ++done; });
  t.destroy(a);
  CHECK(t.destroyed(a));
  CHECK_THROWS_WITH_AS(t.submit(a, [] {}), "manual::timeline::submit: stream 'a' was destroyed; a stream accepts no work after that",
                       logic_error);
  t.run_all();
  CHECK(done == 1);
  manual::stream stray;
  CHECK_THROWS_WITH_AS(t.submit(stray, [] {}), "manual::timeline::submit: the stream does not belong to this timeline",
                       logic_error);
  CHECK_THROWS_AS(stray.synchronize(), logic_error);
  manual::timeline other;
  auto o = other.make_stream("o");
  manual::event e;
  e.record(a);
  CHECK_THROWS_WITH_AS(e.wait_on(o), "manual::event::wait_on: the stream belongs to another timeline", logic_error);
}

TEST_CASE("manual::resource follows cudaMemPool_t's reuse rules") {
  manual::timeline t;
  auto a = t.make_stream("a");
  auto b = t.make_stream("b");
  manual::resource pool(t);
  void* p = pool.allocate(a, 100);
  CHECK(pool.in_use(p));
  pool.deallocate(a, p, 100);
  CHECK_FALSE(pool.in_use(p));
  void* q = pool.allocate(b, 100);  // the free on a has not completed: b cannot take it
  CHECK(q != p);
  void* r = pool.allocate(a, 100);  // a can: stream order
  CHECK(r == p);
  pool.deallocate(a, r, 100);
  t.run_all();
  void* s = pool.allocate(b, 100);  // the free completed: any stream may take it
  CHECK(s == p);
  void* other_size = pool.allocate(b, 200);
  CHECK(other_size != p);
  CHECK(pool.usage().used_current == 400);
  CHECK(pool.usage().reserved_current == 400);
  CHECK(pool.usage().used_high == 400);
  pool.deallocate(b, q, 100);
  pool.deallocate(b, s, 100);
  pool.deallocate(b, other_size, 200);
  CHECK(pool.usage().used_current == 0);
  CHECK(pool.usage().reserved_high == 400);
  CHECK(pool.refused_frees() == 0);
}

TEST_CASE("manual::resource refuses bad frees and bad arguments") {
  manual::timeline t;
  auto a = t.make_stream("a");
  manual::resource pool(t);
  int not_ours = 0;
  pool.deallocate(a, &not_ours, sizeof not_ours);
  CHECK(pool.refused_frees() == 1);
  void* p = pool.allocate(a, 64);
  pool.deallocate(a, p, 32);  // wrong size
  CHECK(pool.refused_frees() == 2);
  pool.deallocate(a, p, 64);
  pool.deallocate(a, p, 64);  // double free
  CHECK(pool.refused_frees() == 3);
  CHECK_THROWS_WITH_AS((void)pool.allocate(a, 64, 48), "manual::resource::allocate: alignment 48 is not a power of two",
                       invalid_argument);
  t.destroy(a);
  CHECK_THROWS_WITH_AS((void)pool.allocate(a, 64), "manual::resource::allocate: stream 'a' was destroyed", logic_error);
}
