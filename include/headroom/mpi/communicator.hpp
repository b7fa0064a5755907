// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// headroom::mpi: host-memory collectives between processes over MPI, modelling
// headroom::communicator with stream_type = host::inline_stream (every call completes before it
// returns). Needs only MPI: no CUDA header is included.
//
//   headroom::mpi::environment env(&argc, &argv);         // MPI_Init_thread unless already done
//   auto world = headroom::mpi::communicator::world();     // a private dup of MPI_COMM_WORLD
//   world.all_reduce(std::span<double const>(x), std::span<double>(y), headroom::reduce_op::sum);
//
// Errors. The communicator works on its own duplicate of the MPI_Comm it is given, with the
// MPI_ERRORS_RETURN handler, so a failing call returns and is thrown as headroom::mpi_error with
// MPI_Error_string's text, the call and file:line (a truncated receive becomes
// collective_mismatch). Local arguments are checked before MPI is called and throw
// invalid_argument naming the values: sizes against the contract of core/communicator.hpp,
// counts that do not fit MPI's int, root and peer ranges, partly overlapping buffers.
//
// What is NOT checked: that all ranks call the same collective with the same sizes, types and
// op. MPI gives no cheap way to see the other ranks' arguments (it would cost an extra
// collective per call), so a mismatch is undefined in MPI terms (typically a hang, a truncation
// error or wrong data), exactly as with raw MPI. thread_group does check, for tests.
//
// Element types: 8/32/64-bit integers, float, double, and std::byte (data movement only).
// 16-bit floats (any type with dtype f16/bf16, e.g. __half) move as 16-bit words but cannot be
// reduced: MPI has no half-precision reduction.
//
// send follows MPI_Send: it may block until the peer posts the matching recv, so ranks that
// exchange must order their calls, or use sendrecv.
// The deprecated MPI C++ bindings are not used (and warn under -Wextra); skip them.
#ifndef OMPI_SKIP_MPICXX
#  define OMPI_SKIP_MPICXX 1
#endif
#ifndef MPICH_SKIP_MPICXX
#  define MPICH_SKIP_MPICXX 1
#endif
#include <mpi.h>

#include <climits>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <utility>

#include "headroom/core/communicator.hpp"
#include "headroom/core/dtype.hpp"
#include "headroom/core/error.hpp"
#include "headroom/host/stream.hpp"

