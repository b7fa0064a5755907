// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <atomic>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "headroom/cp/gather.hpp"
#include "headroom/cp/loss.hpp"
#include "headroom/cp/output.hpp"
#include "headroom/host/thread_group.hpp"
#include "random_batch.hpp"
#include "views.hpp"

using namespace headroom;
using cp_test::cview;
using cp_test::mview;
using cp::contiguous;
using cp::dual_chunk;
using cp::matrix_view;
using cp::partition;
using cp_test::i64;
using host::launch;
using host::thread_communicator;

namespace {
// Every rank rebuilds the same batch from a shared seed.
template <class L>
std::pair<cp::padding, std::vector<float>> shared_batch(std::uint64_t seed, int cp_size, i64 width) {
  std::mt19937_64 gen(seed);
  auto pad = cp_test::random_padding<L>(gen, cp_size, 16, 64);
  return {pad, cp_test::random_rows<float>(gen, pad.padded_rows(), width)};
}
}  // namespace

TEST_CASE_TEMPLATE("thread_group gather(split(x)) == x at cp = 4 and cp = 8", L, dual_chunk, contiguous) {
  for (int cp_size : {4, 8}) {
    for (std::uint64_t seed : {1u, 2u, 3u}) {
      i64 const width = 3;
      launch(cp_size, [&](thread_communicator& comm) {
        auto const [pad, x] = shared_batch<L>(seed, cp_size, width);
        partition<L> p(std::span<i64 const>(pad.padded_cu_seqlens()), cp_size, comm.rank());
        std::vector<float> local(static_cast<std::size_t>(p.local_rows() * width));
        cp::split(p, cview(x, width), mview(local, width));
        std::vector<float> out(x.size(), -1.f), w(x.size(), -2.f);
        cp::gather(comm, p, cview(local, width), mview(out, width), mview(w, width));
        CHECK(out == x);
        std::vector<float> out2(x.size(), -1.f);
        cp::gather(comm, p, cview(local, width), mview(out2, width));  // allocating overload
        CHECK(out2 == x);
      });
    }
  }
}

TEST_CASE("thread_group gather_adjoint: sum_r <gather(x)_r, dy_r> == sum_r <x_r, adjoint(dy)_r>, and the cp factor") {
  for (int cp_size : {1, 2, 4, 8}) {
    std::vector<double> lhs(static_cast<std::size_t>(cp_size)), rhs(static_cast<std::size_t>(cp_size));
    launch(cp_size, [&](thread_communicator& comm) {
      std::mt19937_64 shared(99);
      auto const pad = cp_test::random_padding<dual_chunk>(shared, cp_size, 10, 30);
      i64 const w = 2;
      partition<> p(std::span<i64 const>(pad.padded_cu_seqlens()), cp_size, comm.rank());
      std::mt19937_64 mine(1000 + static_cast<std::uint64_t>(comm.rank()));
      auto const x = cp_test::random_rows<double>(mine, p.local_rows(), w);
      auto const dy = cp_test::random_rows<double>(mine, p.global_rows(), w);
      std::vector<double> y(dy.size()), ws(dy.size()), dx(x.size());
      cp::gather(comm, p, cview(x, w), mview(y, w), mview(ws, w));
      cp::gather_adjoint(comm, p, cview(dy, w), mview(dx, w), mview(ws, w));
      lhs[static_cast<std::size_t>(comm.rank())] = cp_test::dot(y, dy);
      rhs[static_cast<std::size_t>(comm.rank())] = cp_test::dot(x, dx);
      // Identical output gradients on every rank: the adjoint returns cp x split(dy).
      std::vector<double> same = cp_test::random_rows<double>(shared, p.global_rows(), w), dx_same(x.size()), s(x.size());
      cp::gather_adjoint(comm, p, cview(same, w), mview(dx_same, w), mview(ws, w));
      cp::split(p, cview(same, w), mview(s, w));
      for (std::size_t i = 0; i < s.size(); ++i) CHECK(dx_same[i] == cp_size * s[i]);
    });
    double l = 0, r = 0;
    for (int k = 0; k < cp_size; ++k) l += lhs[static_cast<std::size_t>(k)], r += rhs[static_cast<std::size_t>(k)];
    CHECK(l == r);  // integer-valued doubles: exact
  }
}

