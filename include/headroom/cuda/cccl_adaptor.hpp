// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Adapters between headroom resources and CCCL `cuda::mr` resources, both ways.
//
//   cccl_resource<R>        a headroom stream_resource R (held by reference) seen as a CCCL
//                           stream-ordered resource: pass it to CCCL/RMM code, or wrap it in a
//                           cuda::mr resource ref.
//   from_cccl_resource<CR>  a CCCL stream-ordered resource CR (held by value; pass a resource
//                           ref to share one) seen as a headroom stream_resource<_, stream_view>.
//
// CCCL renamed its memory-resource API in 3.1 (CUDA 13.1, NVIDIA/cccl PR #5313). What the
// installed CCCL provides is detected from CCCL_VERSION:
//
//                         CCCL < 3.1 (CUDA 13.0 ships 3.0)          CCCL >= 3.1
//   stream-ordered        cuda::mr::async_resource                  cuda::mr::resource
//     allocate            allocate_async(bytes, align, stream)      allocate(stream, bytes, align)
//     deallocate          deallocate_async(p, bytes, align, stream) deallocate(stream, p, bytes, align)
//   synchronous           allocate(bytes, align)                    allocate_sync(bytes, align)
//                         deallocate(p, bytes, align)               deallocate_sync(p, bytes, align)
//   type-erased ref       cuda::mr::async_resource_ref<Props...>    cuda::mr::resource_ref<Props...>
//
// headroom::cuda::cccl::{stream_ordered_resource, stream_ordered_resource_with,
// stream_ordered_resource_ref} name whichever is installed. Before CCCL 3.2 the API is gated
// behind LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE; this header defines it, so include it
// before any <cuda/memory_resource> (or define the macro for the whole build).
//
// Properties map one to one: headroom::device_accessible <-> cuda::mr::device_accessible, and
// the same for host_accessible.
#if !defined(LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE)
#  if defined(_CUDA_MEMORY_RESOURCE) || defined(_CUDA__MEMORY_RESOURCE_RESOURCE_H)
#    error "headroom/cuda/cccl_adaptor.hpp: <cuda/memory_resource> was included without LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE; include this header first or define the macro for the whole build"
#  endif
#  define LIBCUDACXX_ENABLE_EXPERIMENTAL_MEMORY_RESOURCE
#endif

#if __has_include(<cuda/version>)
#  include <cuda/version>
#else
#  include <cuda/std/version>
#endif
#include <cuda/memory_resource>
#include <cuda/stream_ref>

#include <cstddef>
#include <cstdio>
#include <exception>
#include <utility>

#include "headroom/core/bytes.hpp"
#include "headroom/core/resource.hpp"
#include "headroom/cuda/async_resource.hpp"
#include "headroom/cuda/check.hpp"
#include "headroom/cuda/device_resource.hpp"
#include "headroom/cuda/pinned_resource.hpp"
#include "headroom/cuda/stream.hpp"

#if !defined(CCCL_MAJOR_VERSION) || !defined(CCCL_MINOR_VERSION)
#  error "headroom/cuda/cccl_adaptor.hpp: CCCL_VERSION not found; is CCCL on the include path (<ctk>/include/cccl)?"
#endif

/// 1 when `cuda::mr::resource` is the stream-ordered concept (CCCL >= 3.1), 0 for the
/// CCCL 2.x / 3.0 `cuda::mr::async_resource` spelling.
#if CCCL_MAJOR_VERSION > 3 || (CCCL_MAJOR_VERSION == 3 && CCCL_MINOR_VERSION >= 1)
#  define HEADROOM_CCCL_RESOURCE_IS_STREAM_ORDERED 1
#else
#  define HEADROOM_CCCL_RESOURCE_IS_STREAM_ORDERED 0
#endif

