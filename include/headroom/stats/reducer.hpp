// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// Reducers: combine a report across a group of ranks (PP, TP, DP, world) in ONE collective.
//
//   max     1 all_reduce(max, int64): every key's maximum (or minimum, for typed fields that
//           say stats::minimum), exact for int64 over the whole range and for doubles (see
//           detail/order_key.hpp); integer keys stay integers; the input is never changed.
//   gather  1 all_gather(int64): every rank's values, and per key max, min, mean and the rank
//           holding the max (ties -> lowest rank): which pipeline stage is close to OOM.
//   max_to / gather_to   the same collective, the result delivered on one writer rank only
//           (the others get std::nullopt). A rooted reduce would cost the same at this size,
//           and every rank must still learn about a schema mismatch, so nothing is saved by
//           leaving ranks out of the collective.
//
// Nothing happens (no collective, the input comes back) for a group of one rank, for a typed
// report with no fields, and for an empty dynamic report under skip_when_empty.
//
// Safety: the schema hash, key count, writer and a fault block travel in the same collective
// (plan.hpp), so ranks whose reports differ in keys, order or kinds, or name different writers,
// all throw the same error after the collective. No rank throws before it, so none is left
// waiting. A stats::checked_report that holds a bad value (a uint64 above INT64_MAX, a value of
// a wrong type) still joins the collective: every rank then throws invalid_argument naming that
// rank, the key and the value, and the group has done one collective everywhere (usable next).
// The max of a checked_report is a dynamic_report (bools as 0 / 1; checked_report::is_bool).
//
//   stats::reducer<> reduce(stats::reduce_plan(64));      // same plan on every rank
//   auto peak = reduce.max(local_report, pp_comm);        // every rank
//   if (auto peak = reduce.max_to(writer, local_report, pp_comm)) log(*peak);   // writer only
#include <cstdint>
#include <optional>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

#include "headroom/core/communicator.hpp"
#include "headroom/core/error.hpp"
#include "headroom/stats/checked_report.hpp"
#include "headroom/stats/detail/wire.hpp"
#include "headroom/stats/dynamic_report.hpp"
#include "headroom/stats/plan.hpp"
#include "headroom/stats/policies.hpp"
#include "headroom/stats/report.hpp"
#include "headroom/stats/staging.hpp"
#include "headroom/stats/table.hpp"

namespace headroom::stats {

/// What the reducers accept: a typed report, a dynamic_report or a checked_report.
template <class R>
concept reducible_report = typed_report<R> || std::same_as<std::remove_cvref_t<R>, dynamic_report> ||
                           std::same_as<std::remove_cvref_t<R>, checked_report>;

/// What max returns for a report of type R: R itself, or a dynamic_report for a checked_report.
template <class R>
using max_result = std::conditional_t<std::same_as<R, checked_report>, dynamic_report, R>;

namespace detail {
/// The communicator behind a reducer argument passed by reference or by pointer.
template <class C>
using communicator_of = std::remove_cv_t<std::remove_pointer_t<std::remove_cvref_t<C>>>;

/// True when some form of reducer<Staging>::max / gather takes (report, communicator).
template <class Staging, class R, class C>
concept reducer_arguments =
    reducible_report<R> && communicator<communicator_of<C>> && staging_for<Staging, communicator_of<C>>;

// The sentence for the arguments the reducer does not take. Its return type is deduced (and so
// is its callers'), so g++ instantiates it at the call, before any error about the result.
template <class Staging, class R, class C>
constexpr auto reducer_arguments_error() {
  static_assert(reducible_report<R>,
                "stats::reducer::max / gather(report, comm): report is not a stats::report<...> or a "
                "stats::dynamic_report; pack the values into one of those");
  static_assert(!reducible_report<R> || communicator<communicator_of<C>>,
                "stats::reducer::max / gather(report, comm): comm is not a headroom::communicator (a stream_type, "
                "rank(), size(), barrier and the collectives); pass a host::thread_communicator, an MPI or NCCL "
                "communicator, or a type with those members");
  static_assert(!reducible_report<R> || !communicator<communicator_of<C>> ||
                    staging_for<Staging, communicator_of<C>>,
                "stats::reducer<Staging>::max / gather(report, comm): Staging cannot run the collective on this "
                "communicator; stats::host_staging needs host buffers (thread_group, MPI), so use "
                "stats::cuda::blocking_device_staging for a device communicator such as NCCL");
  return 0;
}
}  // namespace detail

template <class Staging = host_staging, nan_policy Nan = propagate_nan, empty_policy Empty = join_when_empty>
class reducer {
 public:
  using staging_type = Staging;
  using nan_type = Nan;
  using empty_type = Empty;

