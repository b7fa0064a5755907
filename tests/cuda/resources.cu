// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "headroom/core/bytes.hpp"
#include "headroom/core/resource.hpp"
#include "headroom/cuda/async_resource.hpp"
#include "headroom/cuda/check.hpp"
#include "headroom/cuda/device.hpp"
#include "headroom/cuda/device_resource.hpp"
#include "headroom/cuda/pinned_resource.hpp"
#include "headroom/cuda/stream.hpp"

namespace cu = headroom::cuda;
using headroom::MiB;

namespace {

void require_gpu() { REQUIRE_MESSAGE(cu::device_count() >= 1, "this test needs a CUDA device"); }

// One fixture per resource, so one typed suite runs every check on each (as RMM does).
struct device_fixture {
  static constexpr char const* name = "device_resource";
  static constexpr bool host_accessible = false;
  cu::device_resource mr;
};
struct async_owned_fixture {
  static constexpr char const* name = "async_resource (owned pool)";
  static constexpr bool host_accessible = false;
  cu::async_resource mr{0};
};
struct async_default_fixture {
  static constexpr char const* name = "async_resource (device default pool)";
  static constexpr bool host_accessible = false;
  cu::async_resource mr = cu::async_resource::device_default(0);
};
struct pinned_fixture {
  static constexpr char const* name = "pinned_resource";
  static constexpr bool host_accessible = true;
  cu::pinned_resource mr;
};

static_assert(headroom::stream_resource_with<cu::device_resource, cu::stream_view, headroom::device_accessible>);
static_assert(headroom::stream_resource_with<cu::async_resource, cu::stream_view, headroom::device_accessible>);
static_assert(headroom::stream_resource_with<cu::pinned_resource, cu::stream_view, headroom::device_accessible,
                                             headroom::host_accessible>);
static_assert(!headroom::has_property<cu::device_resource, headroom::host_accessible>);
static_assert(!headroom::has_property<cu::async_resource, headroom::host_accessible>);

// Fills [p, p + n) with a byte pattern on `s` and checks it from the host.
void check_usable(void* p, std::size_t n, cu::stream_view s, unsigned char value) {
  HEADROOM_CUDA_TRY(cudaMemsetAsync(p, value, n, s.get()));
  std::vector<unsigned char> host(n);
  HEADROOM_CUDA_TRY(cudaMemcpyAsync(host.data(), p, n, cudaMemcpyDefault, s.get()));
  s.synchronize();
  CHECK(std::all_of(host.begin(), host.end(), [&](unsigned char c) { return c == value; }));
}

}  // namespace

TEST_CASE_TEMPLATE("resource: sizes and alignments, memory usable on a stream", F, device_fixture, async_owned_fixture,
                   async_default_fixture, pinned_fixture) {
  require_gpu();
  F f{};
  CAPTURE(F::name);
  cu::stream s;
  for (std::size_t bytes : {std::size_t{1}, std::size_t{7}, std::size_t{256}, std::size_t{4096}, MiB, 3 * MiB + 5}) {
    for (std::size_t align = 1; align <= 256; align *= 2) {
      CAPTURE(bytes);
      CAPTURE(align);
      void* p = f.mr.allocate(s, bytes, align);
      REQUIRE(p != nullptr);
      CHECK(reinterpret_cast<std::uintptr_t>(p) % align == 0);
      check_usable(p, bytes, s, static_cast<unsigned char>(bytes + align));
      f.mr.deallocate(s, p, bytes, align);
    }
  }
  s.synchronize();
}

TEST_CASE_TEMPLATE("resource: zero bytes is nullptr; bad alignments throw invalid_argument naming the value", F,
                   device_fixture, async_owned_fixture, async_default_fixture, pinned_fixture) {
  require_gpu();
  F f{};
  CAPTURE(F::name);
  cu::stream s;
  CHECK(f.mr.allocate(s, 0, 256) == nullptr);
  f.mr.deallocate(s, nullptr, 0, 256);  // a no-op
  CHECK_THROWS_WITH_AS(static_cast<void>(f.mr.allocate(s, 64, 512)), doctest::Contains("alignment 512 not supported"),
                       headroom::invalid_argument);
  CHECK_THROWS_WITH_AS(static_cast<void>(f.mr.allocate(s, 64, 3)), doctest::Contains("alignment 3"),
                       headroom::invalid_argument);
  CHECK_THROWS_AS(static_cast<void>(f.mr.allocate(s, 64, 0)), headroom::invalid_argument);
  // default alignment argument
  void* p = f.mr.allocate(s, 100);
  CHECK(reinterpret_cast<std::uintptr_t>(p) % headroom::default_alignment == 0);
  f.mr.deallocate(s, p, 100);
  s.synchronize();
}

