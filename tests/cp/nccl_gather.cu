// SPDX-License-Identifier: Apache-2.0
// headroom: needs 2 GPUs
#include <doctest/doctest.h>

#include <cuda_bf16.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "device_buffer.hpp"
#include "headroom/cp/cuda/gather.cuh"
#include "headroom/cp/cuda/in_place_gather.cuh"
#include "headroom/cp/cuda/pipelined_gather.cuh"
#include "headroom/cuda/async_resource.hpp"
#include "headroom/cuda/device.hpp"
#include "headroom/cuda/stream.hpp"
#include "headroom/nccl/bootstrap.hpp"
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

std::vector<int> two_devices() {
  int const n = headroom::cuda::device_count();
  REQUIRE_MESSAGE(n >= 2, "the cp NCCL tests need 2 GPUs, found " << n);
  return {0, 1};
}

template <class T>
std::vector<T> random_values(std::mt19937_64& gen, std::size_t n) {
  std::vector<T> v(n);
  std::uniform_int_distribution<int> d(-64, 64);  // small integers: exact in bf16 and in sums
  for (auto& x : v) x = static_cast<T>(static_cast<float>(d(gen)));
  return v;
}

// Per-token statistic on device: the row maximum, as a stand-in for a label log-prob.
__global__ void row_max_kernel(float const* in, float* out, i64 rows, i64 width) {
  for (i64 r = blockIdx.x * static_cast<i64>(blockDim.x) + threadIdx.x; r < rows; r += static_cast<i64>(gridDim.x) * blockDim.x) {
    float m = in[r * width];
    for (i64 j = 1; j < width; ++j) m = fmaxf(m, in[r * width + j]);
    out[r] = m;
  }
}

// A random packed batch drawn from `seed` (the same on both ranks), its tensor x and this rank's split.
template <class L, class T>
struct gather_case {
  gather_case(nccl::communicator& comm, std::uint64_t seed, i64 width)
      : shared(seed), pad(cp_test::random_padding<L>(shared, comm.size(), 16, 64)),
        x(random_values<T>(shared, static_cast<std::size_t>(pad.padded_rows() * width))),
        p(std::span<i64 const>(pad.padded_cu_seqlens()), comm.size(), comm.rank()),
        local(static_cast<std::size_t>(p.local_rows() * width)) {
    cp::split(p, matrix_view<T const>(x.data(), p.global_rows(), width), matrix_view<T>(local.data(), p.local_rows(), width));
  }
  std::mt19937_64 shared;
  decltype(cp_test::random_padding<L>(std::declval<std::mt19937_64&>(), 1, 1, 1)) pad;
  std::vector<T> x;
  partition<L> p;
  std::vector<T> local;
};

template <class L, class T>
void gather_round_trip(nccl::communicator& comm, std::uint64_t seed, i64 width) {
  headroom::cuda::stream stream;
  gather_case<L, T> const g(comm, seed, width);
  auto const& [shared, pad, x, p, local] = g;
  cp::cuda::device_cu_seqlens cu(pad.padded_cu_seqlens(), stream);
  device_vector<T> d_local(local), d_out(x.size()), d_ws(static_cast<std::size_t>(cp::gather_workspace_rows(p) * width));
  cp::cuda::gather(comm, p, cu.view(), matrix_view<T const>(d_local.data(), p.local_rows(), width),
                   matrix_view<T>(d_out.data(), p.global_rows(), width),
                   matrix_view<T>(d_ws.data(), cp::gather_workspace_rows(p), width), stream);
  stream.synchronize();
  CHECK(same_bytes(d_out.download(), x));
  // Chunked: a workspace of about the longest sequence, one all-gather per chunk of sequences.
  i64 const rows = cp::gather_workspace_rows(p, p.longest_sequence() + 5);
  device_vector<T> d_small(static_cast<std::size_t>(rows * width) + 1), d_out2(x.size());
  cp::cuda::gather(comm, p, cu.view(), matrix_view<T const>(d_local.data(), p.local_rows(), width),
                   matrix_view<T>(d_out2.data(), p.global_rows(), width), matrix_view<T>(d_small.data(), rows, width), stream);
  stream.synchronize();
  CHECK(same_bytes(d_out2.download(), x));
}

