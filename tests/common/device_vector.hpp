// SPDX-License-Identifier: Apache-2.0
#pragma once
// Device buffers for the GPU tests: cudaMalloc'd bytes, poisoned on creation so that a kernel or
// collective that skips an element is caught by a byte comparison with the expected result.
//
// The legacy-stream rule lives here and nowhere else: cudaMemset and cudaMemcpy from pageable
// memory run on the legacy default stream, which does not order work on the tests' non-blocking
// streams, and may return before the device has finished. fill_now / upload_now wait for the
// device, so that a poison fill or an upload cannot land after the work under test.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstring>
#include <utility>
#include <vector>

#include "headroom/core/error.hpp"
#include "headroom/cuda/check.hpp"

namespace headroom_test {

/// Sets `bytes` bytes at `p` to `byte`; returns once the device has written them.
inline void fill_now(void* p, int byte, std::size_t bytes) {
  HEADROOM_CUDA_TRY(cudaMemset(p, byte, bytes));
  HEADROOM_CUDA_TRY(cudaDeviceSynchronize());
}

/// Copies `bytes` host bytes to the device; returns once they have landed.
inline void upload_now(void* device, void const* host, std::size_t bytes) {
  HEADROOM_CUDA_TRY(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice));
  HEADROOM_CUDA_TRY(cudaDeviceSynchronize());
}

/// `n` elements of T in device memory, poisoned with `poison` bytes on creation.
template <class T>
class device_vector {
 public:
  explicit device_vector(std::size_t n, int poison = 0xAB) : n_(n) {
    HEADROOM_CUDA_TRY(cudaMalloc(&p_, n == 0 ? 1 : n * sizeof(T)));  // never null, even when empty
    fill_bytes(poison);
  }
  explicit device_vector(std::vector<T> const& host) : device_vector(host.size()) { upload(host); }
  device_vector(device_vector&& o) noexcept : p_(std::exchange(o.p_, nullptr)), n_(std::exchange(o.n_, 0)) {}
  device_vector(device_vector const&) = delete;
  device_vector& operator=(device_vector const&) = delete;
  device_vector& operator=(device_vector&&) = delete;
  ~device_vector() {
    if (p_ != nullptr) HEADROOM_CUDA_TRY_NOTHROW(cudaFree(p_));
  }

  void fill_bytes(int byte) { fill_now(p_, byte, bytes() + (n_ == 0)); }
  /// Writes `host` at element `offset` (an offset of 1 misaligns the data for vectorised paths).
  void upload(std::vector<T> const& host, std::size_t offset = 0) {
    headroom::expects(offset + host.size() <= n_, "device_vector::upload: ", host.size(), " elements at offset ",
                      offset, " into ", n_);
    upload_now(data() + offset, host.data(), host.size() * sizeof(T));
  }
  [[nodiscard]] std::vector<T> download() const { return download(n_, 0); }
  /// `n` elements from element `offset` on (a device-to-host cudaMemcpy returns with the data).
  [[nodiscard]] std::vector<T> download(std::size_t n, std::size_t offset) const {
    headroom::expects(offset + n <= n_, "device_vector::download: ", n, " elements at offset ", offset, " of ", n_);
    std::vector<T> out(n);
    if (n > 0) HEADROOM_CUDA_TRY(cudaMemcpy(out.data(), data() + offset, n * sizeof(T), cudaMemcpyDeviceToHost));
    return out;
  }
  [[nodiscard]] T* data() const noexcept { return static_cast<T*>(p_); }
  [[nodiscard]] std::size_t size() const noexcept { return n_; }
  [[nodiscard]] std::size_t bytes() const noexcept { return n_ * sizeof(T); }

 private:
  void* p_ = nullptr;
  std::size_t n_;
};

/// Byte-for-byte equality: also tells NaN patterns and -0.0 from +0.0 apart.
template <class T>
[[nodiscard]] bool same_bytes(std::vector<T> const& a, std::vector<T> const& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

}  // namespace headroom_test
