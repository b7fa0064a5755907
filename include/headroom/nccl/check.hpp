// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Checked NCCL calls.
//
//   HEADROOM_NCCL_TRY(ncclGroupEnd());                  // throws headroom::nccl_error
//   HEADROOM_NCCL_TRY(ncclAllReduce(...), comm);        // also reports comm's async error
//   HEADROOM_NCCL_TRY_NOTHROW(ncclCommDestroy(c), c);   // destructors: stderr, evaluates to bool
//
// The message names the call as written, ncclGetErrorString, the communicator's asynchronous
// error (ncclCommGetAsyncError) when a communicator is given and it has one, NCCL's last error
// text (ncclGetLastError; it may describe an earlier failure) and file:line.
#include <nccl.h>

#include <cstdio>
#include <string>

#include "headroom/core/error.hpp"

namespace headroom::nccl::detail {

[[nodiscard]] inline std::string describe_nccl_failure(ncclResult_t status, char const* call, char const* file,
                                                       int line, ncclComm_t comm = nullptr) {
  std::string msg = headroom::detail::concat("NCCL call ", call, " failed: ", ncclGetErrorString(status),
                                             " (ncclResult_t ", static_cast<int>(status), ")");
  if (comm != nullptr) {
    ncclResult_t async = ncclSuccess;
    if (ncclCommGetAsyncError(comm, &async) == ncclSuccess && async != ncclSuccess && async != ncclInProgress)
      msg += headroom::detail::concat("; communicator async error: ", ncclGetErrorString(async));
  }
  char const* last = ncclGetLastError(comm);
  if (last != nullptr && *last != '\0') msg += headroom::detail::concat("; NCCL last error: ", last);
  msg += headroom::detail::concat(" at ", file, ":", line);
  return msg;
}

[[noreturn]] inline void throw_nccl_failure(ncclResult_t status, char const* call, char const* file, int line,
                                            ncclComm_t comm = nullptr) {
  throw nccl_error(describe_nccl_failure(status, call, file, line, comm));
}

inline void check_nccl(ncclResult_t status, char const* call, char const* file, int line, ncclComm_t comm = nullptr) {
  if (status != ncclSuccess) throw_nccl_failure(status, call, file, line, comm);
}

inline bool report_nccl_failure(ncclResult_t status, char const* call, char const* file, int line,
                                ncclComm_t comm = nullptr) noexcept {
  if (status == ncclSuccess) return true;
  try {
    std::fprintf(stderr, "headroom: %s\n", describe_nccl_failure(status, call, file, line, comm).c_str());
  } catch (...) {
    std::fprintf(stderr, "headroom: NCCL call %s failed: %s at %s:%d\n", call, ncclGetErrorString(status), file, line);
  }
  return false;
}

}  // namespace headroom::nccl::detail

/// HEADROOM_NCCL_TRY(call) or HEADROOM_NCCL_TRY(call, comm): throws headroom::nccl_error unless
/// `call` returns ncclSuccess.
#define HEADROOM_NCCL_TRY(call, ...) \
  ::headroom::nccl::detail::check_nccl((call), #call, __FILE__, __LINE__ __VA_OPT__(, ) __VA_ARGS__)

/// Never throws: reports a failure to stderr and evaluates to false (true on success).
#define HEADROOM_NCCL_TRY_NOTHROW(call, ...) \
  (::headroom::nccl::detail::report_nccl_failure((call), #call, __FILE__, __LINE__ __VA_OPT__(, ) __VA_ARGS__))