// The pipelined gather against the host tensor, for several chunk counts (1: no overlap; more
// chunks than fit evenly: a short last chunk), and captured in a CUDA graph.
template <class L, class T>
void pipelined_round_trip(nccl::communicator& comm, std::uint64_t seed, i64 width, int chunks, bool graph = false) {
  headroom::cuda::stream stream;
  gather_case<L, T> const g(comm, seed, width);
  auto const& [shared, pad, x, p, local] = g;
  cp::cuda::device_cu_seqlens cu(pad.padded_cu_seqlens(), stream);
  cp::cuda::gather_pipeline pipe(chunks);
  i64 const ws_rows = pipe.workspace_rows(p);
  if (!std::same_as<L, contiguous>) {
    i64 const k = chunks <= 0 ? 1 : std::min<i64>(chunks, p.local_rows());
    CHECK(pipe.chunks_for(p.local_rows()) == k);
    CHECK(ws_rows == std::min<i64>(2, k) * comm.size() * ((p.local_rows() + k - 1) / k));
  }
  device_vector<T> d_local(local), d_out(x.size()), d_ws(static_cast<std::size_t>(ws_rows * width) + 1);
  auto run = [&] {
    pipe.gather(comm, p, cu.view(), matrix_view<T const>(d_local.data(), p.local_rows(), width),
                matrix_view<T>(d_out.data(), p.global_rows(), width), matrix_view<T>(d_ws.data(), ws_rows, width), stream);
  };
  if (graph) {
    cudaGraph_t g = nullptr;
    cudaGraphExec_t exec = nullptr;
    HEADROOM_CUDA_TRY(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeThreadLocal));
    run();
    HEADROOM_CUDA_TRY(cudaStreamEndCapture(stream.get(), &g));
    HEADROOM_CUDA_TRY(cudaGraphInstantiate(&exec, g, 0));
    for (int i = 0; i < 2; ++i) {
      d_out.fill_bytes(0xAB);
      HEADROOM_CUDA_TRY(cudaGraphLaunch(exec, stream.get()));
      stream.synchronize();
      CHECK(same_bytes(d_out.download(), x));
    }
    HEADROOM_CUDA_TRY(cudaGraphExecDestroy(exec));
    HEADROOM_CUDA_TRY(cudaGraphDestroy(g));
  } else {
    run();
    stream.synchronize();
    CHECK(same_bytes(d_out.download(), x));
  }
}

}  // namespace

TEST_CASE("2-GPU pipelined gather (all-gather of chunk c beside the placement of chunk c-1) equals the host tensor") {
  auto const devices = two_devices();
  nccl::launch_per_device(devices, [](nccl::communicator& comm) {
    for (std::uint64_t seed : {4u, 5u, 6u}) {
      for (int chunks : {1, 2, 3, 7, 64}) {
        CAPTURE(chunks);
        pipelined_round_trip<dual_chunk, __nv_bfloat16>(comm, seed, 64, chunks);
        pipelined_round_trip<dual_chunk, float>(comm, seed, 3, chunks);
        pipelined_round_trip<dual_chunk, std::uint8_t>(comm, seed, 5, chunks);
      }
      pipelined_round_trip<contiguous, __nv_bfloat16>(comm, seed, 64, 4);
      pipelined_round_trip<dual_chunk, __nv_bfloat16>(comm, seed, 64, 0);  // the default: one chunk
    }
    pipelined_round_trip<dual_chunk, __nv_bfloat16>(comm, 8, 64, 5, true);
  });
}

TEST_CASE("2-GPU in-place gather (send/recv straight to the sequence positions) equals the host tensor") {
  auto const devices = two_devices();
  nccl::launch_per_device(devices, [](nccl::communicator& comm) {
    for (std::uint64_t seed : {11u, 12u, 13u, 14u}) {
      auto check = [&](auto tag, i64 width, auto layout) {
        using T = decltype(tag);
        using L = decltype(layout);
        headroom::cuda::stream stream;
        gather_case<L, T> const g(comm, seed, width);
        cp::cuda::device_cu_seqlens cu(g.pad.padded_cu_seqlens(), stream);
        device_vector<T> d_local(g.local), d_out(g.x.size());
        cp::cuda::gather_in_place(comm, g.p, cu.view(), matrix_view<T const>(d_local.data(), g.p.local_rows(), width),
                                  matrix_view<T>(d_out.data(), g.p.global_rows(), width), stream);
        stream.synchronize();
        CHECK(same_bytes(d_out.download(), g.x));
        if constexpr (std::same_as<L, dual_chunk>) CHECK(cp::cuda::in_place_message_bytes(g.p, width * sizeof(T)) > 0);
      };
      check(__nv_bfloat16{}, 64, dual_chunk{});
      check(float{}, 3, dual_chunk{});
      check(std::uint8_t{}, 5, dual_chunk{});
      check(__nv_bfloat16{}, 64, contiguous{});
    }
  });
}