  /// Host buffers for the packed words are sized from the plan here, once; a reducer is meant
  /// to be built once and reused every step (one per thread: calls are not synchronised).
  explicit reducer(reduce_plan plan, Staging staging = Staging{})
      : plan_(plan), staging_(std::move(staging)), send_(plan.max_words()), recv_(plan.max_words()) {}

  [[nodiscard]] reduce_plan const& plan() const noexcept { return plan_; }
  [[nodiscard]] Staging& staging() noexcept { return staging_; }

  /// Every key's max across the group, on every rank.
  template <reducible_report R, communicator C>
    requires staging_for<Staging, C>
  [[nodiscard]] max_result<R> max(R const& r, C& comm, typename C::stream_type const& s = {}) {
    return *run_max(r, comm, s, -1);
  }
  /// As max; a null communicator (not distributed) returns the input.
  template <reducible_report R, communicator C>
    requires staging_for<Staging, C>
  [[nodiscard]] max_result<R> max(R const& r, C* comm, typename C::stream_type const& s = {}) {
    if (comm != nullptr) return max(r, *comm, s);
    check_alone(r, -1, max_name);
    return detail::values_of(r);
  }
  /// As max, delivered on `writer` only (std::nullopt elsewhere). Every rank passes the same writer.
  template <reducible_report R, communicator C>
    requires staging_for<Staging, C>
  [[nodiscard]] std::optional<max_result<R>> max_to(int writer, R const& r, C& comm,
                                                    typename C::stream_type const& s = {}) {
    return run_max(r, comm, s, writer);
  }

  /// Every rank's values and a per-key summary, on every rank.
  template <reducible_report R, communicator C>
    requires staging_for<Staging, C>
  [[nodiscard]] rank_table gather(R const& r, C& comm, typename C::stream_type const& s = {}) {
    return *run_gather(r, comm, s, -1);
  }
  /// As gather; a null communicator gives a one-rank table.
  template <reducible_report R, communicator C>
    requires staging_for<Staging, C>
  [[nodiscard]] rank_table gather(R const& r, C* comm, typename C::stream_type const& s = {}) {
    if (comm != nullptr) return gather(r, *comm, s);
    return local_table(r);
  }
  /// As gather, delivered on `writer` only.
  template <reducible_report R, communicator C>
    requires staging_for<Staging, C>
  [[nodiscard]] std::optional<rank_table> gather_to(int writer, R const& r, C& comm,
                                                    typename C::stream_type const& s = {}) {
    return run_gather(r, comm, s, writer);
  }

  /// Any other (report, communicator): stops at a sentence saying which one is wrong and what to
  /// use, instead of the candidates above failing one by one.
  template <class R, class C, class... Rest>
    requires(!detail::reducer_arguments<Staging, R, C>)
  auto max(R const&, C&&, Rest&&...) {
    return detail::reducer_arguments_error<Staging, R, C>();
  }
  template <class R, class C, class... Rest>
    requires(!detail::reducer_arguments<Staging, R, C>)
  auto max_to(int, R const&, C&&, Rest&&...) {
    return detail::reducer_arguments_error<Staging, R, C>();
  }
  template <class R, class C, class... Rest>
    requires(!detail::reducer_arguments<Staging, R, C>)
  auto gather(R const&, C&&, Rest&&...) {
    return detail::reducer_arguments_error<Staging, R, C>();
  }
  template <class R, class C, class... Rest>
    requires(!detail::reducer_arguments<Staging, R, C>)
  auto gather_to(int, R const&, C&&, Rest&&...) {
    return detail::reducer_arguments_error<Staging, R, C>();
  }

 private:
  static constexpr char const* max_name = "stats::reducer::max";
  static constexpr char const* gather_name = "stats::reducer::gather";

  template <class R>
  [[nodiscard]] static bool nothing_to_send(R const& r) {
    if constexpr (typed_report<R>) return R::empty();
    else return Empty::skips && r.empty() && detail::fault_of(r) == nullptr;
  }