namespace headroom::mpi {

namespace detail {

[[nodiscard]] inline std::string error_text(int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "unknown MPI error " + std::to_string(code);
  return std::string(text, static_cast<std::size_t>(length));
}

[[noreturn]] inline void throw_mpi_failure(int code, char const* call, char const* file, int line) {
  int error_class = code;
  if (MPI_Error_class(code, &error_class) != MPI_SUCCESS) error_class = code;
  std::string const msg = headroom::detail::concat("MPI call ", call, " failed: ", error_text(code), " (error code ",
                                                   code, ") at ", file, ":", line);
  if (error_class == MPI_ERR_TRUNCATE) throw collective_mismatch(msg + "; the message was longer than the receive buffer");
  throw mpi_error(msg);
}

inline void check_mpi(int code, char const* call, char const* file, int line) {
  if (code != MPI_SUCCESS) throw_mpi_failure(code, call, file, line);
}

template <class T>
inline constexpr bool always_false = false;

template <class T>
struct datatype_of {
  static_assert(always_false<T>,
                "headroom::mpi: this element type has no MPI data type. Supported: int8_t, uint8_t, int32_t, "
                "uint32_t, int64_t, uint64_t, float, double, std::byte and 16-bit float types (the last two for "
                "data movement only)");
};

template <class T>
  requires(std::is_integral_v<T> && !std::is_same_v<T, bool>)
struct datatype_of<T> {
  static_assert(sizeof(T) == 1 || sizeof(T) == 4 || sizeof(T) == 8,
                "headroom::mpi: supported integers are 8, 32 and 64 bits wide (as in NCCL)");
  static MPI_Datatype get() noexcept {
    if constexpr (sizeof(T) == 1) return std::is_signed_v<T> ? MPI_INT8_T : MPI_UINT8_T;
    else if constexpr (sizeof(T) == 4) return std::is_signed_v<T> ? MPI_INT32_T : MPI_UINT32_T;
    else return std::is_signed_v<T> ? MPI_INT64_T : MPI_UINT64_T;
  }
  static constexpr bool reducible = true;
};
template <> struct datatype_of<float> {
  static MPI_Datatype get() noexcept { return MPI_FLOAT; }
  static constexpr bool reducible = true;
};
template <> struct datatype_of<double> {
  static MPI_Datatype get() noexcept { return MPI_DOUBLE; }
  static constexpr bool reducible = true;
};
template <> struct datatype_of<std::byte> {
  static MPI_Datatype get() noexcept { return MPI_BYTE; }
  static constexpr bool reducible = false;
};
// Class types tagged f16 / bf16 (the CUDA substrate tags __half and __nv_bfloat16): 16-bit words.
template <class T>
  requires(!std::is_arithmetic_v<T> && has_dtype<T>)
struct datatype_of<T> {
  static_assert(dtype_v<T> == dtype::f16 || dtype_v<T> == dtype::bf16,
                "headroom::mpi: only 16-bit float class types are supported beyond the built-in types");
  static_assert(sizeof(T) == 2 && std::is_trivially_copyable_v<T>);
  static MPI_Datatype get() noexcept { return MPI_UINT16_T; }
  static constexpr bool reducible = false;
};

[[nodiscard]] inline MPI_Op to_mpi(reduce_op op) {
  switch (op) {
    case reduce_op::sum: return MPI_SUM;
    case reduce_op::max: return MPI_MAX;
    case reduce_op::min: return MPI_MIN;
  }
  throw invalid_argument(headroom::detail::concat("mpi: reduce_op value ", static_cast<int>(op),
                                                  " is not sum, max or min"));
}

[[nodiscard]] inline bool ranges_overlap(void const* a, std::size_t a_bytes, void const* b, std::size_t b_bytes) noexcept {
  auto const x = reinterpret_cast<std::uintptr_t>(a);
  auto const y = reinterpret_cast<std::uintptr_t>(b);
  return a_bytes > 0 && b_bytes > 0 && x < y + b_bytes && y < x + a_bytes;
}

}  // namespace detail

/// Throws headroom::mpi_error (collective_mismatch for a truncated message) unless `call`
/// returns MPI_SUCCESS. Only calls on communicators with MPI_ERRORS_RETURN return errors;
/// under MPI's default handler a failure aborts the job before this can see it.
#define HEADROOM_MPI_TRY(call) ::headroom::mpi::detail::check_mpi((call), #call, __FILE__, __LINE__)

/// The MPI data type of `T` (cv-qualifiers ignored); a compile error for unsupported types.
template <class T>
[[nodiscard]] MPI_Datatype datatype() noexcept {
  return detail::datatype_of<std::remove_cv_t<T>>::get();
}
template <class T>
inline constexpr bool reducible_v = detail::datatype_of<std::remove_cv_t<T>>::reducible;

[[nodiscard]] inline bool is_initialized() {
  int flag = 0;
  MPI_Initialized(&flag);
  return flag != 0;
}
[[nodiscard]] inline bool is_finalized() {
  int flag = 0;
  MPI_Finalized(&flag);
  return flag != 0;
}

/// MPI's lifetime. Initialises MPI (MPI_Init_thread) unless it already is, and finalises it on
/// destruction only if this object initialised it. Create one, in main, before any communicator.
class environment {
 public:
  explicit environment(int* argc = nullptr, char*** argv = nullptr, int required_thread_level = MPI_THREAD_FUNNELED) {
    expects<logic_error>(!is_finalized(), "mpi::environment: MPI was already finalized; it cannot be initialised again");
    if (is_initialized()) {
      MPI_Query_thread(&provided_);
    } else {
      detail::check_mpi(MPI_Init_thread(argc, argv, required_thread_level, &provided_),
                        "MPI_Init_thread(argc, argv, required, &provided)", __FILE__, __LINE__);
      owns_ = true;
    }
    expects<mpi_error>(provided_ >= required_thread_level, "mpi::environment: MPI provides thread level ", provided_,
                       ", expected at least ", required_thread_level);
  }
  environment(environment const&) = delete;
  environment& operator=(environment const&) = delete;
  ~environment() {
    if (owns_ && !is_finalized()) MPI_Finalize();
  }

