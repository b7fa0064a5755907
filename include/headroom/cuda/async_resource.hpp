// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Stream-ordered device memory from a cudaMemPool_t (cudaMallocFromPoolAsync / cudaFreeAsync).
//
// The resource either owns a pool it created for one device, or views an existing pool (for
// example the device's default pool). Copies share the pool; an owned pool is destroyed with
// the last copy. On construction the pool's release threshold is set (default UINT64_MAX: keep
// freed memory reserved instead of returning it to the driver at every synchronisation, which
// is what a training loop wants; CUDA's own default is 0).
//
// The pool's counters are exposed as reported by the driver:
//   reserved: bytes the pool holds from the driver; used: bytes handed out to allocations.
//   *_high:   high-water marks since creation or the last reset_high_water_marks().
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>

#include "headroom/core/bytes.hpp"
#include "headroom/core/error.hpp"
#include "headroom/core/resource.hpp"
#include "headroom/cuda/check.hpp"
#include "headroom/cuda/detail/allocation.hpp"
#include "headroom/cuda/device.hpp"
#include "headroom/cuda/stream.hpp"

namespace headroom::cuda {

/// Bytes kept reserved when the pool trims at synchronisation: never trim.
inline constexpr std::uint64_t keep_all_memory = std::numeric_limits<std::uint64_t>::max();

struct pool_options {
  /// Value for cudaMemPoolAttrReleaseThreshold; std::nullopt leaves a viewed pool's setting alone.
  std::optional<std::uint64_t> release_threshold = keep_all_memory;
  /// Bytes to reserve up front (allocated and freed once at construction; kept when the
  /// release threshold allows). 0: none.
  std::size_t initial_pool_size = 0;
  /// Owned pools only: the most the pool may reserve (cudaMemPoolProps::maxSize); 0: no limit.
  std::size_t max_pool_size = 0;
};

struct pool_usage {
  std::uint64_t reserved_current = 0;
  std::uint64_t reserved_high = 0;
  std::uint64_t used_current = 0;
  std::uint64_t used_high = 0;
};

namespace detail {
struct pool_handle {
  cudaMemPool_t pool = nullptr;
  int device = -1;  // -1: unknown (a viewed pool passed in by handle)
  bool owned = false;

  pool_handle(cudaMemPool_t p, int d, bool o) noexcept : pool(p), device(d), owned(o) {}
  pool_handle(pool_handle const&) = delete;
  pool_handle& operator=(pool_handle const&) = delete;
  ~pool_handle() {
    // cudaMemPoolDestroy defers the release of memory still in use until it is freed.
    if (owned && pool != nullptr) HEADROOM_CUDA_TRY_NOTHROW(cudaMemPoolDestroy(pool));
  }
};
}  // namespace detail

class async_resource {
 public:
  /// Allocations from the pool are aligned to 256 bytes.
  static constexpr std::size_t max_alignment = 256;

  /// Creates and owns a pool of device memory on `device`.
  explicit async_resource(int device, pool_options const& options = {}) {
    require_pool_support(device);
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = device;
    props.maxSize = options.max_pool_size;
    cudaMemPool_t pool = nullptr;
    HEADROOM_CUDA_TRY(cudaMemPoolCreate(&pool, &props));
    handle_ = std::make_shared<detail::pool_handle>(pool, device, true);
    configure(options);
  }

  /// Views the default pool of `device` (the one plain cudaMallocAsync uses). Setting the
  /// release threshold here changes it for every user of that pool.
  [[nodiscard]] static async_resource device_default(int device, pool_options const& options = {}) {
    require_pool_support(device);
    cudaMemPool_t pool = nullptr;
    HEADROOM_CUDA_TRY(cudaDeviceGetDefaultMemPool(&pool, device));
    return async_resource(std::make_shared<detail::pool_handle>(pool, device, false), options);
  }

  /// Views an existing pool owned elsewhere; it must outlive every copy of this resource.
  [[nodiscard]] static async_resource view(cudaMemPool_t pool, pool_options const& options = {}) {
    expects(pool != nullptr, "cuda::async_resource::view: null cudaMemPool_t");
    return async_resource(std::make_shared<detail::pool_handle>(pool, -1, false), options);
  }

  /// Returns `bytes` bytes, usable by work ordered after `stream` (the allocation is ordered
  /// on it). Alignment: a power of two <= 256. Zero bytes gives nullptr. Throws capacity_error
  /// when the pool cannot grow.
  [[nodiscard]] void* allocate(stream_view const& stream, std::size_t bytes, std::size_t alignment = default_alignment) {
    detail::check_alignment("cuda::async_resource::allocate", alignment, max_alignment);
    if (bytes == 0) return nullptr;
    void* p = nullptr;
    HEADROOM_CUDA_ALLOC_TRY("cuda::async_resource::allocate", bytes,
                            cudaMallocFromPoolAsync(&p, bytes, handle_->pool, stream.get()));
    return p;
  }

