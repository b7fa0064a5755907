// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Error hierarchy. Host code throws these; device code never throws.
// Every message names the offending value and what was expected.
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace headroom {

/// Base of every exception headroom throws.
class error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

/// A caller passed a value outside what the function accepts (sizes, ranks, layouts).
class invalid_argument : public error {
 public:
  using error::error;
};

/// An object was used in a state that forbids the call (double release, moved-from guard).
class logic_error : public error {
 public:
  using error::error;
};

/// A pool or resource cannot satisfy a request (exhaustion, oversize request).
class capacity_error : public error {
 public:
  using error::error;
};

/// Ranks of one group called a collective with different shapes, types or ops.
class collective_mismatch : public error {
 public:
  using error::error;
};

/// Another rank failed, so the group was aborted; collectives in flight are abandoned.
class group_aborted : public error {
 public:
  using error::error;
};

/// A CUDA runtime call failed.
class cuda_error : public error {
 public:
  using error::error;
};

/// An NCCL call failed, or the communicator reported an asynchronous error.
class nccl_error : public error {
 public:
  using error::error;
};

/// An MPI call failed.
class mpi_error : public error {
 public:
  using error::error;
};

namespace detail {
template <class... Parts>
[[nodiscard]] std::string concat(Parts const&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}
}  // namespace detail

/// Throws `E` with the concatenation of `parts` when `condition` is false.
template <class E = invalid_argument, class... Parts>
constexpr void expects(bool condition, Parts const&... parts) {
  if (!condition) throw E(detail::concat(parts...));
}

}  // namespace headroom
