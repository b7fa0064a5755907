// SPDX-License-Identifier: Apache-2.0
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
//   max:    1 all_reduce(max, int64) of max_words() = 6 + 24 + capacity
//           header: schema hash, ~hash, key count, ~count, writer, ~writer (max of ~x is ~min x,
//           so one max gives every rank both the max and the min of each header word), then
//           the fault block
//   gather: 1 all_gather(int64) of gather_words_per_rank() = 3 + 24 + capacity per rank
//           header: schema hash, key count, writer, then the fault block
//   fault block: fault_words words, INT64_MIN on a rank whose input is valid; on a rank whose
//           input is not (checked_report), its rank and the sentence naming the key and value
//           (detail/wire.hpp), so the collective that carries the data also tells every rank
//           that a rank's input was bad, which rank, and why.
#include <cstddef>
#include <cstdint>
#include <ostream>

#include "headroom/core/bytes.hpp"
#include "headroom/core/error.hpp"
#include "headroom/stats/report.hpp"

namespace headroom::stats {

class reduce_plan {
 public:
  /// Words of the fault block, and the bytes of the fault's sentence they carry.
  static constexpr std::size_t fault_words = 24;
  static constexpr std::size_t fault_text_bytes = fault_words * 5;
  static constexpr std::size_t max_header_words = 6 + fault_words;
  static constexpr std::size_t gather_header_words = 3 + fault_words;
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