  /// Frees in stream order: the block may be reused by work ordered after `stream`. The caller
  /// guarantees that other streams that used it were made to wait (or wait_on) before this.
  void deallocate(stream_view const& stream, void* p, std::size_t, std::size_t = default_alignment) noexcept {
    if (p != nullptr) HEADROOM_CUDA_TRY_NOTHROW(cudaFreeAsync(p, stream.get()));
  }

  [[nodiscard]] pool_usage usage() const {
    return {attribute(cudaMemPoolAttrReservedMemCurrent), attribute(cudaMemPoolAttrReservedMemHigh),
            attribute(cudaMemPoolAttrUsedMemCurrent), attribute(cudaMemPoolAttrUsedMemHigh)};
  }
  [[nodiscard]] std::uint64_t reserved_bytes() const { return attribute(cudaMemPoolAttrReservedMemCurrent); }
  [[nodiscard]] std::uint64_t reserved_bytes_high() const { return attribute(cudaMemPoolAttrReservedMemHigh); }
  [[nodiscard]] std::uint64_t used_bytes() const { return attribute(cudaMemPoolAttrUsedMemCurrent); }
  [[nodiscard]] std::uint64_t used_bytes_high() const { return attribute(cudaMemPoolAttrUsedMemHigh); }

  /// Resets both high-water marks to the current values.
  void reset_high_water_marks() {
    set_attribute(cudaMemPoolAttrReservedMemHigh, 0);  // the driver accepts only 0 here
    set_attribute(cudaMemPoolAttrUsedMemHigh, 0);
  }

  [[nodiscard]] std::uint64_t release_threshold() const { return attribute(cudaMemPoolAttrReleaseThreshold); }
  void set_release_threshold(std::uint64_t bytes) { set_attribute(cudaMemPoolAttrReleaseThreshold, bytes); }

  /// Returns unused memory to the driver until the pool holds at most `keep_bytes` (or as
  /// close as the pool's granularity allows). Memory still allocated is never released.
  void trim_to(std::size_t keep_bytes) { HEADROOM_CUDA_TRY(cudaMemPoolTrimTo(handle_->pool, keep_bytes)); }

  [[nodiscard]] cudaMemPool_t pool() const noexcept { return handle_->pool; }
  /// The pool's device, or -1 for a pool viewed by handle.
  [[nodiscard]] int device() const noexcept { return handle_->device; }
  [[nodiscard]] bool owns_pool() const noexcept { return handle_->owned; }

  /// Equal when both allocate from the same pool (so either may free the other's blocks).
  friend bool operator==(async_resource const& a, async_resource const& b) noexcept {
    return a.handle_->pool == b.handle_->pool;
  }
  friend void get_property(async_resource const&, device_accessible) noexcept {}

 private:
  async_resource(std::shared_ptr<detail::pool_handle> handle, pool_options const& options) : handle_(std::move(handle)) {
    expects(options.max_pool_size == 0, "cuda::async_resource: max_pool_size ", options.max_pool_size,
            " applies only to pools the resource creates; expected 0 for a viewed pool");
    configure(options);
  }

  static void require_pool_support(int device) {
    require_device(device, "cuda::async_resource");
    int supported = 0;
    HEADROOM_CUDA_TRY(cudaDeviceGetAttribute(&supported, cudaDevAttrMemoryPoolsSupported, device));
    expects(supported != 0, "cuda::async_resource: device ", device, " does not support memory pools");
  }

  void configure(pool_options const& options) {
    if (options.release_threshold) set_release_threshold(*options.release_threshold);
    if (options.initial_pool_size > 0) {
      // Reserve by allocating and freeing once; the threshold decides whether it is kept.
      std::optional<scoped_device> on_device;
      if (handle_->device >= 0) on_device.emplace(handle_->device);
      stream_view const s = stream_view::per_thread_default();
      void* p = allocate(s, options.initial_pool_size, default_alignment);
      deallocate(s, p, options.initial_pool_size, default_alignment);
      s.synchronize();
    }
  }

  [[nodiscard]] std::uint64_t attribute(cudaMemPoolAttr attr) const {
    std::uint64_t value = 0;  // the counters and threshold are cuuint64_t
    HEADROOM_CUDA_TRY(cudaMemPoolGetAttribute(handle_->pool, attr, &value));
    return value;
  }
  void set_attribute(cudaMemPoolAttr attr, std::uint64_t value) {
    HEADROOM_CUDA_TRY(cudaMemPoolSetAttribute(handle_->pool, attr, &value));
  }

  std::shared_ptr<detail::pool_handle> handle_;
};
static_assert(stream_resource_with<async_resource, stream_view, device_accessible>);
static_assert(!has_property<async_resource, host_accessible>);

}  // namespace headroom::cuda
