// SPDX-License-Identifier: Apache-2.0
#pragma once
#include "headroom/core/require_cxx20.hpp"
// gather_output: what the last pipeline stage does with its CP-local output. The policy is a
// template parameter, so an engine picks it once and the memory cost is visible in the type.
//
//   gather_output::full       every rank gets the whole [T, width] tensor in sequence order.
//                             Costs cp x the local output plus a [T, width] workspace (37 GiB per
//                             rank of logits at 128K tokens x 151,936 bf16, AReaL #1223).
//   gather_output::none       keep the local shard and its local cu_seqlens; compute the loss on
//                             it and normalise with cp::normalize_loss over CP x DP (AReaL #1223).
//   gather_output::per_token  compute small per-token vectors (log-probs, entropy) from the local
//                             shard, then gather only those (AReaL #1249, Megatron RL #5882).
//
// Query first: plan_output<G>(partition, width, element bytes) says how many bytes the caller's
// output buffer and the temporary workspace take, and prints itself; collect_output<G> is the
// one entry point, called by every CP rank on the last stage.
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "headroom/core/bytes.hpp"
#include "headroom/core/communicator.hpp"
#include "headroom/core/resource.hpp"
#include "headroom/cp/gather.hpp"
#include "headroom/cp/matrix.hpp"
#include "headroom/cp/partition.hpp"
#include "headroom/host/aligned_resource.hpp"

namespace headroom::cp {

namespace gather_output {
struct full {
  static constexpr std::string_view name = "full";
};
struct none {
  static constexpr std::string_view name = "none";
};
struct per_token {
  static constexpr std::string_view name = "per_token";
};
}  // namespace gather_output

template <class G>
concept gather_output_policy = std::same_as<G, gather_output::full> || std::same_as<G, gather_output::none> ||
                               std::same_as<G, gather_output::per_token>;
static_assert(gather_output_policy<gather_output::full> && gather_output_policy<gather_output::none> &&
              gather_output_policy<gather_output::per_token>);

/// Sizes of one last-stage output under a policy, before anything is allocated.
struct output_plan {
  std::string_view policy;
  int cp_size = 1;
  std::int64_t local_rows = 0;
  std::int64_t global_rows = 0;
  std::int64_t width = 0;      // of what is handed on: the model output (full, none) or per-token vectors
  std::size_t elem_bytes = 0;  // of the same
  std::int64_t result_rows = 0;          // rows of the stage's result on this rank
  std::size_t output_buffer_bytes = 0;   // the caller provides this buffer (0 for none: the result is the shard)
  std::size_t workspace_bytes = 0;       // taken from the resource during collect_output, freed before it returns

  /// Bytes this rank holds beyond its local model output while the stage runs.
  [[nodiscard]] std::size_t extra_bytes() const noexcept { return output_buffer_bytes + workspace_bytes; }

  [[nodiscard]] std::string describe() const {
    std::ostringstream os;
    os << "cp::output_plan<" << policy << ">{cp " << cp_size << ", result [" << result_rows << ", " << width << "] x "
       << elem_bytes << " B, output buffer " << format_bytes(output_buffer_bytes) << ", workspace "
       << format_bytes(workspace_bytes) << "}";
    return os.str();
  }
  friend std::ostream& operator<<(std::ostream& os, output_plan const& p) { return os << p.describe(); }
};

/// Knobs of collect_output that change its memory, so plan_output takes them too.
struct output_options {
  /// Bound the gather's rank-major workspace to this many rows (whole sequences per chunk, one
  /// all-gather each; at least the longest padded sequence). 0: one all-gather, [T, width].
  std::int64_t max_workspace_rows = 0;
};

/// `width` and `elem_bytes` describe the model output for full / none, and the per-token
/// vectors for per_token.
template <gather_output_policy G, layout_policy L>
[[nodiscard]] output_plan plan_output(partition<L> const& p, std::int64_t width, std::size_t elem_bytes,
                                      output_options const& opts = {}) {
  expects(width >= 1, "cp::plan_output: width = ", width, ", expected >= 1");
  expects(elem_bytes >= 1, "cp::plan_output: elem_bytes = ", elem_bytes, ", expected >= 1");
  output_plan plan{G::name, p.cp_size(), p.local_rows(), p.global_rows(), width, elem_bytes};
  char const* op = "cp::plan_output";
  auto const row = checked_mul(static_cast<std::size_t>(width), elem_bytes, op, " row bytes: width x elem_bytes");
  auto const rows_bytes = [&](std::int64_t rows, char const* what) { return detail::rows_bytes(rows, row, op, what); };
  if constexpr (std::same_as<G, gather_output::none>) {
    plan.result_rows = p.local_rows();
  } else {
    plan.result_rows = p.global_rows();
    plan.output_buffer_bytes = rows_bytes(p.global_rows(), "output buffer");
    plan.workspace_bytes = rows_bytes(gather_workspace_rows(p, opts.max_workspace_rows), "workspace");
    if constexpr (std::same_as<G, gather_output::per_token>) {
      auto const vectors = rows_bytes(p.local_rows(), "local per-token vectors");
      expects<capacity_error>(plan.workspace_bytes <= SIZE_MAX - vectors, op, ": workspace ", plan.workspace_bytes,
                              " + local per-token vectors ", vectors, " bytes overflow 64-bit arithmetic");
      plan.workspace_bytes += vectors;
    }
  }
  expects<capacity_error>(plan.output_buffer_bytes <= SIZE_MAX - plan.workspace_bytes, op, ": output buffer ",
                          plan.output_buffer_bytes, " + workspace ", plan.workspace_bytes,
                          " bytes overflow 64-bit arithmetic");
  return plan;
}

/// The result of collect_output: rows in sequence order with their boundaries.
template <class T>
struct stage_output {
  matrix_view<T> rows;
  std::span<std::int64_t const> cu_seqlens;  // local (none) or global padded (full, per_token)
  bool local = false;                        // true: rows are this rank's shard (gather_output::none)
};

/// Marks "no per-token function" for the full and none policies.
struct no_per_token {};

namespace detail {
/// A temporary from a stream-ordered resource, returned on the same stream at scope exit.
template <class R, class S>
class scoped_buffer {
 public:
  scoped_buffer(R& mr, S const& s, std::size_t bytes) : mr_(mr), s_(s), bytes_(bytes), p_(mr.allocate(s, bytes, default_alignment)) {}
  scoped_buffer(scoped_buffer const&) = delete;
  scoped_buffer& operator=(scoped_buffer const&) = delete;
  ~scoped_buffer() { mr_.deallocate(s_, p_, bytes_, default_alignment); }
  template <class T>
  [[nodiscard]] matrix_view<T> as(std::int64_t rows, std::int64_t width) const {
    return {static_cast<T*>(p_), rows, width};
  }

