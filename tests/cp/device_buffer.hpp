#pragma once
// Minimal device buffers for the cp GPU tests, benches and example: cudaMalloc'd bytes filled
// with a poison byte so that a kernel that skips a row is caught by a byte comparison.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstring>
#include <vector>

#include "headroom/cuda/check.hpp"

namespace cp_test {

template <class T>
class device_vector {
 public:
  explicit device_vector(std::size_t n, int poison = 0xAB) : n_(n) {
    HEADROOM_CUDA_TRY(cudaMalloc(&p_, n == 0 ? 1 : n * sizeof(T)));
    fill_bytes(poison);
  }
  explicit device_vector(std::vector<T> const& host) : device_vector(host.size()) { upload(host); }
  device_vector(device_vector const&) = delete;
  device_vector& operator=(device_vector const&) = delete;
  ~device_vector() { HEADROOM_CUDA_TRY_NOTHROW(cudaFree(p_)); }

  // cudaMemset and pageable cudaMemcpy run on the legacy stream, which does not order work on
  // the tests' non-blocking streams, and may return before the device finished: wait for the
  // device so that a poison fill or an upload cannot land after the kernel under test.
  void fill_bytes(int byte) {
    HEADROOM_CUDA_TRY(cudaMemset(p_, byte, n_ * sizeof(T) + (n_ == 0)));
    HEADROOM_CUDA_TRY(cudaDeviceSynchronize());
  }
  void upload(std::vector<T> const& host) {
    HEADROOM_CUDA_TRY(cudaMemcpy(p_, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
    HEADROOM_CUDA_TRY(cudaDeviceSynchronize());
  }
  [[nodiscard]] std::vector<T> download() const {
    std::vector<T> out(n_);
    HEADROOM_CUDA_TRY(cudaMemcpy(out.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost));
    return out;
  }
  [[nodiscard]] T* data() const noexcept { return static_cast<T*>(p_); }
  [[nodiscard]] std::size_t size() const noexcept { return n_; }

 private:
  void* p_ = nullptr;
  std::size_t n_;
};

template <class T>
[[nodiscard]] bool same_bytes(std::vector<T> const& a, std::vector<T> const& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

}  // namespace cp_test
