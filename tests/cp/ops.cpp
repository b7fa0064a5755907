// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <array>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "common/throws.hpp"
#include "headroom/cp/ops.hpp"
#include "random_batch.hpp"
#include "views.hpp"

using namespace headroom;
using headroom_test::throws_with;
using cp_test::cview;
using cp_test::mview;
using cp::contiguous;
using cp::dual_chunk;
using cp::matrix_view;
using cp::partition;
using cp_test::i64;

namespace {
template <class L, class T>
std::vector<T> split_all_and_gather(partition<L> const& p, std::vector<T> const& x, i64 width) {
  std::vector<T> flat(x.size()), out(x.size());
  for (int r = 0; r < p.cp_size(); ++r) {
    auto const pr = p.for_rank(r);
    cp::split(pr, cview(x, width), matrix_view<T>(flat.data() + r * pr.local_rows() * width, pr.local_rows(), width));
  }
  cp::to_sequence_order(p, cview(flat, width), mview(out, width));
  return out;
}

// Token codes for the reference example: a_i = 100 + i, b_i = 200 + i, pad = 0.
constexpr int a(int i) { return 100 + i; }
constexpr int b(int i) { return 200 + i; }
constexpr int _ = 0;

/// A trivially copyable element that is not arithmetic and not a power-of-two size.
struct rgb {
  unsigned char c[3];
  friend bool operator==(rgb const&, rgb const&) = default;
};
}  // namespace

TEST_CASE("docs/cp.md worked example: split, labels, loss mask, gather and unpad") {
  std::vector<int> const raw_cu{0, 7, 17};
  cp::padding pad(raw_cu, cp::alignment_for<dual_chunk>(2));
  std::vector<int> raw_ids;
  for (int i = 0; i < 7; ++i) raw_ids.push_back(a(i));
  for (int i = 0; i < 10; ++i) raw_ids.push_back(b(i));
  std::vector<int> padded(20, -1);
  cp::pad(pad, cview(raw_ids, 1), mview(padded, 1), _);
  CHECK(padded == std::vector<int>{a(0), a(1), a(2), a(3), a(4), a(5), a(6), _, b(0), b(1), b(2), b(3), b(4), b(5), b(6),
                                   b(7), b(8), b(9), _, _});
  // Raw per-row loss mask (prompt 3 and 4 tokens).
  std::vector<std::uint8_t> const raw_mask{0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1};
  std::vector<std::vector<int>> const expect_ids{{a(0), a(1), a(6), _, b(0), b(1), b(2), b(9), _, _},
                                                 {a(2), a(3), a(4), a(5), b(3), b(4), b(5), b(6), b(7), b(8)}};
  std::vector<std::vector<int>> const expect_labels{{a(1), a(2), _, b(0), b(1), b(2), b(3), _, _, a(0)},
                                                    {a(3), a(4), a(5), a(6), b(4), b(5), b(6), b(7), b(8), b(9)}};
  std::vector<std::vector<std::uint8_t>> const expect_mask{std::vector<std::uint8_t>(10, 0), std::vector<std::uint8_t>(10, 1)};
  std::vector<int> flat;
  for (int r : {0, 1}) {
    partition<> p(std::span<i64 const>(pad.padded_cu_seqlens()), 2, r);
    std::vector<int> local(10, -7), fused(10, -7), labels(10, -7);
    std::vector<std::uint8_t> mask(10, 9);
    cp::split(p, cview(padded, 1), mview(local, 1));
    CHECK(local == expect_ids[static_cast<std::size_t>(r)]);
    cp::pad_split(pad, p, cview(raw_ids, 1), mview(fused, 1), _);
    CHECK(fused == expect_ids[static_cast<std::size_t>(r)]);
    cp::shifted_label_split(pad, p, cview(raw_ids, 1), mview(labels, 1), std::span<std::uint8_t const>(raw_mask),
                            std::span<std::uint8_t>(mask), _);
    CHECK(labels == expect_labels[static_cast<std::size_t>(r)]);
    CHECK(mask == expect_mask[static_cast<std::size_t>(r)]);
    flat.insert(flat.end(), local.begin(), local.end());
  }
  // The valid (label, mask = 1) pairs are exactly a3..a6 and b4..b9.
  std::vector<int> gathered(20, -7);
  partition<> p0(std::span<i64 const>(pad.padded_cu_seqlens()), 2, 0);
  cp::to_sequence_order(p0, cview(flat, 1), mview(gathered, 1));
  CHECK(gathered == padded);
  std::vector<int> back(20, -7);
  cp::to_rank_order(p0, cview(padded, 1), mview(back, 1));  // TE thd_sequence_order_to_cp_rank_order
  CHECK(back == flat);
  std::vector<int> unpadded(17, -7);
  cp::unpad(pad, cview(gathered, 1), mview(unpadded, 1));
  CHECK(unpadded == raw_ids);
}

