// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Creating NCCL communicators inside one process that drives several GPUs.
//
//   auto comms = headroom::nccl::make_local_group({0, 1});      // ncclCommInitAll
//   headroom::nccl::launch_per_device(headroom::nccl::first_devices(2), [](communicator& c) {
//     headroom::cuda::stream s;                                // on c.device(): already current
//     ...collectives on s...
//   });
//
// For several processes (one GPU each), the unique id travels over MPI:
// headroom/mpi/nccl_bootstrap.hpp (kept apart so that nccl/ does not need MPI).
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <functional>
#include <initializer_list>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "headroom/core/error.hpp"
#include "headroom/cuda/check.hpp"
#include "headroom/cuda/device.hpp"
#include "headroom/nccl/check.hpp"
#include "headroom/nccl/communicator.hpp"

namespace headroom::nccl {

/// Devices 0 .. n-1. Throws invalid_argument naming both counts when fewer than n are present.
[[nodiscard]] inline std::vector<int> first_devices(int n) {
  expects(n >= 1, "nccl::first_devices: need n >= 1, got ", n);
  int const available = cuda::device_count();
  expects(available >= n, "nccl::first_devices: needs ", n, " CUDA devices, found ", available);
  std::vector<int> devices(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) devices[static_cast<std::size_t>(i)] = i;
  return devices;
}

/// One communicator per device, rank i on devices[i] (ncclCommInitAll). Devices must exist and
/// be distinct (NCCL does not support two ranks on one GPU).
[[nodiscard]] inline std::vector<communicator> make_local_group(std::span<int const> devices) {
  expects(!devices.empty(), "nccl::make_local_group: no devices given");
  int const available = cuda::device_count();
  for (std::size_t i = 0; i < devices.size(); ++i) {
    expects(devices[i] >= 0 && devices[i] < available, "nccl::make_local_group: devices[", i, "] = ", devices[i],
            " out of range [0, ", available, ")");
    for (std::size_t j = 0; j < i; ++j)
      expects(devices[j] != devices[i], "nccl::make_local_group: device ", devices[i], " listed twice (at ", j,
              " and ", i, "); NCCL needs one rank per GPU");
  }
  std::vector<ncclComm_t> raw(devices.size(), nullptr);
  HEADROOM_NCCL_TRY(ncclCommInitAll(raw.data(), static_cast<int>(devices.size()), devices.data()));
  std::vector<communicator> comms;
  comms.reserve(raw.size());
  std::size_t adopted = 0;
  try {
    for (; adopted < raw.size(); ++adopted) comms.push_back(communicator::adopt(raw[adopted]));
  } catch (...) {
    // adopt() owns its handle before it can throw; destroy the ones not reached.
    for (std::size_t i = adopted + 1; i < raw.size(); ++i) HEADROOM_NCCL_TRY_NOTHROW(ncclCommDestroy(raw[i]));
    throw;
  }
  return comms;
}
[[nodiscard]] inline std::vector<communicator> make_local_group(std::initializer_list<int> devices) {
  return make_local_group(std::span<int const>(devices.begin(), devices.size()));
}

/// Runs `fn(communicator&)` on one thread per device (that device current), after creating the
/// group with make_local_group, and joins. If a rank throws, every communicator of the group is
/// aborted (ncclCommAbort), so ranks blocked in NCCL work return instead of hanging; their later
/// calls throw group_aborted. After all threads joined, the first exception thrown (the cause,
/// not a consequence of the abort) is rethrown. Communicators are destroyed before returning.
template <class Fn>
  requires std::invocable<Fn&, communicator&>
void launch_per_device(std::span<int const> devices, Fn&& fn) {
  std::vector<communicator> comms = make_local_group(devices);
  std::size_t const n = comms.size();
  std::vector<std::exception_ptr> errors(n);
  std::atomic<int> first_failure{-1};
  {
    std::vector<std::jthread> threads;
    threads.reserve(n);
    auto run_rank = [&](std::size_t r) {
      try {
        HEADROOM_CUDA_TRY(cudaSetDevice(comms[r].device()));
        std::invoke(fn, comms[r]);
      } catch (...) {
        errors[r] = std::current_exception();
        int expected = -1;
        if (first_failure.compare_exchange_strong(expected, static_cast<int>(r)))
          for (auto& c : comms) c.abort();
      }
    };
    try {
      for (std::size_t r = 0; r < n; ++r) threads.emplace_back(run_rank, r);
    } catch (...) {  // could not start a thread: the started ranks must not wait for it
      for (auto& c : comms) c.abort();
      throw;
    }
  }
  comms.clear();
  int const first = first_failure.load();
  if (first >= 0) std::rethrow_exception(errors[static_cast<std::size_t>(first)]);
}
template <class Fn>
  requires std::invocable<Fn&, communicator&>
void launch_per_device(std::initializer_list<int> devices, Fn&& fn) {
  launch_per_device(std::span<int const>(devices.begin(), devices.size()), std::forward<Fn>(fn));
}

}  // namespace headroom::nccl