namespace headroom::cuda {

namespace cccl {
#if HEADROOM_CCCL_RESOURCE_IS_STREAM_ORDERED
template <class R>
concept stream_ordered_resource = ::cuda::mr::resource<R>;
template <class R, class... Props>
concept stream_ordered_resource_with = ::cuda::mr::resource_with<R, Props...>;
template <class... Props>
using stream_ordered_resource_ref = ::cuda::mr::resource_ref<Props...>;
#else
template <class R>
concept stream_ordered_resource = ::cuda::mr::async_resource<R>;
template <class R, class... Props>
concept stream_ordered_resource_with = ::cuda::mr::async_resource_with<R, Props...>;
template <class... Props>
using stream_ordered_resource_ref = ::cuda::mr::async_resource_ref<Props...>;
#endif
}  // namespace cccl

[[nodiscard]] inline ::cuda::stream_ref to_stream_ref(stream_view s) noexcept { return ::cuda::stream_ref(s.get()); }
[[nodiscard]] inline stream_view from_stream_ref(::cuda::stream_ref s) noexcept { return stream_view(s.get()); }

namespace detail {
template <class R, class P>
concept adl_property = requires(R const& r) { get_property(r, P{}); };

inline void report_exception_in_noexcept(char const* what) noexcept {
  try {
    throw;
  } catch (std::exception const& e) {
    std::fprintf(stderr, "headroom: %s failed: %s\n", what, e.what());
  } catch (...) {
    std::fprintf(stderr, "headroom: %s failed with a non-standard exception\n", what);
  }
}
}  // namespace detail

/// A headroom resource `R` (by reference; it must outlive the adapter) as a CCCL stream-ordered
/// resource. The synchronous calls run on `sync_stream` (default: the legacy default stream)
/// and synchronise it before returning, so the memory is ready for any stream after allocate
/// and the block is released after deallocate.
template <class R>
  requires stream_resource<R, stream_view>
class cccl_resource {
 public:
  explicit cccl_resource(R& upstream, stream_view sync_stream = {}) noexcept : upstream_(&upstream), sync_(sync_stream) {}

#if HEADROOM_CCCL_RESOURCE_IS_STREAM_ORDERED
  [[nodiscard]] void* allocate(::cuda::stream_ref stream, std::size_t bytes, std::size_t alignment) {
    return upstream_->allocate(from_stream_ref(stream), bytes, alignment);
  }
  void deallocate(::cuda::stream_ref stream, void* p, std::size_t bytes, std::size_t alignment) noexcept {
    upstream_->deallocate(from_stream_ref(stream), p, bytes, alignment);
  }
  [[nodiscard]] void* allocate_sync(std::size_t bytes, std::size_t alignment = default_alignment) {
    return sync_allocate(bytes, alignment);
  }
  void deallocate_sync(void* p, std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
    sync_deallocate(p, bytes, alignment);
  }
#else
  [[nodiscard]] void* allocate_async(std::size_t bytes, std::size_t alignment, ::cuda::stream_ref stream) {
    return upstream_->allocate(from_stream_ref(stream), bytes, alignment);
  }
  void deallocate_async(void* p, std::size_t bytes, std::size_t alignment, ::cuda::stream_ref stream) noexcept {
    upstream_->deallocate(from_stream_ref(stream), p, bytes, alignment);
  }
  [[nodiscard]] void* allocate(std::size_t bytes, std::size_t alignment = default_alignment) {
    return sync_allocate(bytes, alignment);
  }
  void deallocate(void* p, std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
    sync_deallocate(p, bytes, alignment);
  }
#endif

  [[nodiscard]] R& upstream() const noexcept { return *upstream_; }
  [[nodiscard]] stream_view sync_stream() const noexcept { return sync_; }

  /// Equal when the upstream resources compare equal (memory from one may go to the other).
  friend bool operator==(cccl_resource const& a, cccl_resource const& b) {
    return a.upstream_ == b.upstream_ || *a.upstream_ == *b.upstream_;
  }
  friend bool operator!=(cccl_resource const& a, cccl_resource const& b) { return !(a == b); }

  friend void get_property(cccl_resource const&, ::cuda::mr::device_accessible) noexcept
    requires has_property<R, headroom::device_accessible>
  {}
  friend void get_property(cccl_resource const&, ::cuda::mr::host_accessible) noexcept
    requires has_property<R, headroom::host_accessible>
  {}