TEST_CASE("shifted labels without a raw mask: every real token but the last of its sequence counts") {
  std::vector<int> const raw_cu{0, 7, 17};
  cp::padding pad(raw_cu, 4);
  std::vector<int> ids(17);
  for (int i = 0; i < 17; ++i) ids[static_cast<std::size_t>(i)] = i + 1;
  int valid = 0;
  for (int r : {0, 1}) {
    partition<> p(std::span<i64 const>(pad.padded_cu_seqlens()), 2, r);
    std::vector<int> labels(10);
    std::vector<float> mask(10, -1.f);
    cp::shifted_label_split(pad, p, cview(ids, 1), mview(labels, 1), std::span<float const>(), std::span<float>(mask));
    for (float m : mask) valid += m == 1.f;
  }
  CHECK(valid == (7 - 1) + (10 - 1));
}

TEST_CASE("TransformerEngine docstring: cu [0,8,16,24,40], cp=4, sequence -> rank order") {
  std::vector<int> cu{0, 8, 16, 24, 40};
  std::vector<int> x;
  for (int k = 0; k < 3; ++k)
    for (int i = 0; i < 8; ++i) x.push_back(i);
  for (int i = 0; i < 16; ++i) x.push_back(i);
  partition<> p(cu, 4, 0);
  std::vector<int> rank_major(40, -1), back(40, -1);
  cp::to_rank_order(p, cview(x, 1), mview(rank_major, 1));
  CHECK(rank_major == std::vector<int>{0, 7, 0, 7, 0, 7, 0, 1, 14, 15, 1, 6, 1, 6, 1, 6, 2, 3, 12, 13,
                                       2, 5, 2, 5, 2, 5, 4, 5, 10, 11, 3, 4, 3, 4, 3, 4, 6, 7, 8, 9});
  cp::to_sequence_order(p, cview(rank_major, 1), mview(back, 1));
  CHECK(back == x);
}

TEST_CASE_TEMPLATE("round trip gather(split(x)) == x on random packed batches, cp in {1,2,4,8}", L, dual_chunk, contiguous) {
  std::mt19937_64 gen(17);
  for (int cp_size : {1, 2, 4, 8}) {
    for (int trial = 0; trial < 8; ++trial) {
      auto const pad = cp_test::random_padding<L>(gen, cp_size);
      i64 const width = 1 + static_cast<i64>(gen() % 5);
      partition<L> p(std::span<i64 const>(pad.padded_cu_seqlens()), cp_size, 0);
      auto const raw = cp_test::random_rows<std::int64_t>(gen, pad.raw_rows(), width);
      std::vector<std::int64_t> padded(static_cast<std::size_t>(pad.padded_rows() * width), -5);
      cp::pad(pad, cview(raw, width), mview(padded, width), std::int64_t{-1});
      CHECK(split_all_and_gather(p, padded, width) == padded);
      std::vector<std::int64_t> unpadded(raw.size());
      cp::unpad(pad, cview(padded, width), mview(unpadded, width));
      CHECK(unpadded == raw);
      for (int r = 0; r < cp_size; ++r) {
        auto const pr = p.for_rank(r);
        std::vector<std::int64_t> a1(static_cast<std::size_t>(pr.local_rows() * width), 7), a2 = a1;
        cp::split(pr, cview(padded, width), mview(a1, width));
        cp::pad_split(pad, pr, cview(raw, width), mview(a2, width), std::int64_t{-1});
        CHECK(a1 == a2);
      }
    }
  }
}

TEST_CASE("any trivially copyable element: a 3-byte struct round-trips") {
  std::mt19937_64 gen(2);
  auto const pad = cp_test::random_padding<dual_chunk>(gen, 4);
  partition<> p(std::span<i64 const>(pad.padded_cu_seqlens()), 4, 0);
  std::vector<rgb> x(static_cast<std::size_t>(p.global_rows() * 3));
  for (auto& e : x) e = {{static_cast<unsigned char>(gen()), static_cast<unsigned char>(gen()), static_cast<unsigned char>(gen())}};
  CHECK(split_all_and_gather(p, x, 3) == x);
}

