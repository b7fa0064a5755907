#pragma once
#include "headroom/core/require_cxx20.hpp"
// reduce_plan: the wire layout of one reduction, fixed before anything is allocated (query first).
//
// Every rank sends the same number of words whatever its report holds: a header, then
// `capacity` value slots. A fixed size is what lets a rank with a different (or empty) report
// still meet the others in the one collective and learn about the mismatch there, instead of
// calling a collective of another size (a hang on NCCL and MPI). So the plan must be the same
// on every rank: build it from a constant, or from the typed report's size.
//
//   max:    1 all_reduce(max, int64) of max_words() = 6 + capacity
//           header: schema hash, ~hash, key count, ~count, writer, ~writer (max of ~x is ~min x,
//           so one max gives every rank both the max and the min of each header word)
//   gather: 1 all_gather(int64) of gather_words_per_rank() = 3 + capacity per rank
//           header: schema hash, key count, writer
#include <cstddef>
#include <cstdint>
#include <ostream>

#include "headroom/core/bytes.hpp"
#include "headroom/core/error.hpp"
#include "headroom/stats/report.hpp"

namespace headroom::stats {

class reduce_plan {
 public:
  static constexpr std::size_t max_header_words = 6;
  static constexpr std::size_t gather_header_words = 3;
  /// The most value slots a plan may have (the wire holds counts as int64; 2^24 keys is far
  /// beyond any report and keeps buffer sizes from overflowing).
  static constexpr std::size_t max_capacity = std::size_t{1} << 24;

  /// A plan with room for `capacity` keys.
  explicit reduce_plan(std::size_t capacity) : capacity_(capacity) {
    expects(capacity <= max_capacity, "stats::reduce_plan: capacity ", capacity, " keys exceeds the maximum ",
            max_capacity);
  }
  /// The plan of a typed report: capacity = its number of fields.
  template <typed_report R>
  [[nodiscard]] static reduce_plan for_report() {
    return reduce_plan(R::size());
  }

  [[nodiscard]] std::size_t capacity() const noexcept { return capacity_; }
  [[nodiscard]] std::size_t max_words() const noexcept { return max_header_words + capacity_; }
  [[nodiscard]] std::size_t gather_words_per_rank() const noexcept { return gather_header_words + capacity_; }
  [[nodiscard]] std::size_t gather_words(int ranks) const {
    expects(ranks >= 1, "stats::reduce_plan::gather_words: ranks ", ranks, ", expected >= 1");
    return gather_words_per_rank() * static_cast<std::size_t>(ranks);
  }
  [[nodiscard]] std::size_t max_bytes() const noexcept { return max_words() * sizeof(std::int64_t); }
  [[nodiscard]] std::size_t gather_bytes(int ranks) const { return gather_words(ranks) * sizeof(std::int64_t); }

  friend bool operator==(reduce_plan const&, reduce_plan const&) = default;

  friend std::ostream& operator<<(std::ostream& os, reduce_plan const& p) {
    return os << "stats::reduce_plan{capacity " << p.capacity_ << " keys; max: 1 all_reduce(max, int64) of "
              << p.max_words() << " words (" << format_bytes(p.max_bytes()) << "); gather: 1 all_gather(int64) of "
              << p.gather_words_per_rank() << " words per rank}";
  }

 private:
  std::size_t capacity_;
};

}  // namespace headroom::stats