TEST_CASE_TEMPLATE("resource: live allocations never overlap", F, device_fixture, async_owned_fixture,
                   async_default_fixture, pinned_fixture) {
  require_gpu();
  F f{};
  CAPTURE(F::name);
  cu::stream s;
  std::mt19937 gen(1234);
  std::uniform_int_distribution<std::size_t> size(1, 256 * 1024);
  std::vector<std::pair<std::uintptr_t, std::size_t>> blocks;
  for (int i = 0; i < 200; ++i) {
    std::size_t const n = size(gen);
    blocks.emplace_back(reinterpret_cast<std::uintptr_t>(f.mr.allocate(s, n, 256)), n);
  }
  auto sorted = blocks;
  std::sort(sorted.begin(), sorted.end());
  for (std::size_t i = 1; i < sorted.size(); ++i) CHECK(sorted[i - 1].first + sorted[i - 1].second <= sorted[i].first);
  for (auto [p, n] : blocks) f.mr.deallocate(s, reinterpret_cast<void*>(p), n, 256);
  s.synchronize();
}

TEST_CASE_TEMPLATE("resource: equality and the stated accessibility", F, device_fixture, async_owned_fixture,
                   async_default_fixture, pinned_fixture) {
  require_gpu();
  F f{};
  CAPTURE(F::name);
  auto copy = f.mr;
  CHECK(copy == f.mr);
  cu::stream s;
  void* p = f.mr.allocate(s, 4096, 256);
  s.synchronize();
  cudaPointerAttributes attr{};
  HEADROOM_CUDA_TRY(cudaPointerGetAttributes(&attr, p));
  if constexpr (F::host_accessible) {
    CHECK(attr.type == cudaMemoryTypeHost);
    std::memset(p, 0x5a, 4096);  // the host may touch it directly
    CHECK(static_cast<unsigned char*>(p)[4095] == 0x5a);
  } else {
    CHECK(attr.type == cudaMemoryTypeDevice);
    CHECK(attr.device == 0);
  }
  // Freed by a copy: equal resources may free each other's blocks.
  copy.deallocate(s, p, 4096, 256);
  s.synchronize();
}

TEST_CASE("device_resource and async_resource: an impossible request throws capacity_error naming the size") {
  require_gpu();
  cu::stream s;
  std::size_t const huge = std::size_t{1} << 50;  // 1 PiB
  cu::device_resource dr;
  CHECK_THROWS_WITH_AS(static_cast<void>(dr.allocate(s, huge)), doctest::Contains("cannot allocate 1125899906842624 bytes"),
                       headroom::capacity_error);
  CHECK(cudaGetLastError() == cudaSuccess);
  cu::async_resource ar(0);
  CHECK_THROWS_WITH_AS(static_cast<void>(ar.allocate(s, huge)), doctest::Contains("cudaErrorMemoryAllocation"),
                       headroom::capacity_error);
  // Both still work afterwards.
  void* p = dr.allocate(s, 1024);
  dr.deallocate(s, p, 1024);
  void* q = ar.allocate(s, 1024);
  ar.deallocate(s, q, 1024);
  s.synchronize();
}

