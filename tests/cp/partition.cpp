// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <cstdint>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "common/throws.hpp"
#include "headroom/cp/partition.hpp"
#include "headroom/cp/padding.hpp"

using namespace headroom;
using headroom_test::throws_with;
using cp::contiguous;
using cp::dual_chunk;
using cp::partition;
using i64 = std::int64_t;

namespace {
template <class L, class I>
std::vector<i64> index_of(std::vector<I> const& cu, int cp_size, int rank) {
  return partition<L>(cu, cp_size, rank).local_index();
}
std::vector<i64> v(std::initializer_list<i64> x) { return x; }
}  // namespace

TEST_CASE("docs/cp.md worked example: cp=2, cu_seqlens [0,8,20] (int32 and int64 alike)") {
  std::vector<std::int32_t> cu32{0, 8, 20};
  std::vector<std::int64_t> cu64{0, 8, 20};
  for (int r : {0, 1}) CHECK(index_of<dual_chunk>(cu32, 2, r) == index_of<dual_chunk>(cu64, 2, r));
  CHECK(index_of<dual_chunk>(cu32, 2, 0) == v({0, 1, 6, 7, 8, 9, 10, 17, 18, 19}));
  CHECK(index_of<dual_chunk>(cu32, 2, 1) == v({2, 3, 4, 5, 11, 12, 13, 14, 15, 16}));
  partition<> p(cu32, 2, 1);
  CHECK(p.local_rows() == 10);
  CHECK(p.global_rows() == 20);
  CHECK(p.sequences() == 2);
  CHECK(std::vector<i64>(p.local_cu_seqlens().begin(), p.local_cu_seqlens().end()) == v({0, 4, 10}));
  // AReaL's _build_cp_reassemble_indices([0,8,20], 2) == argsort(cat(idx_r0, idx_r1)).
  CHECK(p.gather_index() == v({0, 1, 10, 11, 12, 13, 2, 3, 4, 5, 6, 14, 15, 16, 17, 18, 19, 7, 8, 9}));
  CHECK(p.source_row(4) == 11);
  CHECK(p.owner(11).rank == 1);
  CHECK(p.owner(11).local_row == 4);
  CHECK(p.locate(4).sequence == 1);
}

TEST_CASE("reference: cp=4, cu_seqlens [0,8,24]") {
  std::vector<int> cu{0, 8, 24};
  CHECK(index_of<dual_chunk>(cu, 4, 0) == v({0, 7, 8, 9, 22, 23}));
  CHECK(index_of<dual_chunk>(cu, 4, 1) == v({1, 6, 10, 11, 20, 21}));
  CHECK(index_of<dual_chunk>(cu, 4, 2) == v({2, 5, 12, 13, 18, 19}));
  CHECK(index_of<dual_chunk>(cu, 4, 3) == v({3, 4, 14, 15, 16, 17}));
}

TEST_CASE("reference: TE thd_get_partitioned_indices([0,8,16], 16, 2, r)") {
  std::vector<int> cu{0, 8, 16};
  CHECK(index_of<dual_chunk>(cu, 2, 0) == v({0, 1, 6, 7, 8, 9, 14, 15}));
  CHECK(index_of<dual_chunk>(cu, 2, 1) == v({2, 3, 4, 5, 10, 11, 12, 13}));
}

TEST_CASE("Megatron per-sequence balancing: one sequence, rank r gets chunks r and 2cp-1-r") {
  std::mt19937_64 gen(11);
  for (int cp_size : {1, 2, 3, 4, 8}) {
    i64 const c = 1 + static_cast<i64>(gen() % 7);
    i64 const s = 2 * cp_size * c;
    std::vector<i64> cu{0, s};
    for (int r = 0; r < cp_size; ++r) {
      std::vector<i64> expect;
      for (i64 i = r * c; i < (r + 1) * c; ++i) expect.push_back(i);
      for (i64 i = (2 * cp_size - 1 - r) * c; i < (2 * cp_size - r) * c; ++i) expect.push_back(i);
      if (cp_size == 1) {
        expect.resize(static_cast<std::size_t>(s));
        std::iota(expect.begin(), expect.end(), 0);
      }
      CHECK(index_of<dual_chunk>(cu, cp_size, r) == expect);
    }
  }
}

TEST_CASE("cp=1 is the identity, for odd lengths too") {
  std::vector<int> cu{0, 3, 10, 10, 17};
  partition<> p(cu, 1, 0);
  std::vector<i64> id(17);
  std::iota(id.begin(), id.end(), 0);
  CHECK(p.local_index() == id);
  CHECK(p.gather_index() == id);
}

