// SPDX-License-Identifier: Apache-2.0
// headroom._cuda plan: the host half (validation and sizes); no CUDA here.
#include "plan.hpp"

#include <utility>

#include "headroom/core/error.hpp"

namespace headroom::python::cuda_ext {

plan::plan(std::span<std::int64_t const> padded_cu, int cp_size, int cp_rank, std::string_view layout)
    : partition_(make_partition(padded_cu, cp_size, cp_rank, layout)) {}

plan plan::from_raw(std::span<std::int64_t const> raw_cu, int cp_size, int cp_rank, std::string_view layout, int tp,
                    std::int64_t extra, std::int64_t total_multiple) {
  return with_layout(layout, [&](auto tag) {
    using L = decltype(tag);
    cp::padding pd(raw_cu, cp::alignment_for<L>(cp_size, tp, extra), total_multiple);
    cp::partition<L> p(pd.padded_cu_seqlens(), cp_size, cp_rank);
    return plan(any_partition{std::move(p)}, std::move(pd));
  });
}

// Not the device boundaries: they are a tensor the caller keeps alive for this plan, and the
// new plan may outlive it (a launch would read freed device memory). set_device_cu again.
plan plan::for_rank(int rank) const {
  return partition_.visit([&](auto const& p) { return plan(any_partition{p.for_rank(rank)}, padding_); });
}

int plan::cp_size() const {
  return partition_.visit([](auto const& p) { return p.cp_size(); });
}
int plan::cp_rank() const {
  return partition_.visit([](auto const& p) { return p.cp_rank(); });
}
std::string_view plan::layout() const { return layout_name(partition_); }
std::int64_t plan::sequences() const {
  return partition_.visit([](auto const& p) { return p.sequences(); });
}
std::int64_t plan::global_rows() const {
  return partition_.visit([](auto const& p) { return p.global_rows(); });
}
std::int64_t plan::local_rows() const {
  return partition_.visit([](auto const& p) { return p.local_rows(); });
}
std::int64_t plan::raw_rows() const { return padding("headroom._cuda.Plan.raw_rows").raw_rows(); }
std::int64_t plan::raw_sequences() const { return padding("headroom._cuda.Plan.raw_sequences").raw_sequences(); }

std::vector<std::int64_t> plan::padded_cu_seqlens() const {
  return partition_.visit([](auto const& p) {
    auto const s = p.global_cu_seqlens();
    return std::vector<std::int64_t>(s.begin(), s.end());
  });
}
std::vector<std::int64_t> plan::local_cu_seqlens() const {
  return partition_.visit([](auto const& p) {
    auto const s = p.local_cu_seqlens();
    return std::vector<std::int64_t>(s.begin(), s.end());
  });
}
std::vector<std::int64_t> plan::raw_cu_seqlens() const {
  auto const& pd = padding("headroom._cuda.Plan.raw_cu_seqlens");
  auto const s = pd.raw_cu_seqlens();
  // The padding keeps an entry for the dummy sequence it may append; the caller's array has none.
  return std::vector<std::int64_t>(s.begin(), s.begin() + pd.raw_sequences() + 1);
}

std::string plan::describe() const {
  std::string out = partition_.visit([](auto const& p) { return p.describe(); });
  if (padding_) out += " from " + padding_->describe();
  return out;
}

void plan::set_device_cu(device_boundaries cu) {
  expects(cu.index_bytes == 4 || cu.index_bytes == 8, "headroom._cuda.Plan.set_device_cu: entries of ", cu.index_bytes,
          " bytes, expected int32 (4) or int64 (8)");
  expects(cu.size == sequences() + 1, "headroom._cuda.Plan.set_device_cu: ", cu.size, " entries, the plan has ",
          sequences() + 1, " padded boundaries");
  expects(cu.data != 0, "headroom._cuda.Plan.set_device_cu: null device pointer");
  device_cu_ = cu;
}
void plan::set_device_raw_cu(device_boundaries cu) {
  auto const& pd = padding("headroom._cuda.Plan.set_device_raw_cu");
  expects(cu.index_bytes == 4 || cu.index_bytes == 8, "headroom._cuda.Plan.set_device_raw_cu: entries of ",
          cu.index_bytes, " bytes, expected int32 (4) or int64 (8)");
  expects(cu.size == pd.raw_sequences() + 1, "headroom._cuda.Plan.set_device_raw_cu: ", cu.size,
          " entries, the plan has ", pd.raw_sequences() + 1, " raw boundaries");
  expects(cu.data != 0, "headroom._cuda.Plan.set_device_raw_cu: null device pointer");
  device_raw_cu_ = cu;
}

cp::padding const& plan::padding(char const* op) const {
  expects<logic_error>(padding_.has_value(), op, ": this plan was built from padded cu_seqlens; build it with Plan.from_raw");
  return *padding_;
}
device_boundaries plan::device_cu(char const* op) const {
  expects<logic_error>(device_cu_.data != 0, op, ": no device cu_seqlens; call set_device_cu first");
  return device_cu_;
}
device_boundaries plan::device_raw_cu(char const* op) const {
  expects<logic_error>(device_raw_cu_.data != 0, op, ": no device raw cu_seqlens; call set_device_raw_cu first");
  return device_raw_cu_;
}

}  // namespace headroom::python::cuda_ext