TEST_CASE("async_resource: owned pool, release threshold kept at max by default, counters, high-water reset") {
  require_gpu();
  cu::async_resource mr(0);
  CHECK(mr.owns_pool());
  CHECK(mr.device() == 0);
  cudaMemPool_t default_pool = nullptr;
  HEADROOM_CUDA_TRY(cudaDeviceGetDefaultMemPool(&default_pool, 0));
  CHECK(mr.pool() != default_pool);
  CHECK(mr.release_threshold() == cu::keep_all_memory);
  std::uint64_t attr = 0;
  HEADROOM_CUDA_TRY(cudaMemPoolGetAttribute(mr.pool(), cudaMemPoolAttrReleaseThreshold, &attr));
  CHECK(attr == UINT64_MAX);

  auto const fresh = mr.usage();
  CHECK(fresh.used_current == 0);
  CHECK(fresh.reserved_current == 0);

  cu::stream s;
  std::size_t const n = 64 * MiB;
  void* p = mr.allocate(s, n);
  s.synchronize();
  auto const in_use = mr.usage();
  CHECK(in_use.used_current >= n);
  CHECK(in_use.reserved_current >= in_use.used_current);
  CHECK(in_use.used_high >= n);
  CHECK(in_use.reserved_high >= in_use.reserved_current);
  CHECK(mr.used_bytes() == in_use.used_current);
  CHECK(mr.reserved_bytes() == in_use.reserved_current);

  mr.deallocate(s, p, n);
  s.synchronize();  // with threshold 0 the pool would trim here; with UINT64_MAX it keeps the memory
  CHECK(mr.used_bytes() == 0);
  CHECK(mr.reserved_bytes() >= n);
  CHECK(mr.used_bytes_high() >= n);

  mr.reset_high_water_marks();
  CHECK(mr.used_bytes_high() == 0);
  CHECK(mr.reserved_bytes_high() == mr.reserved_bytes());

  // Reuse from the reserve: a same-size allocation does not grow the pool.
  auto const reserved_before = mr.reserved_bytes();
  void* again = mr.allocate(s, n);
  s.synchronize();
  CHECK(mr.reserved_bytes() == reserved_before);
  mr.deallocate(s, again, n);
  s.synchronize();

  // trim_to releases what is not in use.
  mr.trim_to(0);
  CHECK(mr.reserved_bytes() == 0);
}

TEST_CASE("async_resource: threshold 0 returns memory at synchronisation; initial size and max size honoured") {
  require_gpu();
  cu::stream s;
  std::size_t const n = 64 * MiB;
  {
    cu::async_resource mr(0, {.release_threshold = 0});
    CHECK(mr.release_threshold() == 0);
    void* p = mr.allocate(s, n);
    s.synchronize();
    CHECK(mr.reserved_bytes() >= n);
    mr.deallocate(s, p, n);
    s.synchronize();
    HEADROOM_CUDA_TRY(cudaDeviceSynchronize());  // the pool trims at a synchronisation after the free
    CHECK(mr.reserved_bytes() < n);
    mr.set_release_threshold(cu::keep_all_memory);
    CHECK(mr.release_threshold() == cu::keep_all_memory);
  }
  {
    cu::async_resource primed(0, {.initial_pool_size = 32 * MiB});
    CHECK(primed.reserved_bytes() >= 32 * MiB);
    CHECK(primed.used_bytes() == 0);
  }
  {
    cu::async_resource capped(0, {.max_pool_size = 64 * MiB});
    void* p = capped.allocate(s, 16 * MiB);
    CHECK_THROWS_AS(static_cast<void>(capped.allocate(s, 128 * MiB)), headroom::capacity_error);
    capped.deallocate(s, p, 16 * MiB);
    s.synchronize();
  }
}

TEST_CASE("async_resource: views of existing pools; copies share the pool") {
  require_gpu();
  cudaMemPool_t default_pool = nullptr;
  HEADROOM_CUDA_TRY(cudaDeviceGetDefaultMemPool(&default_pool, 0));
  std::uint64_t const saved_threshold = [&] {
    std::uint64_t t = 0;
    HEADROOM_CUDA_TRY(cudaMemPoolGetAttribute(default_pool, cudaMemPoolAttrReleaseThreshold, &t));
    return t;
  }();
  {
    auto def = cu::async_resource::device_default(0);
    CHECK(def.pool() == default_pool);
    CHECK_FALSE(def.owns_pool());
    CHECK(def.release_threshold() == cu::keep_all_memory);
    // nullopt leaves the threshold as it is
    def.set_release_threshold(12345);
    auto untouched = cu::async_resource::device_default(0, {.release_threshold = std::nullopt});
    CHECK(untouched.release_threshold() == 12345);
    CHECK(untouched == def);
  }
  HEADROOM_CUDA_TRY(cudaMemPoolSetAttribute(default_pool, cudaMemPoolAttrReleaseThreshold,
                                            const_cast<std::uint64_t*>(&saved_threshold)));

  cu::stream s;
  std::optional<cu::async_resource> owner(std::in_place, 0);
  auto viewed = cu::async_resource::view(owner->pool(), {.release_threshold = std::nullopt});
  CHECK(viewed == *owner);
  CHECK(viewed.device() == -1);
  CHECK_FALSE(viewed.owns_pool());
  CHECK_THROWS_AS(static_cast<void>(cu::async_resource::view(nullptr)), headroom::invalid_argument);
  CHECK_THROWS_WITH_AS(static_cast<void>(cu::async_resource::view(owner->pool(), {.max_pool_size = MiB})),
                       doctest::Contains("max_pool_size 1048576 applies only to pools the resource creates"),
                       headroom::invalid_argument);
  CHECK(cu::async_resource(0) != *owner);

  auto copy = *owner;  // shares the pool
  void* p = owner->allocate(s, MiB);
  owner.reset();  // the copy keeps the pool alive
  copy.deallocate(s, p, MiB);
  void* q = copy.allocate(s, MiB);
  check_usable(q, MiB, s, 7);
  copy.deallocate(s, q, MiB);
  s.synchronize();

  CHECK_THROWS_WITH_AS(cu::async_resource(cu::device_count()), doctest::Contains("out of range"),
                       headroom::invalid_argument);
}