  // One rank: no collective; the same checks as the group would make, done locally.
  template <class R>
  void check_alone(R const& r, int writer, char const* what) const {
    if (auto const* f = detail::fault_of(r))
      throw invalid_argument(headroom::detail::concat(what, ": this rank has a value that is not a statistic (",
                                                      f->sentence(), ")"));
    std::size_t const n = detail::report_access<R>::size(r);
    expects<capacity_error>(n <= plan_.capacity(), what, ": the report has ", n, " keys but the reduce_plan holds ",
                            plan_.capacity());
    expects(writer == -1 || writer == 0, what, ": writer rank ", writer, " out of range [0, 1)");
  }

  template <class R, class C>
  std::optional<max_result<R>> run_max(R const& r, C& comm, typename C::stream_type const& s, int writer) {
    if (nothing_to_send(r)) return detail::values_of(r);
    int const size = comm.size();
    if (size == 1) {
      check_alone(r, writer, max_name);
      return detail::values_of(r);
    }
    int const rank = comm.rank();
    std::span<std::int64_t> const words(send_.data(), plan_.max_words());
    std::span<std::int64_t> const result(recv_.data(), plan_.max_words());
    detail::pack_max(r, writer, Nan::propagates, words, rank);
    staging_.all_reduce_max(comm, std::span<std::int64_t const>(words), result, s);
    int const agreed_writer =
        detail::check_max_header(r, std::span<std::int64_t const>(result), plan_.capacity(), rank, size, max_name);
    if (agreed_writer != -1 && agreed_writer != rank) return std::nullopt;
    return detail::unpack_max(r, std::span<std::int64_t const>(result));
  }

  template <class R, class C>
  std::optional<rank_table> run_gather(R const& r, C& comm, typename C::stream_type const& s, int writer) {
    if (nothing_to_send(r)) return rank_table();
    int const size = comm.size();
    if (size == 1) {
      check_alone(r, writer, gather_name);
      return local_table(r);
    }
    int const rank = comm.rank();
    std::size_t const per_rank = plan_.gather_words_per_rank();
    std::size_t const total = plan_.gather_words(size);
    if (gather_recv_.size() < total) gather_recv_.resize(total);
    std::span<std::int64_t> const words(send_.data(), per_rank);
    std::span<std::int64_t> const all(gather_recv_.data(), total);
    detail::pack_gather(r, writer, words, rank);
    staging_.all_gather(comm, std::span<std::int64_t const>(words), all, s);
    std::span<std::int64_t const> const view(all);
    int const agreed_writer = detail::check_gather_headers(r, view, per_rank, plan_.capacity(), rank, size, gather_name);
    if (agreed_writer != -1 && agreed_writer != rank) return std::nullopt;
    return detail::unpack_gather(r, view, per_rank, size, Nan::propagates);
  }

  template <class R>
  [[nodiscard]] rank_table local_table(R const& r) const {
    std::vector<std::int64_t> words(plan_.gather_words_per_rank());
    check_alone(r, -1, gather_name);
    detail::pack_gather(r, -1, std::span<std::int64_t>(words));
    return detail::unpack_gather(r, std::span<std::int64_t const>(words), words.size(), 1, Nan::propagates);
  }

  reduce_plan plan_;
  Staging staging_;
  std::vector<std::int64_t> send_;         // max_words >= gather_words_per_rank
  std::vector<std::int64_t> recv_;
  std::vector<std::int64_t> gather_recv_;  // grown to the group size on first gather
};

// ---- one-call forms for communicators over host memory (thread_group, MPI) -----------------

/// Every field's max (or min) of a typed report across the group; the plan is the report's size.
template <typed_report R, host_buffer_communicator C>
[[nodiscard]] R max(R const& r, C& comm, typename C::stream_type const& s = {}) {
  return reducer<>(reduce_plan::for_report<R>()).max(r, comm, s);
}
/// Every key's max of a dynamic report; `plan` must be the same on every rank.
template <host_buffer_communicator C>
[[nodiscard]] dynamic_report max(dynamic_report const& r, C& comm, reduce_plan const& plan,
                                 typename C::stream_type const& s = {}) {
  return reducer<>(plan).max(r, comm, s);
}
template <typed_report R, host_buffer_communicator C>
[[nodiscard]] rank_table gather(R const& r, C& comm, typename C::stream_type const& s = {}) {
  return reducer<>(reduce_plan::for_report<R>()).gather(r, comm, s);
}
template <host_buffer_communicator C>
[[nodiscard]] rank_table gather(dynamic_report const& r, C& comm, reduce_plan const& plan,
                                typename C::stream_type const& s = {}) {
  return reducer<>(plan).gather(r, comm, s);
}

}  // namespace headroom::stats