TEST_CASE("contiguous layout: rank r holds rows [r*T/cp, (r+1)*T/cp), boundaries clipped") {
  std::vector<int> cu{0, 8, 20};
  partition<contiguous> p0(cu, 2, 0), p1(cu, 2, 1);
  CHECK(p0.local_index() == v({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  CHECK(p1.local_index() == v({10, 11, 12, 13, 14, 15, 16, 17, 18, 19}));
  CHECK(std::vector<i64>(p0.local_cu_seqlens().begin(), p0.local_cu_seqlens().end()) == v({0, 8, 10}));
  CHECK(std::vector<i64>(p1.local_cu_seqlens().begin(), p1.local_cu_seqlens().end()) == v({0, 0, 10}));
  CHECK(p1.locate(0).sequence == 1);
  std::vector<i64> id(20);
  std::iota(id.begin(), id.end(), 0);
  CHECK(p0.gather_index() == id);  // gather is a plain all-gather
}

TEST_CASE("property: every layout is a bijection between local rows of all ranks and global rows") {
  std::mt19937_64 gen(5);
  for (int trial = 0; trial < 40; ++trial) {
    int const cp_size = 1 << (trial % 4);
    std::vector<i64> cu{0};
    int const nseq = 1 + static_cast<int>(gen() % 12);
    for (int i = 0; i < nseq; ++i) cu.push_back(cu.back() + 2 * cp_size * static_cast<i64>(gen() % 6));  // empty ones too
    if (cu.back() == 0) cu.back() = 2 * cp_size;
    for (int layout = 0; layout < 2; ++layout) {
      std::multiset<i64> seen;
      for (int r = 0; r < cp_size; ++r) {
        std::vector<i64> idx = layout == 0 ? index_of<dual_chunk>(cu, cp_size, r) : index_of<contiguous>(cu, cp_size, r);
        CHECK(static_cast<i64>(idx.size()) == cu.back() / cp_size);
        for (std::size_t t = 0; t < idx.size(); ++t) {
          seen.insert(idx[t]);
          auto const o = layout == 0 ? partition<dual_chunk>(cu, cp_size, r).owner(idx[t])
                                     : partition<contiguous>(cu, cp_size, r).owner(idx[t]);
          CHECK(o.rank == r);
          CHECK(o.local_row == static_cast<i64>(t));
        }
      }
      CHECK(static_cast<i64>(seen.size()) == cu.back());
      CHECK(static_cast<i64>(std::set<i64>(seen.begin(), seen.end()).size()) == cu.back());
      CHECK(*seen.begin() == 0);
      CHECK(*seen.rbegin() == cu.back() - 1);
    }
    // dual_chunk: each local sequence is exactly cu/cp wide and holds its own sequence's rows.
    partition<> p(cu, cp_size, cp_size - 1);
    for (std::size_t i = 0; i < cu.size(); ++i) CHECK(p.local_cu_seqlens()[i] == cu[i] / cp_size);
    for (i64 t = 0; t < p.local_rows(); ++t) {
      auto const at = p.locate(t);
      CHECK(at.global_row >= cu[static_cast<std::size_t>(at.sequence)]);
      CHECK(at.global_row < cu[static_cast<std::size_t>(at.sequence) + 1]);
    }
  }
}

TEST_CASE("describe() prints the layout, rank and local boundaries") {
  std::vector<int> cu{0, 8, 20};
  auto const s = partition<>(cu, 2, 1).describe();
  CHECK(s.find("dual_chunk") != std::string::npos);
  CHECK(s.find("cp 1/2") != std::string::npos);
  CHECK(s.find("[0,4,10]") != std::string::npos);
}

TEST_CASE("bad input: every case names the value and what was expected") {
  std::vector<int> good{0, 8, 20};
  throws_with([&] { partition<>(good, 0, 0); }, "cp_size = 0, expected >= 1");
  throws_with([&] { partition<>(good, -2, 0); }, "cp_size = -2");
  throws_with([&] { partition<>(good, 2, 2); }, "cp_rank = 2 out of range [0, 2)");
  throws_with([&] { partition<>(good, 2, -1); }, "cp_rank = -1");
  throws_with([&] { partition<>(std::vector<int>{0, 8, 6}, 2, 0); }, "decreases at index 2: 8 then 6");
  throws_with([&] { partition<>(std::vector<int>{0, -4, 8}, 2, 0); }, "[1] = -4 is negative");
  throws_with([&] { partition<>(std::vector<int>{4, 8}, 2, 0); }, "[0] = 4, expected 0");
  throws_with([&] { partition<>(std::vector<int>{}, 2, 0); }, "empty");
  throws_with([&] { partition<>(std::vector<int>{0, 7, 17}, 2, 0); }, "sequence 0 has padded length 7");
  throws_with([&] { partition<>(std::vector<int>{0, 8, 14}, 2, 0); }, "expected a multiple of 4");
  throws_with([&] { partition<contiguous>(std::vector<int>{0, 7}, 2, 0); }, "7 packed rows, expected a multiple of 2");
  partition<> p(good, 2, 0);
  throws_with([&] { (void)p.source_row(10); }, "local row 10 out of range [0, 10)");
  throws_with([&] { (void)p.owner(20); }, "global row 20 out of range [0, 20)");
  throws_with([&] { (void)p.locate(3, 0); }, "rank 3 out of range");
  throws_with([&] { cp::padding(good, 0); }, "sequence_multiple = 0");
  throws_with([&] { cp::padding(good, 4, -1); }, "total_multiple = -1");
  throws_with([&] { (void)cp::alignment_for<dual_chunk>(0); }, "cp = 0");
  throws_with([&] { (void)cp::padding(good, 4).raw_row(20); }, "padded row 20 out of range");
  throws_with([&] { (void)cp::padding(good, 4).padded_row(-1); }, "raw row -1 out of range");
}

TEST_CASE("padding: docs/cp.md worked example raw [0,7,17] at cp=2 -> [0,8,20] with the row maps") {
  std::vector<int> raw{0, 7, 17};
  CHECK(cp::alignment_for<dual_chunk>(2) == 4);
  CHECK(cp::alignment_for<dual_chunk>(2, 2) == 8);
  CHECK(cp::alignment_for<dual_chunk>(1, 2) == 2);
  CHECK(cp::alignment_for<dual_chunk>(2, 1, 16) == 16);
  CHECK(cp::alignment_for<dual_chunk>(3, 1, 8) == 24);
  CHECK(cp::alignment_for<contiguous>(4, 2) == 8);
  cp::padding pad(raw, cp::alignment_for<dual_chunk>(2));
  CHECK(std::vector<i64>(pad.padded_cu_seqlens().begin(), pad.padded_cu_seqlens().end()) == v({0, 8, 20}));
  CHECK(pad.raw_rows() == 17);
  CHECK(pad.padded_rows() == 20);
  CHECK(pad.pad_rows() == 3);
  CHECK_FALSE(pad.has_dummy_sequence());
  CHECK(pad.padded_to_raw() == v({0, 1, 2, 3, 4, 5, 6, -1, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, -1, -1}));
  CHECK(pad.raw_to_padded() == v({0, 1, 2, 3, 4, 5, 6, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17}));
  for (i64 r = 0; r < pad.raw_rows(); ++r) CHECK(pad.raw_row(pad.padded_row(r)) == r);
  CHECK(pad.describe().find("17 raw rows -> 20 padded rows") != std::string::npos);
}

TEST_CASE("padding: AReaL's dummy sequence to a total multiple (256 in the reference)") {
  std::vector<std::int64_t> raw{0, 7, 17};
  cp::padding pad(raw, 4, 256);
  CHECK(std::vector<i64>(pad.padded_cu_seqlens().begin(), pad.padded_cu_seqlens().end()) == v({0, 8, 20, 256}));
  CHECK(pad.has_dummy_sequence());
  CHECK(pad.sequences() == 3);
  CHECK(pad.raw_sequences() == 2);
  CHECK(pad.pad_rows() == 239);
  CHECK(pad.raw_row(255) == -1);
  CHECK(pad.raw_row(100) == -1);
  CHECK(pad.padded_row(16) == 17);
  partition<> p(std::span<i64 const>(pad.padded_cu_seqlens()), 2, 1);  // the dummy splits like any sequence
  CHECK(p.local_rows() == 128);
}

TEST_CASE("padding: random raw batches, empty sequences included, round-trip the maps") {
  std::mt19937_64 gen(3);
  for (int trial = 0; trial < 30; ++trial) {
    std::vector<i64> raw{0};
    for (int i = 0, n = 1 + static_cast<int>(gen() % 10); i < n; ++i) raw.push_back(raw.back() + static_cast<i64>(gen() % 40));
    int const cp_size = 1 << (trial % 4);
    i64 const align = cp::alignment_for<dual_chunk>(cp_size, 1 + trial % 2);
    cp::padding pad(raw, align, trial % 3 == 0 ? 64 : 1);
    auto const pcu = pad.padded_cu_seqlens();
    for (std::size_t i = 0; i + 1 < pcu.size(); ++i) CHECK((pcu[i + 1] - pcu[i]) % align == 0);
    auto const p2r = pad.padded_to_raw();
    i64 real = 0;
    for (i64 g = 0; g < pad.padded_rows(); ++g)
      if (p2r[static_cast<std::size_t>(g)] >= 0) {
        ++real;
        CHECK(pad.padded_row(p2r[static_cast<std::size_t>(g)]) == g);
      }
    CHECK(real == pad.raw_rows());
    CHECK_NOTHROW(partition<>(std::span<i64 const>(pcu), cp_size, 0));
  }
}
