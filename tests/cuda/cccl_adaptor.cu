// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

// The adaptor defines LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE before CCCL is included.
#include "headroom/cuda/cccl_adaptor.hpp"

#include <cstddef>
#include <cstdint>
#include <vector>

#include "headroom/core/resource.hpp"
#include "headroom/cuda/async_resource.hpp"
#include "headroom/cuda/check.hpp"
#include "headroom/cuda/device.hpp"
#include "headroom/cuda/device_resource.hpp"
#include "headroom/cuda/pinned_resource.hpp"
#include "headroom/cuda/stream.hpp"

namespace cu = headroom::cuda;
namespace mr = ::cuda::mr;

namespace cccl_adaptor_test {  // named: its unused members must not warn as internal-linkage code

// A resource written against CCCL's own API (not headroom's), over cudaMallocAsync, to show the
// CCCL -> headroom direction with a resource headroom did not make.
struct cccl_malloc_async {
#if HEADROOM_CCCL_RESOURCE_IS_STREAM_ORDERED
  void* allocate(::cuda::stream_ref s, std::size_t bytes, std::size_t) {
    void* p = nullptr;
    HEADROOM_CUDA_TRY(cudaMallocAsync(&p, bytes, s.get()));
    ++allocations;
    return p;
  }
  void deallocate(::cuda::stream_ref s, void* p, std::size_t, std::size_t) noexcept {
    HEADROOM_CUDA_TRY_NOTHROW(cudaFreeAsync(p, s.get()));
  }
  void* allocate_sync(std::size_t bytes, std::size_t) {
    void* p = nullptr;
    HEADROOM_CUDA_TRY(cudaMalloc(&p, bytes));
    return p;
  }
  void deallocate_sync(void* p, std::size_t, std::size_t) noexcept { HEADROOM_CUDA_TRY_NOTHROW(cudaFree(p)); }
#else
  void* allocate_async(std::size_t bytes, std::size_t, ::cuda::stream_ref s) {
    void* p = nullptr;
    HEADROOM_CUDA_TRY(cudaMallocAsync(&p, bytes, s.get()));
    ++allocations;
    return p;
  }
  void deallocate_async(void* p, std::size_t, std::size_t, ::cuda::stream_ref s) {
    HEADROOM_CUDA_TRY_NOTHROW(cudaFreeAsync(p, s.get()));
  }
  void* allocate(std::size_t bytes, std::size_t) {
    void* p = nullptr;
    HEADROOM_CUDA_TRY(cudaMalloc(&p, bytes));
    return p;
  }
  void deallocate(void* p, std::size_t, std::size_t) { HEADROOM_CUDA_TRY_NOTHROW(cudaFree(p)); }
#endif
  friend bool operator==(cccl_malloc_async const&, cccl_malloc_async const&) { return true; }
  friend bool operator!=(cccl_malloc_async const&, cccl_malloc_async const&) { return false; }
  friend void get_property(cccl_malloc_async const&, mr::device_accessible) noexcept {}
  int allocations = 0;
};

}  // namespace cccl_adaptor_test

using cccl_adaptor_test::cccl_malloc_async;

