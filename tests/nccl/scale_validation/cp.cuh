// SPDX-License-Identifier: Apache-2.0
#pragma once
// Scale validation [cp]: correctness over CP x DP groups, then bandwidth at cp = N.
// Part of tests/nccl/scale_validation.cu (one program; this folder is not globbed as programs).
#include "headroom/cp/cuda/gather.cuh"
#include "headroom/cp/cuda/ops.cuh"
#include "headroom/cp/loss.hpp"
#include "headroom/cp/ops.hpp"
#include "headroom/cp/padding.hpp"
#include "headroom/cp/partition.hpp"

#include "shared_state.cuh"

namespace scale_validation {

template <class T>
std::vector<T> random_rows(std::mt19937_64& gen, i64 rows, i64 width) {
  std::vector<T> v(static_cast<std::size_t>(rows * width));
  auto* b = reinterpret_cast<unsigned char*>(v.data());
  std::size_t const nb = v.size() * sizeof(T);
  for (std::size_t i = 0; i < nb; i += 8) {
    u64 const x = gen();
    std::memcpy(b + i, &x, std::min<std::size_t>(8, nb - i));
  }
  return v;
}

/// Raw lengths 0..max_len (empty sequences included), padded for `L` at `cp`; sometimes a
/// total multiple that forces a dummy sequence.
template <class L>
cp::padding random_padding(std::mt19937_64& gen, int cp_size, int max_sequences, int max_len) {
  std::vector<i64> raw{0};
  int const n = 1 + static_cast<int>(gen() % static_cast<unsigned>(max_sequences));
  for (int i = 0; i < n; ++i) raw.push_back(raw.back() + static_cast<i64>(gen() % static_cast<unsigned>(max_len + 1)));
  if (raw.back() == 0) raw.back() = 1;
  auto const align = cp::alignment_for<L>(cp_size);
  return cp::padding(raw, align, gen() % 3 == 0 ? 2 * align : 1);
}

struct group_layout {
  int cp = 1, dp = 1;
  std::string label() const { return headroom::detail::concat("cp=", cp, " dp=", dp); }
};

u64 batch_seed(u64 seed, group_layout g, int block, int dp_index, int trial) {
  return mix64(seed ^ mix64(static_cast<u64>(g.cp) * 1000003ull + static_cast<u64>(g.dp) * 10007ull +
                            static_cast<u64>(block) * 101ull + static_cast<u64>(dp_index) * 7ull +
                            static_cast<u64>(trial) * 0x100000001ull));
}

/// One random batch through split / pad_split / gather on one CP group, against the host.
template <class L, class T>
void cp_case(shared_state& st, nccl::communicator& cpc, int world_rank, std::string const& tag, std::string const& what,
             u64 seed, i64 width, hc::stream_view s) {
  arena_scope scope;  // the dbufs below come from the section's scratch arena (declared first: rewound last)
  int const cp_size = cpc.size();
  std::mt19937_64 gen(seed);  // the same on every rank of the CP group
  auto const pd = random_padding<L>(gen, cp_size, 16, 1500);
  auto const raw = random_rows<T>(gen, pd.raw_rows(), width);
  cp::partition<L> p(pd.padded_cu_seqlens(), cp_size, cpc.rank());
  std::vector<T> padded(static_cast<std::size_t>(pd.padded_rows() * width));
  cp::pad(pd, cp::matrix_view<T const>(raw.data(), pd.raw_rows(), width), cp::matrix_view<T>(padded.data(), pd.padded_rows(), width));
  std::vector<T> local(static_cast<std::size_t>(p.local_rows() * width)), local_ps(local.size());
  cp::split(p, cp::matrix_view<T const>(padded.data(), p.global_rows(), width), cp::matrix_view<T>(local.data(), p.local_rows(), width));
  cp::pad_split(pd, p, cp::matrix_view<T const>(raw.data(), pd.raw_rows(), width),
                cp::matrix_view<T>(local_ps.data(), p.local_rows(), width));
  std::string const detail = headroom::detail::concat(what, ", seed ", seed, ", ", p.describe());
  st.checks.record("cp", tag + ": host cp::pad_split == host cp::split(cp::pad)", same_bytes(local, local_ps), world_rank, detail);

  cp::cuda::device_cu_seqlens cu(pd.padded_cu_seqlens(), s);
  cp::cuda::device_cu_seqlens raw_cu(pd.raw_cu_seqlens().first(static_cast<std::size_t>(pd.raw_sequences()) + 1), s);
  dbuf<T> d_raw(raw.size()), d_padded(padded.size()), d_local(local.size()), d_out(padded.size());
  d_raw.upload(raw, s);
  d_padded.upload(padded, s);
  auto const local_v = cp::matrix_view<T>(d_local.data(), p.local_rows(), width);
  auto const out_v = cp::matrix_view<T>(d_out.data(), p.global_rows(), width);

  d_local.poison(s);
  cp::cuda::split(p, cu.view(), cp::matrix_view<T const>(d_padded.data(), p.global_rows(), width), local_v, s);
  st.checks.record("cp", tag + ": cp::cuda::split == host cp::split (bitwise)", same_bytes(d_local.download(s), local),
                   world_rank, detail);

  d_local.poison(s, 0x5A);
  cp::cuda::pad_split(pd, p, raw_cu.view(), cu.view(), cp::matrix_view<T const>(d_raw.data(), pd.raw_rows(), width), local_v, T{}, s);
  st.checks.record("cp", tag + ": cp::cuda::pad_split (raw, kernel pads) == host cp::split (bitwise)",
                   same_bytes(d_local.download(s), local), world_rank, detail);

  // d_local now holds this rank's shard (from the kernel): gather it back over NCCL.
  i64 const ws_rows = cp::gather_workspace_rows(p);
  dbuf<T> d_ws(static_cast<std::size_t>(ws_rows * width));
  d_out.poison(s);
  d_ws.poison(s);
  cp::cuda::gather(cpc, p, cu.view(), cp::matrix_view<T const>(local_v), out_v, cp::matrix_view<T>(d_ws.data(), ws_rows, width), s);
  st.checks.record("cp", tag + ": cp::cuda::gather (NCCL) == padded full tensor (bitwise)",
                   same_bytes(d_out.download(s), padded), world_rank, detail);

  if constexpr (std::same_as<L, cp::dual_chunk>) {
    i64 const small = cp::gather_workspace_rows(p, p.longest_sequence() + 7);
    dbuf<T> d_small(static_cast<std::size_t>(small * width));
    d_out.poison(s, 0x3C);
    d_small.poison(s);
    cp::cuda::gather(cpc, p, cu.view(), cp::matrix_view<T const>(local_v), out_v, cp::matrix_view<T>(d_small.data(), small, width), s);
    st.checks.record("cp", tag + ": cp::cuda::gather, chunked workspace == padded full tensor (bitwise)",
                     same_bytes(d_out.download(s), padded), world_rank, detail);
  }
}

/// The documented result of normalize_loss (cp/loss.hpp) from the group's sums, written here
/// from the contract (not taken from the cp module's internals).
cp::token_mean expected_token_mean(double group_loss, double group_tokens, int cp_size, bool replicated) {
  double const dup = replicated ? static_cast<double>(cp_size) : 1.0;
  cp::token_mean m;
  m.loss_sum = group_loss / dup;
  m.tokens = group_tokens / dup;
  if (group_tokens > 0) {
    m.mean = group_loss / group_tokens;
    m.grad_scale = 1.0 / group_tokens;
  }
  return m;
}

/// Per raw row: a loss value exact in double sums.
double loss_of(i64 raw_row) { return static_cast<double>(raw_row % 13) * 0.25; }

/// The loss-normalisation and DP checks of one CP x DP block.
void cp_loss_checks(shared_state& st, nccl::communicator& dp_cp, nccl::communicator* dp, group_layout g, int block,
                    int dp_index, int world_rank, std::string const& tag, hc::stream_view s) {
  // Every replica's batch is rebuilt from its seed: expected sums over the block.
  auto batch = [&](int d) {
    std::mt19937_64 gen(batch_seed(st.opt.seed, g, block, d, 0));
    return random_padding<cp::dual_chunk>(gen, g.cp, 16, 1500);
  };
  double total_loss = 0, total_tokens = 0;
  for (int d = 0; d < g.dp; ++d) {
    auto const pd = batch(d);
    total_tokens += static_cast<double>(pd.raw_rows());
    for (i64 r = 0; r < pd.raw_rows(); ++r) total_loss += loss_of(r);
  }
  auto const pd = batch(dp_index);
  int const cp_rank = dp_cp.rank() % g.cp;
  cp::partition<> p(pd.padded_cu_seqlens(), g.cp, cp_rank);
  double local_loss = 0, local_tokens = 0, replica_loss = 0;
  for (i64 t = 0; t < p.local_rows(); ++t) {
    i64 const r = pd.raw_row(p.source_row(t));
    if (r >= 0) local_loss += loss_of(r), local_tokens += 1;
  }
  for (i64 r = 0; r < pd.raw_rows(); ++r) replica_loss += loss_of(r);
  double const replica_tokens = static_cast<double>(pd.raw_rows());

  arena_scope scope;
  dbuf<double> loss_stats(4);
  auto run = [&]<class P>(P, double loss, double tokens) {
    loss_stats.upload({loss, tokens, -1.0, -1.0}, s);
    cp::cuda::normalize_loss<P>(dp_cp, std::span<double>(loss_stats.data(), 4), g.cp, s);
    return loss_stats.download(s);
  };
  auto same = [](std::vector<double> const& got, cp::token_mean const& e) {
    return got.size() == 4 && got[0] == e.loss_sum && got[1] == e.tokens && got[2] == e.mean && got[3] == e.grad_scale;
  };
  auto describe = [](std::vector<double> const& got, cp::token_mean const& e) {
    std::ostringstream os;
    os.precision(17);
    os << "got {" << got[0] << ", " << got[1] << ", " << got[2] << ", " << got[3] << "}, expected " << e;
    return os.str();
  };
  auto const local = run(cp::loss_placement::cp_local{}, local_loss, local_tokens);
  auto const e_local = expected_token_mean(total_loss, total_tokens, g.cp, false);
  st.checks.record("cp", tag + ": cp::cuda::normalize_loss<cp_local> over CP x DP == host sums (exact)", same(local, e_local),
                   world_rank, describe(local, e_local));
  auto const rep = run(cp::loss_placement::cp_replicated{}, replica_loss, replica_tokens);
  auto const e_rep = expected_token_mean(g.cp * total_loss, g.cp * total_tokens, g.cp, true);
  st.checks.record("cp", tag + ": cp::cuda::normalize_loss<cp_replicated> over CP x DP == host sums (exact)", same(rep, e_rep),
                   world_rank, describe(rep, e_rep));

  if (dp != nullptr) {
    dbuf<i64> n(1);
    n.upload({pd.raw_rows()}, s);
    dp->all_reduce(std::span<i64 const>(n.data(), 1), std::span<i64>(n.data(), 1), reduce_op::sum, s);
    i64 const got = n.download(s)[0];
    st.checks.record("cp", tag + ": strided DP group all_reduce(sum) of replica token counts", got == static_cast<i64>(total_tokens),
                     world_rank, headroom::detail::concat("got ", got, ", expected ", static_cast<i64>(total_tokens)));
  }
}

void cp_correctness(shared_state& st, nccl::communicator& world, hc::stream_view s) {
  int const n = world.size();
  int const r = world.rank();
  std::vector<group_layout> layouts;
  for (int c : {2, 4, 8})
    if (c <= n) layouts.push_back({c, 1});
    else st.skip(r, headroom::detail::concat("cp: cp=", c, " (needs ", c, " GPUs, have ", n, ")"));
  if (n >= 4) layouts.push_back({2, 2});
  else st.skip(r, "cp: cp=2 x dp=2 (needs 4 GPUs)");
  if (n >= 8) layouts.push_back({4, 2});
  else st.skip(r, "cp: cp=4 x dp=2 (needs 8 GPUs)");

  // Setup phase: every layout's groups are split now (collective over the world: every rank
  // calls every split, outsiders with no_color), and one scratch arena serves every case.
  quiesce(st, r, "cp: setup", s);
  struct layout_comms {
    group_layout g;
    bool member;
    int block, in_block, cp_rank, dp_index;
    nccl::communicator cpc, dpc, dpcp;
  };
  std::vector<layout_comms> all;
  all.reserve(layouts.size());
  for (auto const g : layouts) {
    int const block_size = g.cp * g.dp;
    int const blocks = n / block_size;
    bool const member = r < blocks * block_size;
    int const block = r / block_size;
    int const in_block = r % block_size;
    int const cp_rank = in_block % g.cp, dp_index = in_block / g.cp;
    st.wd.phase(r, "cp: setup, split for " + g.label());
    auto& l = all.emplace_back(layout_comms{g, member, block, in_block, cp_rank, dp_index, {}, {}, {}});
    l.cpc = world.split(member ? block * g.dp + dp_index : nccl::communicator::no_color, r);
    if (g.dp > 1) {
      l.dpc = world.split(member ? block * g.cp + cp_rank : nccl::communicator::no_color, r);
      l.dpcp = world.split(member ? block : nccl::communicator::no_color, r);
    }
  }
  tracked watched(st.wd);  // after the communicators: leaves the watchdog's list before they die
  for (auto& l : all) watched.add(l.cpc), watched.add(l.dpc), watched.add(l.dpcp);
  // Largest case: 16 sequences x 1500 raw rows, padded (alignment <= 2 cp = 16 rows, plus a dummy
  // sequence) to under 25,000 rows of at most 128 B (bf16 x 64): six such buffers (raw, padded,
  // local, out, workspace, chunked workspace) are under 20 MB. take() throws, naming the sizes,
  // if a case ever needs more.
  scratch_arena arena(std::size_t{64} << 20, "cp correctness");
  quiesce(st, r, "cp: setup done", s);

  collective_phase(st, [&] {
    use_arena use(arena);
    for (auto& l : all) {
      if (!l.member) continue;
      group_layout const g = l.g;
      int const block = l.block, in_block = l.in_block, cp_rank = l.cp_rank, dp_index = l.dp_index;
      int const block_size = g.cp * g.dp;
      auto& cpc = l.cpc;
      auto& dpc = l.dpc;
      auto& dpcp = l.dpcp;
      std::string const tag = g.label();
      st.wd.phase(r, "cp: " + tag);
      bool const shape_ok = cpc.size() == g.cp && cpc.rank() == cp_rank &&
                            (g.dp == 1 || (dpc.size() == g.dp && dpc.rank() == dp_index && dpcp.size() == block_size &&
                                           dpcp.rank() == in_block));
      st.checks.record("cp", tag + ": split groups have the expected sizes and ranks (cp consecutive, dp strided)", shape_ok, r,
                       headroom::detail::concat("cp group ", cpc.rank(), "/", cpc.size()));
      for (int trial = 0; trial < 3; ++trial) {
        u64 const seed = batch_seed(st.opt.seed, g, block, dp_index, trial);
        cp_case<cp::dual_chunk, bf16>(st, cpc, r, tag, "dual_chunk bf16 x 64", seed, 64, s);
        cp_case<cp::dual_chunk, float>(st, cpc, r, tag, "dual_chunk f32 x 3", seed + 1, 3, s);
        cp_case<cp::dual_chunk, std::uint8_t>(st, cpc, r, tag, "dual_chunk u8 x 5", seed + 2, 5, s);
        cp_case<cp::contiguous, bf16>(st, cpc, r, tag + " contiguous", "contiguous bf16 x 64", seed + 3, 64, s);
      }
      cp_loss_checks(st, g.dp > 1 ? dpcp : cpc, g.dp > 1 ? &dpc : nullptr, g, block, dp_index, r, tag, s);
    }
  });
  // Teardown phase: the arena and the split communicators die at return, with every rank past
  // its last collective; the next phase starts with a quiesce too.
  quiesce(st, r, "cp: teardown", s);
}

/// Padded cu_seqlens of `tokens` rows: sequences of 256..8192 rows, multiples of 2*cp.
std::vector<i64> packed_batch(i64 tokens, int cp_size, u64 seed) {
  std::mt19937_64 gen(seed);
  i64 const m = 2 * cp_size;
  std::uniform_int_distribution<i64> len(std::max<i64>(1, 256 / m), 8192 / m);
  std::vector<i64> cu{0};
  while (cu.back() < tokens) cu.push_back(std::min(tokens, cu.back() + len(gen) * m));
  return cu;
}

void cp_bandwidth(shared_state& st, nccl::communicator& world, hc::stream_view s) {
  int const n = world.size();
  int const r = world.rank();
  i64 const width = 4096;
  std::size_t const row = static_cast<std::size_t>(width) * sizeof(bf16);
  int const it = st.opt.bw_iterations, warm = st.opt.bw_warmup;
  auto spin = [&] { spin_kernel<<<1, 1, 0, s.get()>>>(200000); };
  std::size_t case_index = 0;
  auto put = [&](std::string const& op, i64 tokens, std::size_t bytes_out, std::string const& peer, double ours, double theirs) {
    std::lock_guard lock(st.m);
    if (st.bw.size() <= case_index) st.bw.resize(case_index + 1);
    auto& row_ = st.bw[case_index++];
    if (row_.ours_ms.empty()) {
      row_ = {op, tokens, width, n, bytes_out, std::vector<double>(static_cast<std::size_t>(n)),
              std::vector<double>(static_cast<std::size_t>(n)), peer};
    }
    row_.ours_ms[static_cast<std::size_t>(r)] = ours;
    row_.peer_ms[static_cast<std::size_t>(r)] = theirs;
  };

  std::array<i64, 2> const wanted_tokens{16384, 131072};
  auto tokens_of = [&](i64 wanted) { return wanted / (2 * n) * (2 * n); };
  auto partition_of = [&](i64 tokens) { return cp::partition<>(packed_batch(tokens, n, 42 + static_cast<u64>(n)), n, r); };

  // Setup phase: one arena for the largest shape (global, local, out, workspace, counter) and
  // the barrier's scratch, allocated before the first collective.
  quiesce(st, r, "cp bandwidth: setup", s);
  std::size_t arena_bytes = 0;
  for (i64 const wanted : wanted_tokens) {
    auto const p = partition_of(tokens_of(wanted));
    std::size_t const g = static_cast<std::size_t>(p.global_rows()) * row, l = static_cast<std::size_t>(p.local_rows()) * row;
    arena_bytes = std::max(arena_bytes, scratch_arena::footprint({g, l, g, g, sizeof(unsigned long long)}));
  }
  arena_bytes += scratch_arena::footprint({sizeof(std::uint32_t)});
  scratch_arena arena(arena_bytes, "cp bandwidth");
  use_arena use(arena);
  device_barrier const bar(s);
  auto barrier = [&] { bar(world, s); };
  quiesce(st, r, "cp bandwidth: setup done", s);

  collective_phase(st, [&] {
    for (i64 const wanted : wanted_tokens) {
      arena_scope scope;
      i64 const tokens = tokens_of(wanted);
      st.wd.phase(r, headroom::detail::concat("cp bandwidth: ", tokens, " tokens"));
      auto const p = partition_of(tokens);
      // Stream-ordered (cudaMallocAsync / cudaFreeAsync from the device's default pool, whose
      // release threshold main() raises so that nothing is unmapped at a synchronize).
      cp::cuda::device_cu_seqlens dcu(p.global_cu_seqlens(), s);
      std::size_t const global_bytes = static_cast<std::size_t>(p.global_rows()) * row;
      std::size_t const local_bytes = static_cast<std::size_t>(p.local_rows()) * row;
      dbuf<bf16> global(static_cast<std::size_t>(p.global_rows() * width)), local(static_cast<std::size_t>(p.local_rows() * width)),
          out(global.size()), ws(global.size());
      dbuf<unsigned long long> bad(1);
      u64 const pattern_seed = mix64(st.opt.seed ^ static_cast<u64>(tokens));
      pattern_kernel<<<1024, 256, 0, s.get()>>>(reinterpret_cast<std::uint16_t*>(global.data()), p.global_rows(), width, pattern_seed);
      HEADROOM_CUDA_CHECK_LAST();
      auto const g_v = cp::matrix_view<bf16 const>(global.data(), p.global_rows(), width);
      auto const l_v = cp::matrix_view<bf16>(local.data(), p.local_rows(), width);
      auto const o_v = cp::matrix_view<bf16>(out.data(), p.global_rows(), width);
      auto const w_v = cp::matrix_view<bf16>(ws.data(), p.global_rows(), width);
      auto const l_c = cp::matrix_view<bf16 const>(l_v);

      // Correctness at the benchmark shape: gather(split(x)) == x, checked on device.
      local.poison(s);
      out.poison(s);
      bad.poison(s, 0);
      cp::cuda::split<cp::vector_policy::require_16>(p, dcu.view(), g_v, l_v, s);
      cp::cuda::gather<cp::vector_policy::require_16>(world, p, dcu.view(), l_c, o_v, w_v, s);
      check_pattern_kernel<<<1024, 256, 0, s.get()>>>(reinterpret_cast<std::uint16_t const*>(out.data()), p.global_rows(), width,
                                                      pattern_seed, bad.data());
      HEADROOM_CUDA_CHECK_LAST();
      auto const wrong = bad.download(s)[0];
      st.checks.record("cp", headroom::detail::concat("cp=", n, " (world) ", tokens, " x ", width,
                                                      " bf16: gather(split(x)) == x at the bandwidth shape"),
                       wrong == 0, r, headroom::detail::concat(wrong, " wrong elements"));

      double const split_ms = median_ms(s, warm, it, spin, [&] {
        cp::cuda::split<cp::vector_policy::require_16>(p, dcu.view(), g_v, l_v, s);
      });
      double const split_cpy = median_ms(s, warm, it, spin, [&] {
        HEADROOM_CUDA_TRY(cudaMemcpyAsync(local.data(), global.data(), local_bytes, cudaMemcpyDeviceToDevice, s.get()));
      });
      put("split", tokens, local_bytes, "memcpy", split_ms, split_cpy);
      double const reorder_ms = median_ms(s, warm, it, spin, [&] {
        cp::cuda::to_sequence_order<cp::vector_policy::require_16>(p, dcu.view(), cp::matrix_view<bf16 const>(w_v), o_v, s);
      });
      double const reorder_cpy = median_ms(s, warm, it, spin, [&] {
        HEADROOM_CUDA_TRY(cudaMemcpyAsync(out.data(), ws.data(), global_bytes, cudaMemcpyDeviceToDevice, s.get()));
      });
      put("reorder", tokens, global_bytes, "memcpy", reorder_ms, reorder_cpy);
      // Restore the shard (the memcpy peer overwrote it), then the whole gather against a bare all_gather.
      cp::cuda::split<cp::vector_policy::require_16>(p, dcu.view(), g_v, l_v, s);
      double const gather_ms = median_ms(s, warm, it, barrier, [&] {
        cp::cuda::gather<cp::vector_policy::require_16>(world, p, dcu.view(), l_c, o_v, w_v, s);
      });
      double const ag_ms = median_ms(s, warm, it, barrier, [&] {
        world.all_gather(std::span<bf16 const>(local.data(), local.size()), std::span<bf16>(ws.data(), ws.size()), s);
      });
      put("gather", tokens, global_bytes, "nccl all_gather", gather_ms, ag_ms);
      // The timed gathers must have left x in place too.
      bad.poison(s, 0);
      cp::cuda::gather<cp::vector_policy::require_16>(world, p, dcu.view(), l_c, o_v, w_v, s);
      check_pattern_kernel<<<1024, 256, 0, s.get()>>>(reinterpret_cast<std::uint16_t const*>(out.data()), p.global_rows(), width,
                                                      pattern_seed, bad.data());
      HEADROOM_CUDA_CHECK_LAST();
      auto const wrong2 = bad.download(s)[0];
      st.checks.record("cp", headroom::detail::concat("cp=", n, " (world) ", tokens, " x ", width,
                                                      " bf16: gather output still exact after the timed runs"),
                       wrong2 == 0, r, headroom::detail::concat(wrong2, " wrong elements"));
    }
  });
  quiesce(st, r, "cp bandwidth: teardown", s);
}

void print_cp_table(shared_state& st) {
  std::lock_guard lock(st.m);
  std::printf("\n[cp] bandwidth at cp = %d (world), bf16, medians of %d runs after %d warm-up, CUDA events.\n", st.world,
              st.opt.bw_iterations, st.opt.bw_warmup);
  std::printf("     split / reorder GB/s = (read + written) / time; gather GB/s = output bytes / time (algbw).\n");
  std::printf("     rank 0 and the slowest rank; the peer is a D2D cudaMemcpyAsync of the same output bytes, or a bare NCCL all_gather.\n");
  std::printf("%-8s %7s %5s %3s %9s | %9s %8s %9s | %-15s %9s %8s | %8s\n", "op", "tokens", "width", "cp", "out MiB", "ms r0",
              "GB/s r0", "ms worst", "peer", "peer ms", "GB/s", "ours/peer");
  for (auto const& row : st.bw) {
    double const ours = row.ours_ms.empty() ? 0 : row.ours_ms[0];
    double const worst = row.ours_ms.empty() ? 0 : *std::max_element(row.ours_ms.begin(), row.ours_ms.end());
    double const peer = row.peer_ms.empty() ? 0 : row.peer_ms[0];
    double const factor = row.op == "gather" ? 1.0 : 2.0;
    auto gbps = [&](double ms) { return ms > 0 ? factor * static_cast<double>(row.bytes_out) / (ms * 1e-3) / 1e9 : 0.0; };
    std::printf("%-8s %7lld %5lld %3d %9.1f | %9.3f %8.0f %9.3f | %-15s %9.3f %8.0f | %7.1f%%\n", row.op.c_str(),
                static_cast<long long>(row.tokens), static_cast<long long>(row.width), row.cp,
                static_cast<double>(row.bytes_out) / (1 << 20), ours, gbps(ours), worst, row.peer.c_str(), peer, gbps(peer),
                ours > 0 ? 100.0 * peer / ours : 0.0);
  }
  std::fflush(stdout);
}

}  // namespace scale_validation
