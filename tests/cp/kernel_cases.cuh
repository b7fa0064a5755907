// SPDX-License-Identifier: Apache-2.0
#pragma once
// The cp kernel tests, compiled twice: kernels.cu as shipped (split and to_sequence_order take
// the runs kernel where it applies), kernels_general.cu with HEADROOM_CP_ROW_RUNS=0 (every op on
// the general kernel, which large copies take).
#include <doctest/doctest.h>

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "device_buffer.hpp"
#include "headroom/cp/cuda/ops.cuh"
#include "headroom/cuda/device.hpp"
#include "headroom/cuda/stream.hpp"
#include "random_batch.hpp"

using namespace headroom;
using cp::contiguous;
using cp::dual_chunk;
using cp::matrix_view;
using cp::partition;
using cp_test::device_vector;
using cp_test::i64;
using cp_test::same_bytes;

namespace {

struct rgb {  // 3 bytes: forces the 1-byte path and a non-power-of-two pad pattern
  unsigned char c[3];
};

template <class T>
std::vector<T> random_elems(std::mt19937_64& gen, std::size_t n) {
  std::vector<unsigned char> bytes(n * sizeof(T));
  for (auto& b : bytes) b = static_cast<unsigned char>(gen());
  std::vector<T> out(n);
  if (n > 0) std::memcpy(static_cast<void*>(out.data()), bytes.data(), bytes.size());
  return out;
}

template <class T>
T random_elem(std::mt19937_64& gen) {
  return random_elems<T>(gen, 1)[0];
}

template <class T>
matrix_view<T const> cview(std::vector<T> const& v, i64 rows, i64 width) {
  return {v.data(), rows, width};
}
template <class T>
matrix_view<T> mview(std::vector<T>& v, i64 rows, i64 width) {
  return {v.data(), rows, width};
}

/// A device copy of `host` whose first element sits `offset` elements into the allocation, so
/// offset 1 misaligns it for the 16-byte path.
template <class T>
struct placed {
  device_vector<T> buf;
  std::size_t offset;
  placed(std::size_t n, std::size_t off) : buf(n + off), offset(off) {}
  T* data() const { return buf.data() + offset; }
  void upload(std::vector<T> const& h) { buf.upload(h, offset); }
  std::vector<T> download(std::size_t n) const { return buf.download(n, offset); }
};

template <class I>
std::vector<I> narrow(std::span<i64 const> cu) {
  return std::vector<I>(cu.begin(), cu.end());
}

/// Every kernel against its host op on one random batch; outputs are poisoned first.
template <class L, class T, class I>
void check_ops(std::mt19937_64& gen, int cp_size, i64 width, std::size_t misalign, headroom::cuda::stream_view s,
               int max_sequences = 12, int max_len = 40) {
  auto const pad = cp_test::random_padding<L>(gen, cp_size, max_sequences, max_len);
  INFO("layout " << L::name << ", cp " << cp_size << ", width " << width << ", elem " << sizeof(T) << " B, cu "
                 << sizeof(I) * 8 << "-bit, misalign " << misalign << ", " << pad.describe());
  T const pad_value = random_elem<T>(gen);
  auto const raw = random_elems<T>(gen, static_cast<std::size_t>(pad.raw_rows() * width));
  std::vector<T> padded(static_cast<std::size_t>(pad.padded_rows() * width));
  cp::pad(pad, cview(raw, pad.raw_rows(), width), mview(padded, pad.padded_rows(), width), pad_value);

  auto const pcu_host = narrow<I>(pad.padded_cu_seqlens());
  auto const rcu_host = narrow<I>(pad.raw_cu_seqlens().first(static_cast<std::size_t>(pad.raw_sequences() + 1)));
  device_vector<I> pcu(pcu_host), rcu(rcu_host);
  cp::cuda::device_cu<I> const dpcu{pcu.data(), static_cast<i64>(pcu_host.size())};
  cp::cuda::device_cu<I> const drcu{rcu.data(), static_cast<i64>(rcu_host.size())};

  i64 const T_rows = pad.padded_rows();
  std::size_t const global_n = static_cast<std::size_t>(T_rows * width);
  placed<T> d_raw(raw.size(), misalign), d_padded(global_n, misalign);
  d_raw.upload(raw);
  d_padded.upload(padded);

  std::vector<T> rank_major;
  partition<L> const p0(std::span<i64 const>(pad.padded_cu_seqlens()), cp_size, 0);
  i64 const n = p0.local_rows();
  std::size_t const local_n = static_cast<std::size_t>(n * width);
  for (int r = 0; r < cp_size; ++r) {
    auto const p = p0.for_rank(r);
    // split
    std::vector<T> expect(local_n);
    cp::split(p, cview(padded, T_rows, width), mview(expect, n, width));
    placed<T> d_local(local_n, 0);
    cp::cuda::split(p, dpcu, matrix_view<T const>(d_padded.data(), T_rows, width), matrix_view<T>(d_local.data(), n, width), s);
    s.synchronize();
    CHECK(same_bytes(d_local.download(local_n), expect));
    rank_major.insert(rank_major.end(), expect.begin(), expect.end());
    // fused pad + split from raw rows
    placed<T> d_fused(local_n, misalign);
    cp::cuda::pad_split(pad, p, drcu, dpcu, matrix_view<T const>(d_raw.data(), pad.raw_rows(), width),
                        matrix_view<T>(d_fused.data(), n, width), pad_value, s);
    s.synchronize();
    CHECK(same_bytes(d_fused.download(local_n), expect));
    // shift 1: next token of the same sequence, pad after the last real one
    std::vector<T> expect_next(local_n);
    auto const pcu_v = pad.padded_cu_seqlens();
    auto const rcu_v = pad.raw_cu_seqlens();
    for (i64 t = 0; t < n; ++t) {
      auto const at = p.locate(t);
      auto const sq = static_cast<std::size_t>(at.sequence);
      i64 const o = at.global_row - pcu_v[sq] + 1;
      bool const real = at.sequence < pad.raw_sequences() && o < rcu_v[sq + 1] - rcu_v[sq];
      for (i64 j = 0; j < width; ++j)
        expect_next[static_cast<std::size_t>(t * width + j)] =
            real ? raw[static_cast<std::size_t>((rcu_v[sq] + o) * width + j)] : pad_value;
    }
    d_fused.buf.fill_bytes(0xCD);
    cp::cuda::pad_split(pad, p, drcu, dpcu, matrix_view<T const>(d_raw.data(), pad.raw_rows(), width),
                        matrix_view<T>(d_fused.data(), n, width), pad_value, s, 1);
    s.synchronize();
    CHECK(same_bytes(d_fused.download(local_n), expect_next));
    // split's adjoint
    auto const dy = random_elems<T>(gen, local_n);
    std::vector<T> expect_adj(global_n);
    cp::split_adjoint(p, cview(dy, n, width), mview(expect_adj, T_rows, width));
    placed<T> d_dy(local_n, misalign), d_adj(global_n, 0);
    d_dy.upload(dy);
    cp::cuda::split_adjoint(p, dpcu, matrix_view<T const>(d_dy.data(), n, width), matrix_view<T>(d_adj.data(), T_rows, width), s);
    s.synchronize();
    CHECK(same_bytes(d_adj.download(global_n), expect_adj));
  }
  // gather's reorder and its inverse
  placed<T> d_rank_major(global_n, misalign), d_seq(global_n, 0), d_back(global_n, misalign);
  d_rank_major.upload(rank_major);
  cp::cuda::to_sequence_order(p0, dpcu, matrix_view<T const>(d_rank_major.data(), T_rows, width),
                              matrix_view<T>(d_seq.data(), T_rows, width), s);
  cp::cuda::to_rank_order(p0, dpcu, matrix_view<T const>(d_seq.data(), T_rows, width),
                          matrix_view<T>(d_back.data(), T_rows, width), s);
  s.synchronize();
  CHECK(same_bytes(d_seq.download(global_n), padded));
  CHECK(same_bytes(d_back.download(global_n), rank_major));
}

template <class L, class T>
void check_type(std::mt19937_64& gen, std::initializer_list<i64> widths, headroom::cuda::stream_view s) {
  for (int cp_size : {1, 2, 4, 8})
    for (i64 w : widths)
      for (std::size_t misalign : {std::size_t{0}, std::size_t{1}}) {
        check_ops<L, T, std::int32_t>(gen, cp_size, w, misalign, s);
        check_ops<L, T, std::int64_t>(gen, cp_size, w, misalign, s);
      }
}

}  // namespace