TEST_CASE("2-GPU pipelined gather rejects bad input on each rank before any collective") {
  auto const devices = two_devices();
  nccl::launch_per_device(devices, [](nccl::communicator& comm) {
    headroom::cuda::stream stream;
    std::vector<i64> const cu_host{0, 8, 24};
    partition<> p(cu_host, comm.size(), comm.rank());
    cp::cuda::device_cu_seqlens cu(cu_host, stream);
    cp::cuda::gather_pipeline pipe(2);
    i64 const w = 4;
    i64 const need = pipe.workspace_rows(p);
    CHECK(need == 2 * 2 * 6);
    device_vector<float> local(static_cast<std::size_t>(p.local_rows() * w)), out(static_cast<std::size_t>(24 * w)),
        ws(static_cast<std::size_t>(need * w));
    auto const lv = matrix_view<float const>(local.data(), p.local_rows(), w);
    auto const ov = matrix_view<float>(out.data(), 24, w);
    CHECK_THROWS_WITH_AS(pipe.gather(comm, p, cu.view(), lv, ov, matrix_view<float>(ws.data(), need - 1, w), stream),
                         doctest::Contains("rows, expected at least 24"), headroom::invalid_argument);
    CHECK_THROWS_WITH_AS(pipe.gather(comm, p, cu.view(), lv, ov, matrix_view<float>(ws.data(), need / 2, 2 * w), stream),
                         doctest::Contains("workspace has width 8, expected 4"), headroom::invalid_argument);
    CHECK_THROWS_WITH_AS(pipe.gather(comm, p, cu.view(), lv, matrix_view<float>(out.data(), 23, w),
                                     matrix_view<float>(ws.data(), need, w), stream),
                         doctest::Contains("output"), headroom::invalid_argument);
    CHECK_THROWS_WITH_AS(cp::cuda::gather_in_place(comm, p, cu.view(), lv, matrix_view<float>(out.data(), 23, w), stream),
                         doctest::Contains("output"), headroom::invalid_argument);
    // The group is intact: a good call still gathers.
    pipe.gather(comm, p, cu.view(), lv, ov, matrix_view<float>(ws.data(), need, w), stream);
    stream.synchronize();
  });
}

TEST_CASE("2-GPU NCCL gather equals the host tensor (both layouts, several element types)") {
  auto const devices = two_devices();
  nccl::launch_per_device(devices, [](nccl::communicator& comm) {
    for (std::uint64_t seed : {1u, 2u, 3u}) {
      gather_round_trip<dual_chunk, __nv_bfloat16>(comm, seed, 64);
      gather_round_trip<dual_chunk, float>(comm, seed, 3);
      gather_round_trip<dual_chunk, std::uint8_t>(comm, seed, 5);
      gather_round_trip<contiguous, __nv_bfloat16>(comm, seed, 64);
      gather_round_trip<contiguous, double>(comm, seed, 1);
    }
  });
}

TEST_CASE("2-GPU NCCL gather_adjoint equals the host adjoint") {
  auto const devices = two_devices();
  nccl::launch_per_device(devices, [](nccl::communicator& comm) {
    headroom::cuda::stream stream;
    int const cp_size = comm.size();
    std::mt19937_64 shared(9);
    auto const pad = cp_test::random_padding<dual_chunk>(shared, cp_size, 10, 50);
    i64 const w = 4;
    partition<> p(std::span<i64 const>(pad.padded_cu_seqlens()), cp_size, comm.rank());
    // dy differs per rank; the expected dx sums split(dy_k) over both ranks.
    std::vector<std::vector<float>> dys;
    for (int k = 0; k < cp_size; ++k) dys.push_back(random_values<float>(shared, static_cast<std::size_t>(p.global_rows() * w)));
    std::vector<float> expect(static_cast<std::size_t>(p.local_rows() * w), 0.f), part(expect.size());
    for (auto const& dy : dys) {
      cp::split(p, matrix_view<float const>(dy.data(), p.global_rows(), w), matrix_view<float>(part.data(), p.local_rows(), w));
      for (std::size_t i = 0; i < expect.size(); ++i) expect[i] += part[i];
    }
    cp::cuda::device_cu_seqlens cu(pad.padded_cu_seqlens(), stream);
    device_vector<float> d_dy(dys[static_cast<std::size_t>(comm.rank())]), d_dx(expect.size()), d_ws(dys[0].size());
    cp::cuda::gather_adjoint(comm, p, cu.view(), matrix_view<float const>(d_dy.data(), p.global_rows(), w),
                             matrix_view<float>(d_dx.data(), p.local_rows(), w), matrix_view<float>(d_ws.data(), p.global_rows(), w),
                             stream);
    stream.synchronize();
    CHECK(d_dx.download() == expect);
  });
}