  [[nodiscard]] int thread_level() const noexcept { return provided_; }
  [[nodiscard]] bool owns_mpi() const noexcept { return owns_; }

 private:
  int provided_ = MPI_THREAD_SINGLE;
  bool owns_ = false;
};

class communicator {
 public:
  using stream_type = host::inline_stream;
  /// split() color for ranks that join no new communicator (they get an empty one).
  static constexpr int no_color = -1;

  /// An empty communicator: valid() is false and every other call throws logic_error.
  communicator() noexcept = default;

  /// Duplicates `comm` (collective over it) and sets MPI_ERRORS_RETURN on the duplicate.
  explicit communicator(MPI_Comm comm) {
    expects(comm != MPI_COMM_NULL, "mpi::communicator: MPI_COMM_NULL");
    expects<logic_error>(is_initialized() && !is_finalized(), "mpi::communicator: MPI is not initialised (create an mpi::environment first)");
    // The dup itself runs under `comm`'s handler (fatal by default); everything after returns.
    detail::check_mpi(MPI_Comm_dup(comm, &comm_), "MPI_Comm_dup(comm, &dup)", __FILE__, __LINE__);
    adopt_dup();
  }
  /// A private duplicate of MPI_COMM_WORLD.
  [[nodiscard]] static communicator world() { return communicator(MPI_COMM_WORLD); }

  communicator(communicator&& o) noexcept
      : comm_(std::exchange(o.comm_, MPI_COMM_NULL)), rank_(o.rank_), size_(o.size_) {}
  communicator& operator=(communicator&& o) noexcept {
    if (this != &o) {
      free();
      comm_ = std::exchange(o.comm_, MPI_COMM_NULL);
      rank_ = o.rank_;
      size_ = o.size_;
    }
    return *this;
  }
  communicator(communicator const&) = delete;
  communicator& operator=(communicator const&) = delete;
  ~communicator() { free(); }

  [[nodiscard]] bool valid() const noexcept { return comm_ != MPI_COMM_NULL; }
  explicit operator bool() const noexcept { return valid(); }
  [[nodiscard]] int rank() const {
    live("rank");
    return rank_;
  }
  [[nodiscard]] int size() const {
    live("size");
    return size_;
  }
  /// The duplicate communicator, for MPI calls headroom does not wrap. Do not free it.
  [[nodiscard]] MPI_Comm get() const { return live("get"); }

  template <class T>
  void all_reduce(std::span<std::type_identity_t<T> const> in, std::span<T> out, reduce_op op, stream_type const& = {}) {
    static_assert(reducible_v<T>, "mpi::communicator::all_reduce: element type cannot be reduced");
    MPI_Comm const c = live("all_reduce");
    expects(in.size() == out.size(), "mpi::communicator::all_reduce: in has ", in.size(), " elements, out has ",
            out.size(), "; expected equal sizes");
    int const count = to_int("all_reduce", in.size());
    bool const in_place = in.data() == out.data();
    check_overlap("all_reduce", in.data(), in.size_bytes(), out.data(), out.size_bytes(), in_place);
    MPI_Op const mop = detail::to_mpi(op);
    if (count == 0) return;
    void const* send = in_place ? MPI_IN_PLACE : static_cast<void const*>(in.data());
    HEADROOM_MPI_TRY(MPI_Allreduce(send, out.data(), count, datatype<T>(), mop, c));
  }