TEST_CASE_TEMPLATE("kernels match the host ops byte for byte (poisoned outputs, every vector width)", L, dual_chunk,
                   contiguous) {
  REQUIRE_MESSAGE(headroom::cuda::device_count() >= 1, "the cp kernel tests need a CUDA device");
  headroom::cuda::stream stream;
  std::mt19937_64 gen(2024);
  check_type<L, __nv_bfloat16>(gen, {1, 3, 8, 64, 520}, stream);  // 2, 6, 16, 128, 1040 B rows
  check_type<L, float>(gen, {1, 2, 5, 96}, stream);
  check_type<L, double>(gen, {1, 3, 2}, stream);
  check_type<L, std::uint8_t>(gen, {1, 7, 16, 33}, stream);
  check_type<L, rgb>(gen, {1, 4, 16}, stream);
}

TEST_CASE("kernels: more sequences than shared memory holds (boundaries read from global memory)") {
  headroom::cuda::stream stream;
  std::mt19937_64 gen(77);
  // 8000 sequences: (8001) int64 boundaries = 64 KB > the 48 KB staged in shared memory.
  check_ops<dual_chunk, float, std::int64_t>(gen, 2, 4, 0, stream, 8000);
  check_ops<dual_chunk, float, std::int32_t>(gen, 4, 3, 1, stream, 8000);
  check_ops<contiguous, __nv_bfloat16, std::int64_t>(gen, 8, 8, 0, stream, 8000);
}