TEST_CASE("collect_output: full, none and per_token give the same per-token result; plans predict the bytes") {
  int const cp_size = 4;
  i64 const vocab = 6;
  launch(cp_size, [&](thread_communicator& comm) {
    auto const [pad, logits] = shared_batch<dual_chunk>(7, cp_size, vocab);
    partition<> p(std::span<i64 const>(pad.padded_cu_seqlens()), cp_size, comm.rank());
    std::vector<float> local(static_cast<std::size_t>(p.local_rows() * vocab));
    cp::split(p, cview(logits, vocab), mview(local, vocab));
    // Per-token statistic: the row maximum (a stand-in for a label log-prob).
    auto row_max = [](matrix_view<float const> in, matrix_view<float> out) {
      for (i64 t = 0; t < in.rows; ++t) {
        float m = in.row(t)[0];
        for (i64 j = 1; j < in.width; ++j) m = std::max(m, in.row(t)[j]);
        out.row(t)[0] = m;
      }
    };
    std::vector<float> expect(static_cast<std::size_t>(p.global_rows()));
    row_max(cview(logits, vocab), mview(expect, 1));

    auto const full_plan = cp::plan_output<cp::gather_output::full>(p, vocab, sizeof(float));
    CHECK(full_plan.output_buffer_bytes == logits.size() * sizeof(float));
    CHECK(full_plan.workspace_bytes == logits.size() * sizeof(float));
    std::vector<float> full(logits.size(), -1.f);
    auto const got_full = cp::collect_output<cp::gather_output::full>(comm, p, cview(local, vocab), mview(full, vocab));
    CHECK(full == logits);
    CHECK_FALSE(got_full.local);
    CHECK(got_full.cu_seqlens.size() == pad.padded_cu_seqlens().size());

    auto const none_plan = cp::plan_output<cp::gather_output::none>(p, vocab, sizeof(float));
    CHECK(none_plan.extra_bytes() == 0);
    CHECK(none_plan.result_rows == p.local_rows());
    auto const got_none = cp::collect_output<cp::gather_output::none>(comm, p, cview(local, vocab), matrix_view<float>{});
    CHECK(got_none.local);
    CHECK(got_none.rows.data == local.data());
    CHECK(got_none.cu_seqlens.back() == p.local_rows());

    auto const pt_plan = cp::plan_output<cp::gather_output::per_token>(p, 1, sizeof(float));
    CHECK(pt_plan.output_buffer_bytes == expect.size() * sizeof(float));
    CHECK(pt_plan.workspace_bytes == (expect.size() + static_cast<std::size_t>(p.local_rows())) * sizeof(float));
    CHECK(pt_plan.describe().find("per_token") != std::string::npos);
    std::vector<float> per_token(expect.size(), -1.f);
    auto const got_pt = cp::collect_output<cp::gather_output::per_token>(
        comm, p, cview(local, vocab), mview(per_token, 1), host::aligned_resource{}, {}, row_max);
    CHECK(per_token == expect);
    CHECK(got_pt.rows.data == per_token.data());
    // The full policy's extra memory over none is a factor of the local output: 2 * cp here.
    CHECK(full_plan.extra_bytes() == 2 * static_cast<std::size_t>(cp_size) * local.size() * sizeof(float));
  });
}

