// SPDX-License-Identifier: Apache-2.0
#pragma once
// Shared by tests/nccl/*.cu (not a test itself): every collective of a headroom::nccl
// communicator checked against a host reference on random data.
//
// Every rank draws every rank's data from a shared seed, so each computes the expected result
// locally. Values are small integers (|v| <= 120 / size()), so sums, maxima and minima are exact
// in every tested type (bfloat16 included) and in any reduction order. Checks use CHECK, never
// REQUIRE, so a failing rank keeps issuing the same collectives as the others.
#include <doctest/doctest.h>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "common/stream_buffer.hpp"
#include "headroom/core/communicator.hpp"
#include "headroom/cuda/async_resource.hpp"
#include "headroom/cuda/check.hpp"
#include "headroom/cuda/stream.hpp"
#include "headroom/nccl/communicator.hpp"
#include "headroom/nccl/group.hpp"

namespace nccl_test {

namespace cu = headroom::cuda;
namespace nc = headroom::nccl;
using headroom::reduce_op;
using headroom_test::stream_buffer;

template <class T>
T from_int(int v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return __float2bfloat16(static_cast<float>(v));
  else if constexpr (std::is_same_v<T, __half>) return __float2half(static_cast<float>(v));
  else return static_cast<T>(v);
}

template <class T>
double to_double(T x) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return static_cast<double>(__bfloat162float(x));
  else if constexpr (std::is_same_v<T, __half>) return static_cast<double>(__half2float(x));
  else return static_cast<double>(x);
}

template <class T>
char const* type_name() {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return "bfloat16";
  else if constexpr (std::is_same_v<T, __half>) return "float16";
  else if constexpr (std::is_same_v<T, float>) return "float32";
  else if constexpr (std::is_same_v<T, double>) return "float64";
  else if constexpr (std::is_same_v<T, std::int32_t>) return "int32";
  else if constexpr (std::is_same_v<T, std::int64_t>) return "int64";
  else return "other";
}

inline std::vector<int> rank_ints(int rank, std::size_t n, std::uint64_t seed, int range) {
  std::mt19937_64 gen(seed * 1000003u + static_cast<std::uint64_t>(rank));
  std::uniform_int_distribution<int> d(-range, range);
  std::vector<int> v(n);
  for (auto& x : v) x = d(gen);
  return v;
}

template <class T>
std::vector<T> convert(std::vector<int> const& v) {
  std::vector<T> out(v.size());
  std::transform(v.begin(), v.end(), out.begin(), [](int x) { return from_int<T>(x); });
  return out;
}

inline int combine(int a, int b, reduce_op op) {
  switch (op) {
    case reduce_op::sum: return a + b;
    case reduce_op::max: return std::max(a, b);
    case reduce_op::min: return std::min(a, b);
  }
  return a;
}

inline std::vector<int> reduced(int nranks, std::size_t n, std::uint64_t seed, int range, reduce_op op) {
  auto acc = rank_ints(0, n, seed, range);
  for (int r = 1; r < nranks; ++r) {
    auto const other = rank_ints(r, n, seed, range);
    for (std::size_t i = 0; i < n; ++i) acc[i] = combine(acc[i], other[i], op);
  }
  return acc;
}

/// CHECKs got[i] == expect[i] for all i; reports the count and the first mismatch.
template <class T>
void expect_equal(std::vector<T> const& got, std::vector<int> const& expect, std::string const& what) {
  std::size_t mismatches = 0;
  std::size_t first = 0;
  for (std::size_t i = 0; i < expect.size() && i < got.size(); ++i)
    if (to_double(got[i]) != static_cast<double>(expect[i]) && mismatches++ == 0) first = i;
  INFO(what, ": ", mismatches, " mismatches of ", expect.size(), "; first at ", first,
       (mismatches > 0 ? ": got " + std::to_string(to_double(got[first])) + ", expected " + std::to_string(expect[first])
                       : std::string()));
  CHECK(got.size() == expect.size());
  CHECK(mismatches == 0);
}

inline char const* op_name(reduce_op op) { return headroom::name_of(op).data(); }