TEST_CASE("kernels: hidden-state shapes (16-byte path, many tiles)") {
  headroom::cuda::stream stream;
  std::mt19937_64 gen(5);
  check_ops<dual_chunk, __nv_bfloat16, std::int32_t>(gen, 2, 4096, 0, stream, 6);
  check_ops<dual_chunk, __nv_bfloat16, std::int64_t>(gen, 8, 1024, 0, stream, 20);
}

TEST_CASE("kernels: bad input throws before any launch") {
  headroom::cuda::stream stream;
  std::vector<std::int64_t> const cu{0, 8, 20};
  partition<> p(cu, 2, 0);
  cp::cuda::device_cu_seqlens dcu(std::span<i64 const>(cu), stream);
  device_vector<__nv_bfloat16> g(20 * 9 + 8), l(10 * 9 + 8);
  auto const gv = matrix_view<__nv_bfloat16 const>(g.data(), 20, 8);
  auto const lv = matrix_view<__nv_bfloat16>(l.data(), 10, 8);
  CHECK_NOTHROW(cp::cuda::split<cp::vector_policy::require_16>(p, dcu.view(), gv, lv, stream));
  // Misaligned widths for the vector path: 9 x 2 B rows are not a multiple of 16 bytes.
  CHECK_THROWS_WITH_AS(cp::cuda::split<cp::vector_policy::require_16>(p, dcu.view(), matrix_view<__nv_bfloat16 const>(g.data(), 20, 9),
                                                                      matrix_view<__nv_bfloat16>(l.data(), 10, 9), stream),
                       doctest::Contains("got 18 bytes per row"), invalid_argument);
  // A misaligned base address.
  CHECK_THROWS_WITH_AS(cp::cuda::split<cp::vector_policy::require_16>(p, dcu.view(), matrix_view<__nv_bfloat16 const>(g.data() + 1, 20, 8),
                                                                      lv, stream),
                       doctest::Contains("global input starts at"), invalid_argument);
  // The widest policy takes the misaligned case on a narrower path instead.
  CHECK_NOTHROW(cp::cuda::split(p, dcu.view(), matrix_view<__nv_bfloat16 const>(g.data() + 1, 20, 8), lv, stream));
  // Rows that do not match cu_seqlens; device boundaries of the wrong length.
  CHECK_THROWS_WITH_AS(cp::cuda::split(p, dcu.view(), matrix_view<__nv_bfloat16 const>(g.data(), 19, 8), lv, stream),
                       doctest::Contains("global input has shape [19, 8], expected [20, 8]"), invalid_argument);
  CHECK_THROWS_WITH_AS(cp::cuda::split(p, cp::cuda::device_cu<std::int64_t>{dcu.view().data, 2}, gv, lv, stream),
                       doctest::Contains("device cu_seqlens has 2 entries, the host metadata has 3"), invalid_argument);
  CHECK_THROWS_WITH_AS(cp::cuda::split(p, cp::cuda::device_cu<std::int64_t>{nullptr, 3}, gv, lv, stream),
                       doctest::Contains("is null"), invalid_argument);
  cp::padding pad(std::vector<int>{0, 7, 17}, 4);
  CHECK_THROWS_WITH_AS(cp::cuda::pad_split(pad, p, dcu.view(), dcu.view(), matrix_view<__nv_bfloat16 const>(g.data(), 17, 8), lv,
                                           __nv_bfloat16{}, stream, -1),
                       doctest::Contains("shift = -1"), invalid_argument);
  stream.synchronize();
}