TEST_CASE("normalize_loss over a DP x CP mesh of 8 ranks (dp = 2, cp = 4) equals the global token mean") {
  int const cp_size = 4, dp_size = 2;
  // Each DP replica has its own batch; compute the reference mean on the host first.
  std::vector<cp::padding> pads;
  std::vector<std::vector<float>> losses, masks;  // per replica, per padded global row
  double ref_sum = 0, ref_tokens = 0;
  std::mt19937_64 gen(31);
  for (int d = 0; d < dp_size; ++d) {
    pads.push_back(cp_test::random_padding<dual_chunk>(gen, cp_size, 10, 30));
    losses.push_back(cp_test::random_rows<float>(gen, pads.back().padded_rows(), 1));
    std::vector<float> m(losses.back().size());
    for (auto& x : m) x = static_cast<float>(gen() % 2);
    for (std::size_t i = 0; i < m.size(); ++i) ref_sum += m[i] * losses.back()[i], ref_tokens += m[i];
    masks.push_back(std::move(m));
  }
  launch(cp_size * dp_size, [&](thread_communicator& world) {
    int const d = world.rank() / cp_size;
    auto cp_comm = world.split(d, world.rank());
    auto const& pad = pads[static_cast<std::size_t>(d)];
    partition<> p(std::span<i64 const>(pad.padded_cu_seqlens()), cp_size, cp_comm.rank());
    std::vector<float> l(static_cast<std::size_t>(p.local_rows())), m(l.size());
    cp::split(p, cview(losses[static_cast<std::size_t>(d)], 1), mview(l, 1));
    cp::split(p, cview(masks[static_cast<std::size_t>(d)], 1), mview(m, 1));
    double s = 0, n = 0;
    for (std::size_t i = 0; i < l.size(); ++i) s += m[i] * l[i], n += m[i];
    // CP-local loss (gather_output::none): reduce both over DP x CP.
    auto const local = cp::normalize_loss<cp::loss_placement::cp_local>(world, s, n, cp_size);
    CHECK(local.tokens == ref_tokens);
    CHECK(local.loss_sum == doctest::Approx(ref_sum));
    CHECK(local.mean == doctest::Approx(ref_sum / ref_tokens));
    CHECK(local.grad_scale == doctest::Approx(1.0 / ref_tokens));
    // Replicated loss (every CP rank holds its replica's full sums): same mean and counts, and a
    // gradient scale with the extra 1/cp that cancels gather's reduce-scatter.
    double fs = 0, fn = 0;
    auto const& fl = losses[static_cast<std::size_t>(d)];
    auto const& fm = masks[static_cast<std::size_t>(d)];
    for (std::size_t i = 0; i < fl.size(); ++i) fs += fm[i] * fl[i], fn += fm[i];
    auto const rep = cp::normalize_loss<cp::loss_placement::cp_replicated>(world, fs, fn, cp_size);
    CHECK(rep.tokens == ref_tokens);
    CHECK(rep.mean == doctest::Approx(ref_sum / ref_tokens));
    CHECK(rep.grad_scale == doctest::Approx(1.0 / (cp_size * ref_tokens)));
    // The AReaL #1242 bug, for contrast: counting over DP only under-reports by cp.
    auto dp_comm = world.split(cp_comm.rank(), world.rank());
    auto const wrong = cp::normalize_loss(dp_comm, s, n, 1);
    if (ref_tokens > 0) CHECK(wrong.tokens < ref_tokens);
  });
}

TEST_CASE("normalize_loss: no valid token gives 0, not NaN; bad counts throw on every rank") {
  launch(4, [](thread_communicator& c) {
    auto const m = cp::normalize_loss(c, 0.0, 0.0, 2);
    CHECK(m.mean == 0);
    CHECK(m.grad_scale == 0);
    CHECK_THROWS_WITH_AS((void)cp::normalize_loss(c, 1.0, 1.0, 3), doctest::Contains("4 ranks, not a multiple of cp_size = 3"),
                         invalid_argument);
    CHECK_THROWS_WITH_AS((void)cp::normalize_loss(c, 1.0, 1.0, 0), doctest::Contains("cp_size = 0"), invalid_argument);
    if (c.rank() == 2)
      CHECK_THROWS_WITH_AS((void)cp::normalize_loss(c, 1.0, -3.0, 2), doctest::Contains("local token count -3"), invalid_argument);
    else
      CHECK_THROWS_WITH_AS((void)cp::normalize_loss(c, 1.0, 5.0, 2), doctest::Contains("invalid token count"), collective_mismatch);
    auto const again = cp::normalize_loss(c, 1.0, 1.0, 2);  // the group is still usable
    CHECK(again.tokens == 4);
  });
}

