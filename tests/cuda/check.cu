// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "headroom/cuda/check.hpp"
#include "headroom/cuda/device.hpp"

namespace {

bool contains(std::string const& haystack, std::string const& needle) { return haystack.find(needle) != std::string::npos; }

// Runs fn with stderr redirected to a temporary file; returns what was written.
template <class Fn>
std::string capture_stderr(Fn&& fn) {
  char path[] = "/tmp/headroom_stderr_XXXXXX";
  int const fd = mkstemp(path);
  REQUIRE(fd >= 0);
  std::fflush(stderr);
  int const saved = dup(2);
  dup2(fd, 2);
  fn();
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(fd);
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  std::remove(path);
  return ss.str();
}

__global__ void noop_kernel() {}

void require_gpu() { REQUIRE_MESSAGE(headroom::cuda::device_count() >= 1, "this test needs a CUDA device"); }

}  // namespace

TEST_CASE("HEADROOM_CUDA_TRY throws cuda_error naming the call, the error and file:line") {
  require_gpu();
  int const line = __LINE__ + 2;
  try {
    HEADROOM_CUDA_TRY(cudaSetDevice(-1));
    FAIL("HEADROOM_CUDA_TRY did not throw");
  } catch (headroom::cuda_error const& e) {
    std::string const what = e.what();
    CHECK(contains(what, "cudaSetDevice(-1)"));
    CHECK(contains(what, "cudaErrorInvalidDevice"));
    CHECK(contains(what, cudaGetErrorString(cudaErrorInvalidDevice)));
    CHECK(contains(what, "check.cu:" + std::to_string(line)));
  }
  // The failure was cleared from the runtime's last-error slot.
  CHECK(cudaGetLastError() == cudaSuccess);
  // cuda_error is a headroom::error.
  CHECK_THROWS_AS([] { HEADROOM_CUDA_TRY(cudaSetDevice(-1)); }(), headroom::error);
  // Success does not throw.
  CHECK_NOTHROW([] { HEADROOM_CUDA_TRY(cudaSetDevice(0)); }());
}

TEST_CASE("HEADROOM_CUDA_TRY_NOTHROW reports to stderr and evaluates to false") {
  require_gpu();
  static_assert(noexcept(headroom::cuda::detail::report_cuda_failure(cudaSuccess, "", "", 0)));
  bool ok = true;
  std::string const err = capture_stderr([&] { ok = HEADROOM_CUDA_TRY_NOTHROW(cudaSetDevice(-1)); });
  CHECK_FALSE(ok);
  CHECK(contains(err, "cudaSetDevice(-1)"));
  CHECK(contains(err, "cudaErrorInvalidDevice"));
  CHECK(contains(err, "check.cu:"));
  CHECK(cudaGetLastError() == cudaSuccess);
  bool good = false;
  std::string const quiet = capture_stderr([&] { good = HEADROOM_CUDA_TRY_NOTHROW(cudaSetDevice(0)); });
  CHECK(good);
  CHECK(quiet.empty());
}

TEST_CASE("HEADROOM_CUDA_CHECK_LAST reports a bad launch configuration") {
  require_gpu();
  noop_kernel<<<1, 4096>>>();  // more threads per block than any GPU allows
  // CUDA 13 reports this as cudaErrorInvalidValue, older releases as cudaErrorInvalidConfiguration:
  // check the error the runtime itself recorded, whichever it is, and where it was caught.
  cudaError_t const recorded = cudaPeekAtLastError();
  CHECK(recorded != cudaSuccess);
  std::string const name = cudaGetErrorName(recorded);
  std::string message;
  try {
    HEADROOM_CUDA_CHECK_LAST();
  } catch (headroom::cuda_error const& e) {
    message = e.what();
  }
  CHECK(message.find(name) != std::string::npos);
  CHECK(message.find("check.cu:") != std::string::npos);
  noop_kernel<<<1, 32>>>();
  CHECK_NOTHROW([] { HEADROOM_CUDA_CHECK_LAST(); }());
  CHECK_NOTHROW([] { HEADROOM_CUDA_TRY(cudaDeviceSynchronize()); }());
}

TEST_CASE("device helpers: count, current device, scoped_device, require_device") {
  require_gpu();
  int const n = headroom::cuda::device_count();
  HEADROOM_CUDA_TRY(cudaSetDevice(0));
  CHECK(headroom::cuda::current_device() == 0);
  {
    headroom::cuda::scoped_device guard(n - 1);
    CHECK(headroom::cuda::current_device() == n - 1);
  }
  CHECK(headroom::cuda::current_device() == 0);
  std::string const expected = "device " + std::to_string(n) + " out of range";
  CHECK_THROWS_WITH_AS([n] { headroom::cuda::scoped_device guard(n); }(), doctest::Contains(expected.c_str()),
                       headroom::invalid_argument);
  CHECK(headroom::cuda::current_device() == 0);
  CHECK_THROWS_WITH_AS(headroom::cuda::require_device(-1, "here"), doctest::Contains("here: device -1 out of range"),
                       headroom::invalid_argument);
}