// split and to_sequence_order take the runs kernel while the batch's runs fit (row_runs), the
// general kernel beyond: batches around that capacity give both, and must agree with the host.
TEST_CASE("kernels: runs kernel and general kernel around the runs capacity") {
  headroom::cuda::stream stream;
  std::mt19937_64 gen(91);
  for (int k = 0; k < 6; ++k) check_ops<dual_chunk, __nv_bfloat16, std::int64_t>(gen, 4, 64, 0, stream, 70);
}

// Copies of many rounds (thousands of runs-kernel blocks, one round each; the tiled kernel's
// grid-stride loop), rows whose vector count does not divide a round (65 and 33 vectors a row).
TEST_CASE("kernels: copies of several grid rounds (runs kernel stride)") {
  headroom::cuda::stream stream;
  std::mt19937_64 gen(13);
  for (int k = 0; k < 2; ++k) {  // two batches each: a one-sequence batch may fit in one round
    check_ops<dual_chunk, __nv_bfloat16, std::int64_t>(gen, 2, 520, 0, stream, 16, 20000);
    check_ops<dual_chunk, std::uint8_t, std::int32_t>(gen, 4, 33, 1, stream, 16, 20000);
    check_ops<contiguous, float, std::int64_t>(gen, 8, 17, 1, stream, 16, 20000);
  }
}