  template <class T>
  void all_gather(std::span<std::type_identity_t<T> const> in, std::span<T> out, stream_type const& = {}) {
    MPI_Comm const c = live("all_gather");
    auto const n = static_cast<std::size_t>(size_);
    expects(out.size() == in.size() * n, "mpi::communicator::all_gather: out has ", out.size(),
            " elements; expected in.size() * size() = ", in.size(), " * ", n, " = ", in.size() * n);
    int const count = to_int("all_gather", in.size());
    to_int("all_gather (out)", out.size());
    bool const in_place = in.data() == out.data() + static_cast<std::size_t>(rank_) * in.size();
    check_overlap("all_gather", in.data(), in.size_bytes(), out.data(), out.size_bytes(), in_place);
    if (count == 0) return;
    void const* send = in_place ? MPI_IN_PLACE : static_cast<void const*>(in.data());
    HEADROOM_MPI_TRY(MPI_Allgather(send, count, datatype<T>(), out.data(), count, datatype<T>(), c));
  }

  template <class T>
  void reduce_scatter(std::span<std::type_identity_t<T> const> in, std::span<T> out, reduce_op op, stream_type const& = {}) {
    static_assert(reducible_v<T>, "mpi::communicator::reduce_scatter: element type cannot be reduced");
    MPI_Comm const c = live("reduce_scatter");
    auto const n = static_cast<std::size_t>(size_);
    expects(in.size() == out.size() * n, "mpi::communicator::reduce_scatter: in has ", in.size(),
            " elements; expected out.size() * size() = ", out.size(), " * ", n, " = ", out.size() * n);
    int const count = to_int("reduce_scatter", out.size());
    to_int("reduce_scatter (in)", in.size());
    // MPI's in-place reduce_scatter reads and writes the whole input; out must be apart from in.
    check_overlap("reduce_scatter", in.data(), in.size_bytes(), out.data(), out.size_bytes(), false);
    MPI_Op const mop = detail::to_mpi(op);
    if (count == 0) return;
    HEADROOM_MPI_TRY(MPI_Reduce_scatter_block(in.data(), out.data(), count, datatype<T>(), mop, c));
  }

  template <class T>
  void broadcast(std::span<T> buffer, int root, stream_type const& = {}) {
    static_assert(!std::is_const_v<T>, "mpi::communicator::broadcast: buffer must be writable");
    MPI_Comm const c = live("broadcast");
    check_rank("broadcast", "root", root);
    int const count = to_int("broadcast", buffer.size());
    if (count == 0) return;
    HEADROOM_MPI_TRY(MPI_Bcast(buffer.data(), count, datatype<T>(), root, c));
  }

  template <class T>
  void send(std::span<T const> data, int peer, stream_type const& = {}) {
    MPI_Comm const c = live("send");
    check_rank("send", "peer", peer);
    int const count = to_int("send", data.size());
    HEADROOM_MPI_TRY(MPI_Send(data.data(), count, datatype<T>(), peer, tag, c));
  }
  template <class T>
    requires(!std::is_const_v<T>)
  void send(std::span<T> data, int peer, stream_type const& s = {}) {
    send(std::span<T const>(data), peer, s);
  }

  /// Receives exactly data.size() elements from `peer`: a shorter or longer message throws
  /// collective_mismatch naming both counts.
  template <class T>
  void recv(std::span<T> data, int peer, stream_type const& = {}) {
    static_assert(!std::is_const_v<T>, "mpi::communicator::recv: buffer must be writable");
    MPI_Comm const c = live("recv");
    check_rank("recv", "peer", peer);
    int const count = to_int("recv", data.size());
    MPI_Status status{};
    HEADROOM_MPI_TRY(MPI_Recv(data.data(), count, datatype<T>(), peer, tag, c, &status));
    check_received<T>("recv", status, count, peer);
  }