namespace {

void require_gpu() { REQUIRE_MESSAGE(cu::device_count() >= 1, "this test needs a CUDA device"); }

// Stream-ordered calls through CCCL's spelling of the installed version.
template <class R>
void* cccl_allocate(R& r, cu::stream_view s, std::size_t bytes, std::size_t align) {
#if HEADROOM_CCCL_RESOURCE_IS_STREAM_ORDERED
  return r.allocate(cu::to_stream_ref(s), bytes, align);
#else
  return r.allocate_async(bytes, align, cu::to_stream_ref(s));
#endif
}
template <class R>
void cccl_deallocate(R& r, cu::stream_view s, void* p, std::size_t bytes, std::size_t align) {
#if HEADROOM_CCCL_RESOURCE_IS_STREAM_ORDERED
  r.deallocate(cu::to_stream_ref(s), p, bytes, align);
#else
  r.deallocate_async(p, bytes, align, cu::to_stream_ref(s));
#endif
}
template <class R>
void* cccl_allocate_sync(R& r, std::size_t bytes, std::size_t align) {
#if HEADROOM_CCCL_RESOURCE_IS_STREAM_ORDERED
  return r.allocate_sync(bytes, align);
#else
  return r.allocate(bytes, align);
#endif
}
template <class R>
void cccl_deallocate_sync(R& r, void* p, std::size_t bytes, std::size_t align) {
#if HEADROOM_CCCL_RESOURCE_IS_STREAM_ORDERED
  r.deallocate_sync(p, bytes, align);
#else
  r.deallocate(p, bytes, align);
#endif
}

void check_usable(void* p, std::size_t n, cu::stream_view s, unsigned char value) {
  HEADROOM_CUDA_TRY(cudaMemsetAsync(p, value, n, s.get()));
  std::vector<unsigned char> host(n);
  HEADROOM_CUDA_TRY(cudaMemcpyAsync(host.data(), p, n, cudaMemcpyDefault, s.get()));
  s.synchronize();
  bool all = true;
  for (auto c : host) all = all && c == value;
  CHECK(all);
}

// headroom -> CCCL: the installed concept, with properties mapped one to one.
static_assert(cu::cccl::stream_ordered_resource<cu::cccl_resource<cu::device_resource>>);
static_assert(cu::cccl::stream_ordered_resource_with<cu::cccl_resource<cu::async_resource>, mr::device_accessible>);
static_assert(cu::cccl::stream_ordered_resource_with<cu::cccl_resource<cu::pinned_resource>, mr::device_accessible,
                                                     mr::host_accessible>);
static_assert(!cu::cccl::stream_ordered_resource_with<cu::cccl_resource<cu::device_resource>, mr::host_accessible>);
#if HEADROOM_CCCL_RESOURCE_IS_STREAM_ORDERED
static_assert(mr::resource<cu::cccl_resource<cu::device_resource>>);
static_assert(mr::synchronous_resource<cu::cccl_resource<cu::device_resource>>);
#else
static_assert(mr::async_resource<cu::cccl_resource<cu::device_resource>>);
static_assert(mr::resource<cu::cccl_resource<cu::device_resource>>);  // 3.0: the synchronous one
#endif
// CCCL -> headroom.
static_assert(cu::cccl::stream_ordered_resource<cccl_malloc_async>);
static_assert(headroom::stream_resource_with<cu::from_cccl_resource<cccl_malloc_async>, cu::stream_view,
                                            headroom::device_accessible>);
static_assert(!headroom::has_property<cu::from_cccl_resource<cccl_malloc_async>, headroom::host_accessible>);
static_assert(headroom::stream_resource_with<
              cu::from_cccl_resource<cu::cccl::stream_ordered_resource_ref<mr::host_accessible, mr::device_accessible>>,
              cu::stream_view, headroom::host_accessible, headroom::device_accessible>);
// A headroom resource is not a CCCL one without the adapter, and the reverse.
static_assert(!cu::cccl::stream_ordered_resource<cu::device_resource>);
static_assert(!headroom::stream_resource<cccl_malloc_async, cu::stream_view>);

}  // namespace

TEST_CASE("the installed CCCL generation is detected") {
  MESSAGE("CCCL ", CCCL_MAJOR_VERSION, ".", CCCL_MINOR_VERSION, ": stream-ordered concept is ",
          HEADROOM_CCCL_RESOURCE_IS_STREAM_ORDERED ? "cuda::mr::resource (3.1+ names)"
                                                   : "cuda::mr::async_resource (3.0 names)");
#if CCCL_MAJOR_VERSION == 3 && CCCL_MINOR_VERSION == 0
  CHECK(HEADROOM_CCCL_RESOURCE_IS_STREAM_ORDERED == 0);
#endif
  cu::stream_view const v = cu::stream_view::per_thread_default();
  CHECK(cu::to_stream_ref(v).get() == v.get());
  CHECK(cu::from_stream_ref(cu::to_stream_ref(v)) == v);
}