 private:
  R& mr_;
  S s_;
  std::size_t bytes_;
  void* p_;
};
}  // namespace detail

/// The last stage's single entry point, on host memory with a host-memory communicator.
///   full:      out is [global_rows, width] of T; returns it.
///   none:      out is ignored (pass {}); returns the local shard and the local cu_seqlens.
///   per_token: per_token(local, local_vectors) fills [local_rows, out.width] of U from the local
///              shard; those vectors are gathered into out, [global_rows, out.width].
/// The workspace (plan_output(...).workspace_bytes) comes from `mr` and is returned on `s`.
template <gather_output_policy G, communicator C, layout_policy L, row_element T, row_element U = T,
          class R = host::aligned_resource, class Fn = no_per_token>
  requires stream_resource<std::remove_cvref_t<R>, typename C::stream_type>
auto collect_output(C& comm, partition<L> const& p, matrix_view<T const> local, matrix_view<U> out, R&& mr = R{},
                    typename C::stream_type const& s = {}, Fn&& per_token = {}, output_options const& opts = {}) {
  if constexpr (std::same_as<G, gather_output::none>) {
    static_cast<void>(out), static_cast<void>(mr), static_cast<void>(s), static_cast<void>(opts);
    detail::expect_group(comm, p, "cp::collect_output<none>");
    detail::expect_shape(local, p.local_rows(), local.width, "cp::collect_output<none>", "local output");
    return stage_output<T const>{local, p.local_cu_seqlens(), true};
  } else if constexpr (std::same_as<G, gather_output::full>) {
    static_assert(std::same_as<T, U>, "gather_output::full gathers the model output itself: out must have its element type");
    std::int64_t const ws_rows = gather_workspace_rows(p, opts.max_workspace_rows);
    detail::scoped_buffer<std::remove_reference_t<R>, typename C::stream_type> w(
        mr, s, detail::rows_bytes(ws_rows, local.row_bytes(), "cp::collect_output<full>", "workspace"));
    gather(comm, p, local, out, w.template as<T>(ws_rows, local.width), s);
    return stage_output<U>{out, p.global_cu_seqlens(), false};
  } else {
    static_assert(!std::same_as<std::remove_cvref_t<Fn>, no_per_token>,
                  "gather_output::per_token needs a function (local rows, local per-token vectors)");
    static_assert(std::invocable<Fn&, matrix_view<T const>, matrix_view<U>>,
                  "the per-token function must accept (matrix_view<T const> local, matrix_view<U> vectors)");
    char const* op = "cp::collect_output<per_token>";
    // Agree before running the per-token function, so no rank computes and then waits alone.
    detail::agree_before_collective(comm, detail::batch_fingerprint(p, local.width, sizeof(T)), s, op, [&] {
      detail::expect_group(comm, p, op);
      detail::expect_shape(local, p.local_rows(), local.width, op, "local output");
      detail::expect_shape(out, p.global_rows(), out.width, op, "per-token output");
    });
    auto const row = out.row_bytes();
    detail::scoped_buffer<std::remove_reference_t<R>, typename C::stream_type> vec(
        mr, s, detail::rows_bytes(p.local_rows(), row, op, "local per-token vectors"));
    std::int64_t const ws_rows = gather_workspace_rows(p, opts.max_workspace_rows);
    detail::scoped_buffer<std::remove_reference_t<R>, typename C::stream_type> w(
        mr, s, detail::rows_bytes(ws_rows, row, op, "workspace"));
    auto const vectors = vec.template as<U>(p.local_rows(), out.width);
    std::invoke(per_token, local, vectors);
    gather(comm, p, matrix_view<U const>(vectors), out, w.template as<U>(ws_rows, out.width), s);
    return stage_output<U>{out, p.global_cu_seqlens(), false};
  }
}

}  // namespace headroom::cp