  /// Sends `out` to `dst` and receives `in` from `src` without ordering deadlocks (MPI_Sendrecv).
  template <class T>
  void sendrecv(std::span<std::type_identity_t<T> const> out, int dst, std::span<T> in, int src, stream_type const& = {}) {
    MPI_Comm const c = live("sendrecv");
    check_rank("sendrecv", "dst", dst);
    check_rank("sendrecv", "src", src);
    int const send_count = to_int("sendrecv (out)", out.size());
    int const recv_count = to_int("sendrecv (in)", in.size());
    check_overlap("sendrecv", out.data(), out.size_bytes(), in.data(), in.size_bytes(), false);
    MPI_Status status{};
    HEADROOM_MPI_TRY(MPI_Sendrecv(out.data(), send_count, datatype<T>(), dst, tag, in.data(), recv_count,
                                   datatype<T>(), src, tag, c, &status));
    check_received<T>("sendrecv", status, recv_count, src);
  }

  void barrier(stream_type const& = {}) { HEADROOM_MPI_TRY(MPI_Barrier(live("barrier"))); }

  /// MPI_Comm_split. Collective: ranks passing the same `color` (>= 0) form a new communicator
  /// ordered by (key, rank); ranks passing no_color get an empty one.
  [[nodiscard]] communicator split(int color, int key) const {
    MPI_Comm const c = live("split");
    expects(color >= 0 || color == no_color, "mpi::communicator::split: color ", color,
            " must be >= 0 or no_color (", no_color, ")");
    MPI_Comm child = MPI_COMM_NULL;
    HEADROOM_MPI_TRY(MPI_Comm_split(c, color == no_color ? MPI_UNDEFINED : color, key, &child));
    communicator result;
    if (child != MPI_COMM_NULL) {
      result.comm_ = child;  // new communicators inherit the parent's MPI_ERRORS_RETURN
      result.adopt_dup();
    }
    return result;
  }

  /// Same underlying MPI communicator (MPI_IDENT) on the same rank.
  friend bool operator==(communicator const& a, communicator const& b) noexcept { return a.comm_ == b.comm_; }

 private:
  static constexpr int tag = 0x4852;  // "HR"; the communicator is a private dup, so any tag is ours

  void adopt_dup() {
    try {
      detail::check_mpi(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN)",
                        __FILE__, __LINE__);
      detail::check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank", __FILE__, __LINE__);
      detail::check_mpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size", __FILE__, __LINE__);
    } catch (...) {
      free();
      throw;
    }
  }

  void free() noexcept {
    if (comm_ != MPI_COMM_NULL && !is_finalized()) MPI_Comm_free(&comm_);
    comm_ = MPI_COMM_NULL;
  }

  MPI_Comm live(char const* what) const {
    expects<logic_error>(comm_ != MPI_COMM_NULL, "mpi::communicator::", what,
                         ": empty communicator (default-constructed, moved from, or a no_color split)");
    return comm_;
  }
  void check_rank(char const* what, char const* name, int r) const {
    expects(r >= 0 && r < size_, "mpi::communicator::", what, ": ", name, " ", r, " out of range [0, ", size_, ")");
  }
  static int to_int(char const* what, std::size_t count) {
    expects(count <= static_cast<std::size_t>(INT_MAX), "mpi::communicator::", what, ": ", count,
            " elements exceed MPI's int count limit ", INT_MAX);
    return static_cast<int>(count);
  }
  static void check_overlap(char const* what, void const* in, std::size_t in_bytes, void const* out,
                            std::size_t out_bytes, bool exact_in_place) {
    expects(exact_in_place || !detail::ranges_overlap(in, in_bytes, out, out_bytes), "mpi::communicator::", what,
            ": in [", in, ", +", in_bytes, " B) and out [", out, ", +", out_bytes,
            " B) overlap without being the in-place layout");
  }
  template <class T>
  void check_received(char const* what, MPI_Status const& status, int expected, int peer) const {
    int received = 0;
    HEADROOM_MPI_TRY(MPI_Get_count(&status, datatype<T>(), &received));
    expects<collective_mismatch>(received == expected, "mpi::communicator::", what, " on rank ", rank_, ": expected ",
                                 expected, " elements from rank ", peer, ", got ", received);
  }

  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_ = 0;
  int size_ = 0;
};
static_assert(headroom::communicator<communicator>);
static_assert(!std::copyable<communicator> && std::movable<communicator>);

}  // namespace headroom::mpi
