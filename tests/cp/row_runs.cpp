// SPDX-License-Identifier: Apache-2.0
// row_runs: the runs the CUDA split / reorder pass to their kernel expand to exactly the rows of
// the partition's index (local_index, gather_index), are the fewest such runs, and are refused
// (false) only when that fewest number exceeds the capacity.
#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "headroom/cp/partition.hpp"
#include "headroom/cp/row_runs.hpp"
#include "random_batch.hpp"

using namespace headroom;
using cp::contiguous;
using cp::dual_chunk;
using cp::partition;
using cp::row_runs;
using i64 = std::int64_t;

namespace {

/// The fewest runs of consecutive rows an index splits into.
i64 fewest_runs(std::vector<i64> const& index) {
  i64 n = index.empty() ? 0 : 1;
  for (std::size_t t = 1; t < index.size(); ++t) n += index[t] != index[t - 1] + 1;
  return n;
}

/// `runs` (when built) expands to `index`, with the fewest runs; otherwise that number is over
/// the capacity.
void check_runs(bool built, row_runs const& runs, std::vector<i64> const& index, std::string const& what) {
  CAPTURE(what);
  i64 const fewest = fewest_runs(index);
  if (!built) {
    CHECK(fewest > row_runs::capacity);
    return;
  }
  REQUIRE(runs.rows == static_cast<i64>(index.size()));
  CHECK(runs.count == fewest);
  CHECK(runs.count <= row_runs::capacity);
  for (int i = 0; i < runs.count; ++i) {
    i64 const end = i + 1 < runs.count ? runs.begin[i + 1] : runs.rows;
    CHECK(runs.begin[i] < end);  // no empty run
  }
  bool all = true;
  for (i64 t = 0; t < runs.rows; ++t) all = all && runs.source(t) == index[static_cast<std::size_t>(t)];
  CHECK(all);
}

template <class L>
void check_layout(std::mt19937_64& gen, int max_sequences, int max_len) {
  for (int cp_size : {1, 2, 3, 4, 8}) {
    auto const pad = cp_test::random_padding<L>(gen, cp_size, max_sequences, max_len);
    for (int rank = 0; rank < cp_size; ++rank) {
      partition<L> const p(std::span<i64 const>(pad.padded_cu_seqlens()), cp_size, rank);
      std::string const what = std::string(L::name) + ", cp " + std::to_string(cp_size) + ", rank " +
                               std::to_string(rank) + ", " + std::to_string(p.sequences()) + " sequences";
      row_runs runs;
      bool const split_built = cp::split_runs(p, runs);
      check_runs(split_built, runs, p.local_index(), "split, " + what);
      bool const order_built = cp::sequence_order_runs(p, runs);
      check_runs(order_built, runs, p.gather_index(), "sequence order, " + what);
    }
  }
}

}  // namespace

TEST_CASE("runs expand to the partition's index: small batches, both layouts") {
  std::mt19937_64 gen(7);
  for (int trial = 0; trial < 200; ++trial) {
    check_layout<dual_chunk>(gen, 12, 40);
    check_layout<contiguous>(gen, 12, 40);
  }
}

TEST_CASE("more runs than fit: refused, never truncated") {
  std::mt19937_64 gen(11);
  for (int trial = 0; trial < 20; ++trial) {
    check_layout<dual_chunk>(gen, 300, 64);  // up to 600 split runs, 4800 reorder runs at cp = 8
    check_layout<contiguous>(gen, 300, 64);
  }
  // dual_chunk, cp = 4, rank 1: each non-empty sequence is two runs that continue nothing, so
  // 65 sequences are 130 runs, over the 128 that fit.
  std::vector<i64> cu{0};
  for (int s = 0; s < 65; ++s) cu.push_back(cu.back() + 16);
  partition<dual_chunk> const p(std::span<i64 const>(cu), 4, 1);
  row_runs runs;
  CHECK_FALSE(cp::split_runs(p, runs));
  // 64 sequences fit exactly: 128 runs.
  cu.pop_back();
  partition<dual_chunk> const q(std::span<i64 const>(cu), 4, 1);
  CHECK(cp::split_runs(q, runs));
  CHECK(runs.count == 128);
}

TEST_CASE("the last rank's two chunks of a sequence are one run; cp = 1 is one run") {
  std::vector<i64> const cu{0, 8, 24};
  row_runs runs;
  REQUIRE(cp::split_runs(partition<dual_chunk>(std::span<i64 const>(cu), 2, 1), runs));
  CHECK(runs.count == 2);  // chunks 1 and 2 of each sequence are adjacent
  REQUIRE(cp::split_runs(partition<dual_chunk>(std::span<i64 const>(cu), 1, 0), runs));
  CHECK(runs.count == 1);
  REQUIRE(cp::sequence_order_runs(partition<contiguous>(std::span<i64 const>(cu), 4, 0), runs));
  CHECK(runs.count == 1);
  CHECK(runs.source(23) == 23);
}