TEST_CASE("2-GPU collect_output: full, none and per_token agree with the host; normalize_loss on device") {
  auto const devices = two_devices();
  nccl::launch_per_device(devices, [](nccl::communicator& comm) {
    headroom::cuda::stream stream;
    headroom::cuda::async_resource mr(comm.device());
    int const cp_size = comm.size();
    std::mt19937_64 shared(13);
    auto const pad = cp_test::random_padding<dual_chunk>(shared, cp_size, 8, 40);
    i64 const vocab = 37;
    auto const logits = random_values<float>(shared, static_cast<std::size_t>(pad.padded_rows() * vocab));
    partition<> p(std::span<i64 const>(pad.padded_cu_seqlens()), cp_size, comm.rank());
    std::vector<float> local(static_cast<std::size_t>(p.local_rows() * vocab));
    cp::split(p, matrix_view<float const>(logits.data(), p.global_rows(), vocab), matrix_view<float>(local.data(), p.local_rows(), vocab));
    std::vector<float> expect_max(static_cast<std::size_t>(p.global_rows()));
    for (i64 r = 0; r < p.global_rows(); ++r)
      expect_max[static_cast<std::size_t>(r)] = *std::max_element(logits.begin() + r * vocab, logits.begin() + (r + 1) * vocab);

    cp::cuda::device_cu_seqlens cu(pad.padded_cu_seqlens(), stream);
    device_vector<float> d_local(local), d_full(logits.size()), d_pt(expect_max.size());
    auto const lv = matrix_view<float const>(d_local.data(), p.local_rows(), vocab);
    auto const full = cp::cuda::collect_output<cp::gather_output::full>(
        comm, p, cu.view(), lv, matrix_view<float>(d_full.data(), p.global_rows(), vocab), mr, stream);
    device_vector<float> d_full2(logits.size());
    cp::cuda::collect_output<cp::gather_output::full>(comm, p, cu.view(), lv, matrix_view<float>(d_full2.data(), p.global_rows(), vocab),
                                                      mr, stream, cp::no_per_token{}, {p.longest_sequence()});
    auto const none = cp::cuda::collect_output<cp::gather_output::none>(comm, p, cu.view(), lv, matrix_view<float>{}, mr, stream);
    auto row_max = [](matrix_view<float const> in, matrix_view<float> out, headroom::cuda::stream_view s) {
      row_max_kernel<<<32, 128, 0, s.get()>>>(in.data, out.data, in.rows, in.width);
    };
    auto const pt = cp::cuda::collect_output<cp::gather_output::per_token>(
        comm, p, cu.view(), lv, matrix_view<float>(d_pt.data(), p.global_rows(), 1), mr, stream, row_max);
    stream.synchronize();
    CHECK(d_full.download() == logits);
    CHECK(d_full2.download() == logits);
    CHECK(d_pt.download() == expect_max);
    CHECK_FALSE(full.local);
    CHECK(none.local);
    CHECK(none.rows.data == d_local.data());
    CHECK(pt.rows.rows == p.global_rows());

    // Loss normalisation over the 2 ranks (cp = 2, dp = 1): the sums of the whole batch.
    double const local_sum = 1.5 * (comm.rank() + 1), local_tokens = 3.0 + comm.rank();
    device_vector<double> stats(std::vector<double>{local_sum, local_tokens, -1.0, -1.0});
    cp::cuda::normalize_loss(comm, std::span<double>(stats.data(), 4), cp_size, stream);
    stream.synchronize();
    auto const got = stats.download();
    CHECK(got[0] == doctest::Approx(4.5));
    CHECK(got[1] == doctest::Approx(7.0));
    CHECK(got[2] == doctest::Approx(4.5 / 7.0));
    CHECK(got[3] == doctest::Approx(1.0 / 7.0));
    CHECK_THROWS_WITH_AS(cp::cuda::normalize_loss(comm, std::span<double>(stats.data(), 3), cp_size, stream),
                         doctest::Contains("stats has 3 doubles"), invalid_argument);
    // A partition for another group size is rejected before any collective.
    partition<> wrong(std::span<i64 const>(pad.padded_cu_seqlens()), 1, 0);
    CHECK_THROWS_WITH_AS(cp::cuda::gather(comm, wrong, cu.view(), lv, matrix_view<float>(d_full.data(), p.global_rows(), vocab),
                                          matrix_view<float>{}, stream),
                         doctest::Contains("communicator has 2 ranks, the partition expects cp = 1"), invalid_argument);
  });
}