// The ops give each runs-kernel block one round; its grid-stride loop (taken when a grid is
// smaller than the copy) is exercised by launching it on 1, 3 and 7 blocks, with row widths whose
// vector count does not divide the stride, against the host split.
TEST_CASE("kernels: runs kernel on grids smaller than the copy (grid-stride loop)") {
  headroom::cuda::stream stream;
  std::mt19937_64 gen(29);
  for (i64 width : {520, 33, 17}) {
    auto const pad = cp_test::random_padding<dual_chunk>(gen, 4, 16, 2000);
    i64 const rows = pad.padded_rows();
    auto const global = random_elems<__nv_bfloat16>(gen, static_cast<std::size_t>(rows * width));
    partition<dual_chunk> const p(std::span<i64 const>(pad.padded_cu_seqlens()), 4, 1);
    std::vector<__nv_bfloat16> expect(static_cast<std::size_t>(p.local_rows() * width));
    cp::split(p, cview(global, rows, width), mview(expect, p.local_rows(), width));
    cp::row_runs runs;
    REQUIRE(cp::split_runs(p, runs));
    device_vector<__nv_bfloat16> d_in(global);
    auto const plan = cp::plan_copy<cp::vector_policy::widest>(static_cast<std::size_t>(width) * 2, {}, "test");
    for (std::int64_t blocks : {1, 3, 7}) {
      INFO("width ", width, ", ", blocks, " blocks, ", p.local_rows(), " rows, vector ", plan.vector_bytes, " B");
      device_vector<__nv_bfloat16> d_out(expect.size());
      cp::cuda::detail::launch_copy_runs(runs, d_in.data(), d_out.data(), plan, stream, "test", blocks);
      stream.synchronize();
      CHECK(same_bytes(d_out.download(), expect));
    }
  }
}

// The exact shapes of bench_cp_bandwidth's one-GPU table (its packed batches: sequences of
// 256..8192 rows, multiples of 2 cp, seed 42 + cp; rank cp / 2), at 4096 bf16 a row: split and
// the reorder at 16K and 128K tokens, cp 2 and 8, through the ops (runs kernel up to 256 MiB of
// output, tiled beyond) and, where the runs kernel applies, on every grid the bench's
// --runs-grid sweep launches (one round per block, two, 4 and 1 per resident slot, 7 blocks).
// Each input vector holds (row, vector) so every output vector names where it came from; a
// guard round past the output must stay untouched. (The logits-width rows, 5-40 GB a buffer, are
// left to the bench.)
namespace bench_shapes {

std::vector<i64> packed_batch(i64 tokens, int cp, std::uint64_t seed) {  // as bench/cp_bandwidth.cu
  std::mt19937_64 gen(seed);
  i64 const m = 2 * cp;
  std::uniform_int_distribution<i64> len(256 / m, 8192 / m);
  std::vector<i64> cu{0};
  while (cu.back() < tokens) cu.push_back(std::min(tokens, cu.back() + len(gen) * m));
  return cu;
}

constexpr i64 width = 4096;             // bf16
constexpr i64 vpr = width * 2 / 16;     // 16-byte vectors a row
constexpr i64 guard_words = 2 * 2048;   // one runs-kernel round of 16-byte vectors, as int64 pairs
constexpr std::int64_t poison = 0x5A5A5A5A5A5A5A5A;

/// Mismatches of `out` (rows x vpr vectors of (row, vector) pairs, then the guard) against
/// `source` (the input row of each output row); `first` describes the first.
std::size_t mismatches(std::vector<std::int64_t> const& out, std::vector<i64> const& source, std::string& first) {
  std::size_t bad = 0;
  auto const rows = static_cast<i64>(source.size());
  for (i64 t = 0; t < rows; ++t)
    for (i64 v = 0; v < vpr; ++v) {
      auto const at = static_cast<std::size_t>((t * vpr + v) * 2);
      if (out[at] == source[static_cast<std::size_t>(t)] && out[at + 1] == v) continue;
      if (bad++ == 0)
        first = "row " + std::to_string(t) + " vector " + std::to_string(v) + " holds (" + std::to_string(out[at]) + ", " +
                std::to_string(out[at + 1]) + "), expected (" + std::to_string(source[static_cast<std::size_t>(t)]) + ", " +
                std::to_string(v) + ")";
    }
  for (std::size_t w = static_cast<std::size_t>(rows * vpr * 2); w < out.size(); ++w)
    if (out[w] != poison && bad++ == 0) first = "guard word " + std::to_string(w) + " written past the output";
  return bad;
}

}  // namespace bench_shapes