/// All collectives for one element type; `counts` are per-rank element counts (> 0).
template <class T>
void check_all_collectives(nc::communicator& c, cu::stream_view s, cu::async_resource& mr, std::uint64_t seed,
                           std::vector<std::size_t> const& counts) {
  int const n = c.size();
  int const me = c.rank();
  auto const un = static_cast<std::size_t>(n);
  auto const ume = static_cast<std::size_t>(me);
  int const range = std::max(1, 120 / n);
  std::string const tag = std::string(type_name<T>()) + " rank " + std::to_string(me);

  for (std::size_t count : counts) {
    std::string const at = tag + " count " + std::to_string(count);
    for (auto op : {reduce_op::sum, reduce_op::max, reduce_op::min}) {
      std::uint64_t const k = seed + count * 31 + static_cast<std::uint64_t>(op);
      auto const expect = reduced(n, count, k, range, op);
      // all_reduce, out of place
      stream_buffer<T> in(mr, s, count);
      stream_buffer<T> out(mr, s, count);
      in.upload(convert<T>(rank_ints(me, count, k, range)));
      out.fill_byte(0xff);
      c.all_reduce(in.span(), out.span(), op, s);
      expect_equal(out.download(), expect, at + " all_reduce " + op_name(op));
      // all_reduce, in place
      c.all_reduce(in.span(), in.span(), op, s);
      expect_equal(in.download(), expect, at + " all_reduce in place " + op_name(op));

      // reduce_scatter: rank r gets block r of the reduction of count * n elements
      auto const rs_expect_all = reduced(n, count * un, k + 7, range, op);
      std::vector<int> const rs_expect(rs_expect_all.begin() + static_cast<std::ptrdiff_t>(count * ume),
                                       rs_expect_all.begin() + static_cast<std::ptrdiff_t>(count * (ume + 1)));
      stream_buffer<T> rs_in(mr, s, count * un);
      stream_buffer<T> rs_out(mr, s, count);
      rs_in.upload(convert<T>(rank_ints(me, count * un, k + 7, range)));
      c.reduce_scatter(rs_in.span(), rs_out.span(), op, s);
      expect_equal(rs_out.download(), rs_expect, at + " reduce_scatter " + op_name(op));
      // reduce_scatter, in place: out is block rank() of in
      c.reduce_scatter(rs_in.span(), rs_in.span().subspan(count * ume, count), op, s);
      auto const rs_in_after = rs_in.download();
      expect_equal(std::vector<T>(rs_in_after.begin() + static_cast<std::ptrdiff_t>(count * ume),
                                  rs_in_after.begin() + static_cast<std::ptrdiff_t>(count * (ume + 1))),
                   rs_expect, at + " reduce_scatter in place " + op_name(op));
    }

    // all_gather: rank-major concatenation, out of place and in place
    std::uint64_t const g = seed + count * 17 + 3;
    std::vector<int> gather_expect;
    for (int r = 0; r < n; ++r) {
      auto const v = rank_ints(r, count, g, range);
      gather_expect.insert(gather_expect.end(), v.begin(), v.end());
    }
    stream_buffer<T> mine(mr, s, count);
    stream_buffer<T> all(mr, s, count * un);
    mine.upload(convert<T>(rank_ints(me, count, g, range)));
    c.all_gather(mine.span(), all.span(), s);
    expect_equal(all.download(), gather_expect, at + " all_gather");
    stream_buffer<T> all_in_place(mr, s, count * un);
    all_in_place.fill_byte(0);
    HEADROOM_CUDA_TRY(cudaMemcpyAsync(all_in_place.data() + count * ume, mine.data(), count * sizeof(T),
                                      cudaMemcpyDeviceToDevice, s.get()));
    c.all_gather(all_in_place.span().subspan(count * ume, count), all_in_place.span(), s);
    expect_equal(all_in_place.download(), gather_expect, at + " all_gather in place");

    // broadcast from every root
    for (int root = 0; root < n; ++root) {
      std::uint64_t const b = seed + count * 13 + static_cast<std::uint64_t>(root);
      stream_buffer<T> buf(mr, s, count);
      buf.upload(convert<T>(rank_ints(me, count, b, range)));
      c.broadcast(buf.span(), root, s);
      expect_equal(buf.download(), rank_ints(root, count, b, range), at + " broadcast root " + std::to_string(root));
    }

    // send / recv around the ring, in an explicit group; then sendrecv the other way
    int const next = (me + 1) % n;
    int const prev = (me + n - 1) % n;
    std::uint64_t const p2p = seed + count * 19 + 11;
    stream_buffer<T> to_send(mr, s, count);
    stream_buffer<T> got(mr, s, count);
    to_send.upload(convert<T>(rank_ints(me, count, p2p, range)));
    {
      nc::group grp;
      c.send(std::span<T const>(to_send.span()), next, s);
      c.recv(got.span(), prev, s);
      grp.end();
    }
    expect_equal(got.download(), rank_ints(prev, count, p2p, range), at + " send/recv ring");
    c.sendrecv(to_send.span(), prev, got.span(), next, s);
    expect_equal(got.download(), rank_ints(next, count, p2p, range), at + " sendrecv reverse ring");

    c.barrier(s);
  }
  s.synchronize();
  c.check_async();
}

}  // namespace nccl_test