TEST_CASE("gather: a bad argument on one rank makes every rank throw, nobody hangs") {
  std::vector<int> const cu{0, 8, 24};
  launch(4, [&](thread_communicator& comm) {
    partition<> p(cu, 4, comm.rank());
    std::vector<float> local(6), out(24), w(24);
    // Rank 3 passes a local tensor with the wrong row count.
    i64 const rows = comm.rank() == 3 ? 5 : 6;
    if (comm.rank() == 3)
      CHECK_THROWS_WITH_AS(cp::gather(comm, p, matrix_view<float const>(local.data(), rows, 1), mview(out, 1), mview(w, 1)),
                           doctest::Contains("local input has shape [5, 1], expected [6, 1]"), invalid_argument);
    else
      CHECK_THROWS_WITH_AS(cp::gather(comm, p, matrix_view<float const>(local.data(), rows, 1), mview(out, 1), mview(w, 1)),
                           doctest::Contains("another rank rejected"), collective_mismatch);
    // A partition for the wrong rank.
    partition<> wrong(cu, 4, (comm.rank() + 1) % 4);
    CHECK_THROWS_WITH_AS(cp::gather(comm, wrong, cview(local, 1), mview(out, 1), mview(w, 1)),
                         doctest::Contains("partition is for cp rank"), invalid_argument);
    // A partition for another CP size.
    std::vector<int> const cu2{0, 16, 24};
    partition<> p2(cu2, 2, comm.rank() % 2);
    std::vector<float> l2(12);
    CHECK_THROWS_WITH_AS(cp::gather(comm, p2, cview(l2, 1), mview(out, 1), mview(w, 1)),
                         doctest::Contains("communicator has 4 ranks, the partition expects cp = 2"), invalid_argument);
    // Ranks that disagree on the batch (same sizes, different boundaries).
    std::vector<int> const other{0, 16, 24};
    partition<> q(comm.rank() == 0 ? other : cu, 4, comm.rank());
    CHECK_THROWS_WITH_AS(cp::gather(comm, q, cview(local, 1), mview(out, 1), mview(w, 1)),
                         doctest::Contains("different batches"), collective_mismatch);
    // Workspace aliasing the output.
    CHECK_THROWS_WITH_AS(cp::gather(comm, p, cview(local, 1), mview(out, 1), mview(out, 1)), doctest::Contains("overlap"),
                         invalid_argument);
    // After all that, the group still works.
    std::vector<float> x(24);
    for (int i = 0; i < 24; ++i) x[static_cast<std::size_t>(i)] = static_cast<float>(i);
    cp::split(p, cview(x, 1), mview(local, 1));
    cp::gather(comm, p, cview(local, 1), mview(out, 1), mview(w, 1));
    CHECK(out == x);
  });
}

TEST_CASE("collect_output<per_token>: a wrong output shape on one rank throws everywhere before the function runs") {
  std::vector<int> const cu{0, 8, 24};
  std::atomic<int> calls{0};
  launch(4, [&](thread_communicator& comm) {
    partition<> p(cu, 4, comm.rank());
    std::vector<float> local(12), out(comm.rank() == 1 ? 23 : 24);
    auto fn = [&](matrix_view<float const>, matrix_view<float>) { ++calls; };
    CHECK_THROWS_AS(cp::collect_output<cp::gather_output::per_token>(comm, p, cview(local, 2), mview(out, 1),
                                                                     host::aligned_resource{}, {}, fn),
                    error);
  });
  CHECK(calls == 0);
}

TEST_CASE("plan_gather_chunks: whole sequences in order, each chunk within the limit") {
  std::mt19937_64 gen(41);
  for (int trial = 0; trial < 30; ++trial) {
    int const cp_size = 1 << (trial % 4);
    auto const pad = cp_test::random_padding<dual_chunk>(gen, cp_size, 20, 60);
    partition<> p(std::span<i64 const>(pad.padded_cu_seqlens()), cp_size, 0);
    i64 const limit = p.longest_sequence() + static_cast<i64>(gen() % 100);
    auto const chunks = cp::plan_gather_chunks(p, limit);
    i64 next_seq = 0, next_row = 0;
    for (auto const& c : chunks) {
      CHECK(c.first_sequence == next_seq);
      CHECK(c.global_begin == next_row);
      CHECK(c.last_sequence > c.first_sequence);
      CHECK(c.rows() <= std::max(limit, i64{0}));
      next_seq = c.last_sequence;
      next_row = c.global_end;
    }
    CHECK(next_seq == p.sequences());
    CHECK(next_row == p.global_rows());
    CHECK(cp::gather_workspace_rows(p, limit) <= limit);
    CHECK(cp::gather_workspace_rows(p) == p.global_rows());
    CHECK(cp::plan_gather_chunks(p, 0).size() == 1);
  }
  std::vector<int> const cu{0, 8, 24};
  partition<> p(cu, 2, 0);
  CHECK_THROWS_WITH_AS((void)cp::plan_gather_chunks(p, 15), doctest::Contains("cannot hold the longest padded sequence (16 rows)"),
                       invalid_argument);
  CHECK(cp::gather_workspace_rows(partition<contiguous>(cu, 2, 0), 8) == 0);
}