TEST_CASE("round trip: headroom device_resource -> CCCL ref -> headroom resource") {
  require_gpu();
  cu::device_resource dr;
  auto as_cccl = cu::to_cccl(dr);
  cu::cccl::stream_ordered_resource_ref<mr::device_accessible> ref{as_cccl};
  auto back = cu::from_cccl(ref);
  cu::stream s;
  for (std::size_t bytes : {std::size_t{1}, std::size_t{4096}, std::size_t{1} << 22}) {
    void* p = back.allocate(s, bytes, 256);
    REQUIRE(p != nullptr);
    CHECK(reinterpret_cast<std::uintptr_t>(p) % 256 == 0);
    check_usable(p, bytes, s, 0x3c);
    back.deallocate(s, p, bytes, 256);
  }
  // Through the CCCL spelling directly, stream-ordered and synchronous.
  void* q = cccl_allocate(ref, s, 1000, 128);
  check_usable(q, 1000, s, 9);
  cccl_deallocate(ref, s, q, 1000, 128);
  void* r = cccl_allocate_sync(ref, 2048, 256);
  check_usable(r, 2048, s, 10);
  cccl_deallocate_sync(ref, r, 2048, 256);
  // headroom's argument checks still apply through the adapter.
  CHECK_THROWS_AS(static_cast<void>(cccl_allocate(ref, s, 64, 4096)), headroom::invalid_argument);
  s.synchronize();
}

TEST_CASE("async_resource through the CCCL adapter allocates from its pool, in stream order") {
  require_gpu();
  cu::async_resource pool(0);
  auto as_cccl = cu::to_cccl(pool);
  cu::stream s;
  void* p = cccl_allocate(as_cccl, s, 8 << 20, 256);
  s.synchronize();
  CHECK(pool.used_bytes() >= (8u << 20));
  check_usable(p, 8 << 20, s, 0x11);
  cccl_deallocate(as_cccl, s, p, 8 << 20, 256);
  s.synchronize();
  CHECK(pool.used_bytes() == 0);

  // Equality forwards to the upstreams: same pool equal, different pools not.
  cu::async_resource other(0);
  auto same = cu::to_cccl(pool);
  auto different = cu::to_cccl(other);
  CHECK(as_cccl == same);
  CHECK(as_cccl != different);
  CHECK(&as_cccl.upstream() == &pool);
}

TEST_CASE("pinned_resource through CCCL keeps both accessibility properties") {
  require_gpu();
  cu::pinned_resource pr;
  auto as_cccl = cu::to_cccl(pr);
  cu::cccl::stream_ordered_resource_ref<mr::host_accessible, mr::device_accessible> ref{as_cccl};
  auto back = cu::from_cccl(ref);
  cu::stream s;
  auto* p = static_cast<int*>(back.allocate(s, 64 * sizeof(int)));
  s.synchronize();
  for (int i = 0; i < 64; ++i) p[i] = i;  // host-accessible
  int* d = nullptr;
  HEADROOM_CUDA_TRY(cudaMallocAsync(reinterpret_cast<void**>(&d), 64 * sizeof(int), s.get()));
  HEADROOM_CUDA_TRY(cudaMemcpyAsync(d, p, 64 * sizeof(int), cudaMemcpyHostToDevice, s.get()));
  HEADROOM_CUDA_TRY(cudaMemsetAsync(p, 0, 64 * sizeof(int), s.get()));
  HEADROOM_CUDA_TRY(cudaMemcpyAsync(p, d, 64 * sizeof(int), cudaMemcpyDeviceToHost, s.get()));
  HEADROOM_CUDA_TRY(cudaFreeAsync(d, s.get()));
  s.synchronize();
  bool all = true;
  for (int i = 0; i < 64; ++i) all = all && p[i] == i;
  CHECK(all);
  back.deallocate(s, p, 64 * sizeof(int));
}

TEST_CASE("a resource written for CCCL serves as a headroom resource") {
  require_gpu();
  auto hr = cu::from_cccl(cccl_malloc_async{});
  cu::stream s;
  void* p = hr.allocate(s, 1 << 20);
  check_usable(p, 1 << 20, s, 0x7e);
  hr.deallocate(s, p, 1 << 20);
  s.synchronize();
  CHECK(hr.upstream().allocations == 1);
  CHECK(hr == cu::from_cccl(cccl_malloc_async{}));
}