 private:
  void* sync_allocate(std::size_t bytes, std::size_t alignment) {
    void* p = upstream_->allocate(sync_, bytes, alignment);
    cudaError_t const status = cudaStreamSynchronize(sync_.get());
    if (status != cudaSuccess) {
      upstream_->deallocate(sync_, p, bytes, alignment);
      detail::throw_cuda_failure(status, "cudaStreamSynchronize(sync_stream)", __FILE__, __LINE__);
    }
    return p;
  }
  void sync_deallocate(void* p, std::size_t bytes, std::size_t alignment) noexcept {
    upstream_->deallocate(sync_, p, bytes, alignment);
    HEADROOM_CUDA_TRY_NOTHROW(cudaStreamSynchronize(sync_.get()));
  }

  R* upstream_;
  stream_view sync_;
};

template <class R>
[[nodiscard]] cccl_resource<R> to_cccl(R& upstream, stream_view sync_stream = {}) noexcept {
  return cccl_resource<R>(upstream, sync_stream);
}

static_assert(cccl::stream_ordered_resource_with<cccl_resource<device_resource>, ::cuda::mr::device_accessible>,
              "cccl_resource<device_resource> must satisfy the installed CCCL stream-ordered resource concept");
static_assert(cccl::stream_ordered_resource_with<cccl_resource<async_resource>, ::cuda::mr::device_accessible>);
static_assert(cccl::stream_ordered_resource_with<cccl_resource<pinned_resource>, ::cuda::mr::device_accessible,
                                                 ::cuda::mr::host_accessible>);
static_assert(!detail::adl_property<cccl_resource<device_resource>, ::cuda::mr::host_accessible>);

/// A CCCL stream-ordered resource as a headroom stream_resource<_, stream_view>. Holds `CR` by
/// value: for a resource that cannot be copied, or to share one, pass
/// cccl::stream_ordered_resource_ref<Props...>{resource}.
template <class CR>
  requires cccl::stream_ordered_resource<CR>
class from_cccl_resource {
 public:
  explicit from_cccl_resource(CR upstream) : upstream_(std::move(upstream)) {}

  [[nodiscard]] void* allocate(stream_view const& stream, std::size_t bytes, std::size_t alignment = default_alignment) {
#if HEADROOM_CCCL_RESOURCE_IS_STREAM_ORDERED
    return upstream_.allocate(to_stream_ref(stream), bytes, alignment);
#else
    return upstream_.allocate_async(bytes, alignment, to_stream_ref(stream));
#endif
  }

  /// CCCL does not require deallocate to be noexcept; a throw here is reported and terminates.
  void deallocate(stream_view const& stream, void* p, std::size_t bytes, std::size_t alignment = default_alignment) noexcept {
    try {
#if HEADROOM_CCCL_RESOURCE_IS_STREAM_ORDERED
      upstream_.deallocate(to_stream_ref(stream), p, bytes, alignment);
#else
      upstream_.deallocate_async(p, bytes, alignment, to_stream_ref(stream));
#endif
    } catch (...) {
      detail::report_exception_in_noexcept("cuda::from_cccl_resource::deallocate");
      std::terminate();
    }
  }

  [[nodiscard]] CR& upstream() noexcept { return upstream_; }
  [[nodiscard]] CR const& upstream() const noexcept { return upstream_; }

  friend bool operator==(from_cccl_resource const& a, from_cccl_resource const& b) {
    return static_cast<bool>(a.upstream_ == b.upstream_);
  }

  friend void get_property(from_cccl_resource const&, headroom::device_accessible) noexcept
    requires detail::adl_property<CR, ::cuda::mr::device_accessible>
  {}
  friend void get_property(from_cccl_resource const&, headroom::host_accessible) noexcept
    requires detail::adl_property<CR, ::cuda::mr::host_accessible>
  {}

 private:
  CR upstream_;
};

template <class CR>
[[nodiscard]] from_cccl_resource<CR> from_cccl(CR upstream) {
  return from_cccl_resource<CR>(std::move(upstream));
}

static_assert(stream_resource_with<from_cccl_resource<cccl::stream_ordered_resource_ref<::cuda::mr::device_accessible>>,
                                   stream_view, headroom::device_accessible>);
static_assert(stream_resource_with<from_cccl_resource<cccl_resource<pinned_resource>>, stream_view,
                                   headroom::device_accessible, headroom::host_accessible>);
static_assert(!has_property<from_cccl_resource<cccl_resource<device_resource>>, headroom::host_accessible>);

}  // namespace headroom::cuda