TEST_CASE_TEMPLATE("chunked gather with a bounded workspace equals the one-collective gather", L, dual_chunk, contiguous) {
  for (int cp_size : {2, 4, 8}) {
    launch(cp_size, [&](thread_communicator& comm) {
      auto const [pad, x] = shared_batch<L>(55 + static_cast<std::uint64_t>(cp_size), cp_size, 2);
      partition<L> p(std::span<i64 const>(pad.padded_cu_seqlens()), cp_size, comm.rank());
      std::vector<float> local(static_cast<std::size_t>(p.local_rows() * 2));
      cp::split(p, cview(x, 2), mview(local, 2));
      for (i64 extra : {i64{0}, i64{7}, i64{64}}) {
        i64 const rows = cp::gather_workspace_rows(p, p.longest_sequence() + extra);
        std::vector<float> w(static_cast<std::size_t>(rows * 2), -3.f), out(x.size(), -1.f);
        cp::gather(comm, p, cview(local, 2), mview(out, 2), matrix_view<float>(w.data(), rows, 2));
        CHECK(out == x);
      }
      auto const plan = cp::plan_output<cp::gather_output::full>(p, 2, sizeof(float), {p.longest_sequence()});
      CHECK(plan.workspace_bytes == static_cast<std::size_t>(cp::gather_workspace_rows(p, p.longest_sequence()) * 2) * sizeof(float));
      std::vector<float> out(x.size(), -1.f);
      cp::collect_output<cp::gather_output::full>(comm, p, cview(local, 2), mview(out, 2), host::aligned_resource{}, {},
                                                  cp::no_per_token{}, {p.longest_sequence()});
      CHECK(out == x);
    });
  }
}

TEST_CASE("chunked gather: a workspace below the longest sequence, or different sizes on different ranks, throws everywhere") {
  std::vector<int> const cu{0, 8, 24, 32};
  launch(2, [&](thread_communicator& comm) {
    partition<> p(cu, 2, comm.rank());
    std::vector<float> local(16), out(32), w(32);
    if (comm.rank() == 0)
      CHECK_THROWS_WITH_AS(cp::gather(comm, p, cview(local, 1), mview(out, 1), matrix_view<float>(w.data(), 15, 1)),
                           doctest::Contains("workspace has 15 rows, expected at least the longest padded sequence (16 rows)"),
                           invalid_argument);
    else
      CHECK_THROWS_AS(cp::gather(comm, p, cview(local, 1), mview(out, 1), matrix_view<float>(w.data(), 16, 1)), collective_mismatch);
    // 16 vs 24 rows: both legal, but the chunks (and so the collectives) would differ.
    i64 const rows = comm.rank() == 0 ? 16 : 24;
    CHECK_THROWS_WITH_AS(cp::gather(comm, p, cview(local, 1), mview(out, 1), matrix_view<float>(w.data(), rows, 1)),
                         doctest::Contains("different batches"), collective_mismatch);
  });
}

TEST_CASE("gather moves any trivially copyable element through the thread_group (3-byte struct)") {
  struct rgb {
    unsigned char c[3];
    bool operator==(rgb const&) const = default;
  };
  launch(4, [](thread_communicator& comm) {
    std::mt19937_64 gen(61);
    auto const pad = cp_test::random_padding<dual_chunk>(gen, 4, 8, 30);
    partition<> p(std::span<i64 const>(pad.padded_cu_seqlens()), 4, comm.rank());
    std::vector<rgb> x(static_cast<std::size_t>(p.global_rows() * 5));
    for (auto& e : x) e = {{static_cast<unsigned char>(gen()), static_cast<unsigned char>(gen()), static_cast<unsigned char>(gen())}};
    std::vector<rgb> local(static_cast<std::size_t>(p.local_rows() * 5)), out(x.size());
    cp::split(p, cview(x, 5), mview(local, 5));
    cp::gather(comm, p, cview(local, 5), mview(out, 5));
    CHECK(out == x);
  });
}

TEST_CASE("collect_output<none> checks the group and the shard shape") {
  std::vector<int> const cu{0, 8, 24};
  launch(2, [&](thread_communicator& comm) {
    partition<> p(cu, 2, comm.rank());
    std::vector<float> local(12);
    CHECK_THROWS_WITH_AS((void)cp::collect_output<cp::gather_output::none>(comm, p, matrix_view<float const>(local.data(), 11, 1),
                                                                           matrix_view<float>{}),
                         doctest::Contains("local output has shape [11, 1], expected [12, 1]"), invalid_argument);
    partition<> four(cu, 4, comm.rank());
    CHECK_THROWS_WITH_AS((void)cp::collect_output<cp::gather_output::none>(comm, four, matrix_view<float const>(local.data(), 6, 1),
                                                                           matrix_view<float>{}),
                         doctest::Contains("the partition expects cp = 4"), invalid_argument);
  });
}