TEST_CASE("kernels: bench_cp_bandwidth's shapes and runs-kernel grids") {
  using namespace bench_shapes;
  headroom::cuda::stream stream;
  for (i64 tokens : {i64{16384}, i64{131072}}) {
    std::vector<std::int64_t> stamped(static_cast<std::size_t>(tokens * vpr * 2));
    for (i64 r = 0; r < tokens; ++r)
      for (i64 v = 0; v < vpr; ++v) {
        stamped[static_cast<std::size_t>((r * vpr + v) * 2)] = r;
        stamped[static_cast<std::size_t>((r * vpr + v) * 2 + 1)] = v;
      }
    device_vector<std::int64_t> d_in(stamped);
    stamped = {};
    for (bool is_split : {true, false})
      for (int cp_size : {2, 8}) {
        auto const cu = packed_batch(tokens, cp_size, 42 + static_cast<std::uint64_t>(cp_size));
        partition<dual_chunk> const p(std::span<i64 const>(cu), cp_size, cp_size / 2);
        cp::cuda::device_cu_seqlens dcu(p.global_cu_seqlens(), stream);
        i64 const out_rows = is_split ? p.local_rows() : p.global_rows();
        std::vector<i64> const source = is_split ? p.local_index() : p.gather_index();  // input row per output row
        std::size_t const words = static_cast<std::size_t>(out_rows * vpr * 2 + guard_words);
        device_vector<std::int64_t> d_out(words);
        auto const in_v = matrix_view<__nv_bfloat16 const>(reinterpret_cast<__nv_bfloat16 const*>(d_in.data()), p.global_rows(), width);
        auto const out_v = matrix_view<__nv_bfloat16>(reinterpret_cast<__nv_bfloat16*>(d_out.data()), out_rows, width);
        auto const check = [&](std::string const& how) {
          stream.synchronize();
          std::string first;
          INFO((is_split ? "split " : "reorder "), tokens, " x ", width, " cp ", cp_size, ", ", how, ": ", out_rows,
               " output rows");
          auto const bad = mismatches(d_out.download(), source, first);
          CHECK_MESSAGE(bad == 0, bad, " wrong words; first: ", first);
          HEADROOM_CUDA_TRY(cudaMemsetAsync(d_out.data(), 0x5A, words * sizeof(std::int64_t), stream.get()));
        };
        HEADROOM_CUDA_TRY(cudaMemsetAsync(d_out.data(), 0x5A, words * sizeof(std::int64_t), stream.get()));
        if (is_split)
          cp::cuda::split<cp::vector_policy::require_16>(p, dcu.view(), in_v, out_v, stream);
        else
          cp::cuda::to_sequence_order<cp::vector_policy::require_16>(p, dcu.view(), in_v, out_v, stream);
        check("the op");
        auto const plan = cp::plan_copy<cp::vector_policy::require_16>(static_cast<std::size_t>(width) * 2, {}, "test");
        cp::row_runs runs;
        bool const runs_fit = is_split ? cp::split_runs(p, runs) : cp::sequence_order_runs(p, runs);
        if (!HEADROOM_CP_ROW_RUNS || !runs_fit || !cp::cuda::detail::runs_kernel_size(out_rows, plan)) continue;
        namespace cd = cp::cuda::detail;
        i64 const per_round = i64{cd::block_threads} * cd::runs_unroll;
        i64 const rounds = (out_rows * vpr + per_round - 1) / per_round;
        i64 const resident = cd::resident_blocks(cd::runs_kernel_of(plan.vector_bytes));
        for (i64 blocks : {rounds, (rounds + 1) / 2, 4 * resident, resident, i64{7}}) {
          cd::launch_copy_runs(runs, d_in.data(), d_out.data(), plan, stream, "test", blocks);
          check("runs kernel on " + std::to_string(blocks) + " blocks (" + std::to_string(rounds) + " rounds)");
        }
      }
  }
}