TEST_CASE_TEMPLATE("adjoints: <op(x), y> == <x, adjoint(y)> for split, reorder, pad and unpad", L, dual_chunk, contiguous) {
  std::mt19937_64 gen(23);
  for (int cp_size : {1, 2, 4, 8}) {
    for (int trial = 0; trial < 5; ++trial) {
      auto const pad = cp_test::random_padding<L>(gen, cp_size);
      i64 const w = 1 + static_cast<i64>(gen() % 4);
      int const rank = static_cast<int>(gen() % static_cast<unsigned>(cp_size));
      partition<L> p(std::span<i64 const>(pad.padded_cu_seqlens()), cp_size, rank);
      auto const x = cp_test::random_rows<double>(gen, p.global_rows(), w);
      auto const y = cp_test::random_rows<double>(gen, p.local_rows(), w);
      std::vector<double> sx(y.size()), sty(x.size(), 3.0);
      cp::split(p, cview(x, w), mview(sx, w));
      cp::split_adjoint(p, cview(y, w), mview(sty, w));
      CHECK(cp_test::dot(sx, y) == cp_test::dot(x, sty));  // integers in doubles: exact
      // Summing split_adjoint(split_r(x)) over ranks gives x back.
      std::vector<double> sum(x.size(), 0.0);
      for (int r = 0; r < cp_size; ++r) {
        auto const pr = p.for_rank(r);
        std::vector<double> loc(static_cast<std::size_t>(pr.local_rows() * w)), back(x.size());
        cp::split(pr, cview(x, w), mview(loc, w));
        cp::split_adjoint(pr, cview(loc, w), mview(back, w));
        for (std::size_t i = 0; i < sum.size(); ++i) sum[i] += back[i];
      }
      CHECK(sum == x);
      auto const z = cp_test::random_rows<double>(gen, p.global_rows(), w);
      std::vector<double> rx(x.size()), sz(x.size());
      cp::to_rank_order(p, cview(x, w), mview(rx, w));
      cp::to_sequence_order(p, cview(z, w), mview(sz, w));
      CHECK(cp_test::dot(rx, z) == cp_test::dot(x, sz));
      auto const raw = cp_test::random_rows<double>(gen, pad.raw_rows(), w);
      std::vector<double> pr(x.size()), uz(raw.size());
      cp::pad(pad, cview(raw, w), mview(pr, w), 0.0);
      cp::unpad(pad, cview(z, w), mview(uz, w));
      CHECK(cp_test::dot(pr, z) == cp_test::dot(raw, uz));
    }
  }
}

TEST_CASE("bad input to the ops: shapes, overlap and mismatched padding") {
  std::vector<int> const cu{0, 8, 20};
  partition<> p(cu, 2, 0);
  std::vector<float> g(40), l(20);
  // A tensor whose rows do not match cu_seqlens.
  throws_with([&] { cp::split(p, matrix_view<float const>(g.data(), 19, 2), mview(l, 2)); },
              "global input has shape [19, 2], expected [20, 2]");
  throws_with([&] { cp::split(p, cview(g, 2), matrix_view<float>(l.data(), 9, 2)); }, "local output has shape [9, 2], expected [10, 2]");
  throws_with([&] { cp::split(p, cview(g, 2), matrix_view<float>(l.data(), 5, 4)); }, "expected [10, 2]");
  throws_with([&] { cp::split(p, matrix_view<float const>(g.data(), 20, 2), matrix_view<float>(g.data() + 4, 10, 2)); }, "overlap");
  throws_with([&] { cp::split_adjoint(p, cview(l, 2), matrix_view<float>(g.data(), 10, 2)); }, "global output has shape [10, 2]");
  throws_with([&] { cp::to_sequence_order(p, matrix_view<float const>(l.data(), 19, 1), mview(g, 2)); },
              "rank-major input has shape [19, 1], expected [20, 1]");
  throws_with([&] { cp::to_sequence_order(p, cview(l, 1), mview(g, 2)); }, "sequence-order output has shape [20, 2], expected [20, 1]");
  throws_with([&] { cp::to_rank_order(p, cview(g, 2), mview(l, 1)); }, "rank-major output has shape [20, 1]");
  cp::padding other(std::vector<int>{0, 5, 17}, 4);  // padded [0,8,20]: same padded batch, other raw
  cp::padding wrong(std::vector<int>{0, 9, 17}, 4);  // padded [0,12,20]
  std::vector<float> raw(17);
  CHECK_NOTHROW(cp::pad_split(other, p, cview(raw, 1), matrix_view<float>(l.data(), 10, 1)));
  throws_with([&] { cp::pad_split(wrong, p, cview(raw, 1), matrix_view<float>(l.data(), 10, 1)); }, "not built from this padding");
  throws_with([&] { cp::pad(other, matrix_view<float const>(raw.data(), 16, 1), mview(g, 2)); }, "raw input has shape [16, 1], expected [17, 1]");
  throws_with([&] { cp::unpad(other, cview(g, 2), mview(raw, 1)); }, "raw output has shape [17, 1], expected [17, 2]");
  std::vector<int> ids(17), labels(10);
  std::vector<int> mask(10), short_mask(9), raw_mask(16);
  throws_with([&] { cp::shifted_label_split(other, p, cview(ids, 1), mview(labels, 1), std::span<int const>(), std::span<int>(short_mask)); },
              "local mask has 9 entries, expected 10");
  throws_with([&] { cp::shifted_label_split(other, p, cview(ids, 1), mview(labels, 1), std::span<int const>(raw_mask), std::span<int>(mask)); },
              "raw loss mask has 16 entries, expected 17");
  throws_with([&] { (void)matrix_view<float>(g.data(), 3, 0); }, "width >= 1");
  throws_with([&] { (void)matrix_view<float>(std::span<float>(g.data(), 39), 2); }, "39 elements are not a whole number of rows of width 2");
}