TEST_CASE("async_resource: a pool on a second device allocates there (skipped with one GPU)") {
  require_gpu();
  if (cu::device_count() < 2) {
    MESSAGE("only one CUDA device: skipping the second-device check");
    return;
  }
  cu::async_resource mr(1);
  CHECK(mr.device() == 1);
  cu::scoped_device on1(1);
  cu::stream s;  // a stream of device 1
  void* p = mr.allocate(s, MiB);
  s.synchronize();
  cudaPointerAttributes attr{};
  HEADROOM_CUDA_TRY(cudaPointerGetAttributes(&attr, p));
  CHECK(attr.device == 1);
  mr.deallocate(s, p, MiB);
  s.synchronize();
}

TEST_CASE("async_resource: stream-ordered free then reuse on another stream after an event wait") {
  require_gpu();
  cu::async_resource mr(0);
  cu::stream a;
  cu::stream b;
  void* p = mr.allocate(a, MiB);
  check_usable(p, MiB, a, 1);
  mr.deallocate(a, p, MiB);
  cudaEvent_t e = nullptr;
  HEADROOM_CUDA_TRY(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  HEADROOM_CUDA_TRY(cudaEventRecord(e, a.get()));
  HEADROOM_CUDA_TRY(cudaStreamWaitEvent(b.get(), e, 0));
  void* q = mr.allocate(b, MiB);  // may reuse p's block: the dependency follows the event
  check_usable(q, MiB, b, 2);
  mr.deallocate(b, q, MiB);
  b.synchronize();
  HEADROOM_CUDA_TRY(cudaEventDestroy(e));
}

TEST_CASE("pinned_resource: host and device access, asynchronous copies") {
  require_gpu();
  cu::pinned_resource pr;
  cu::device_resource dr;
  cu::stream s;
  std::size_t const n = 1 << 20;
  auto* host = static_cast<std::uint32_t*>(pr.allocate(s, n * sizeof(std::uint32_t)));
  auto* dev = static_cast<std::uint32_t*>(dr.allocate(s, n * sizeof(std::uint32_t)));
  for (std::size_t i = 0; i < n; ++i) host[i] = static_cast<std::uint32_t>(i * 2654435761u);
  HEADROOM_CUDA_TRY(cudaMemcpyAsync(dev, host, n * sizeof(std::uint32_t), cudaMemcpyHostToDevice, s.get()));
  HEADROOM_CUDA_TRY(cudaMemsetAsync(host, 0, n * sizeof(std::uint32_t), s.get()));
  HEADROOM_CUDA_TRY(cudaMemcpyAsync(host, dev, n * sizeof(std::uint32_t), cudaMemcpyDeviceToHost, s.get()));
  s.synchronize();
  bool all = true;
  for (std::size_t i = 0; i < n; ++i) all = all && host[i] == static_cast<std::uint32_t>(i * 2654435761u);
  CHECK(all);
  dr.deallocate(s, dev, n * sizeof(std::uint32_t));
  pr.deallocate(s, host, n * sizeof(std::uint32_t));
}
