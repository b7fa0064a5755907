// SPDX-License-Identifier: Apache-2.0
// cp: packed-sequence context parallelism on the host substrate. docs/cp.md's worked example
// split, labelled and masked; a 4-rank thread_group gathering random packed batches back; the
// memory each gather_output policy would need at 128K tokens of Qwen logits, asked before
// anything is allocated; and the loss normalised over a 2 x 2 DP x CP mesh.
#include <cstdint>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "headroom/core.hpp"
#include "headroom/cp.hpp"
#include "headroom/host.hpp"
#include "printer.hpp"
#include "sections.hpp"

namespace {

using i64 = std::int64_t;
namespace cp = headroom::cp;

// Readable token names for the reference example: a0..a6, b0..b9, "_" for pads.
std::string token_name(int code) {
  if (code == 0) return "_";
  return std::string(1, static_cast<char>('a' + code / 100 - 1)) + std::to_string(code % 100);
}
template <class T>
std::string names(std::vector<T> const& v) {
  std::ostringstream os;
  for (std::size_t i = 0; i < v.size(); ++i) os << (i ? " " : "") << token_name(static_cast<int>(v[i]));
  return os.str();
}
template <class T>
std::string digits(std::vector<T> const& v) {
  std::ostringstream os;
  for (auto x : v) os << static_cast<int>(x);
  return os.str();
}

void reference_example(headroom::demo::printer& p) {
  std::vector<int> const raw_cu{0, 7, 17};
  std::vector<int> ids;
  for (int i = 0; i < 7; ++i) ids.push_back(100 + i);
  for (int i = 0; i < 10; ++i) ids.push_back(200 + i);
  std::vector<std::uint8_t> const raw_mask{0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1};
  cp::padding pad(raw_cu, cp::alignment_for<cp::dual_chunk>(2));
  p.line(pad);
  headroom::demo::table t{"rank", "local rows", "input ids", "labels (rolled, then split)", "mask"};
  std::vector<std::string> const expect_labels{"a1 a2 _ b0 b1 b2 b3 _ _ a0", "a3 a4 a5 a6 b4 b5 b6 b7 b8 b9"};
  bool labels_ok = true;
  int valid = 0;
  for (int r = 0; r < 2; ++r) {
    cp::partition<> part(std::span<i64 const>(pad.padded_cu_seqlens()), 2, r);
    std::vector<int> local(10), labels(10);
    std::vector<std::uint8_t> mask(10);
    cp::pad_split(pad, part, cp::matrix_view<int const>(ids.data(), 17, 1), cp::matrix_view<int>(local.data(), 10, 1));
    cp::shifted_label_split(pad, part, cp::matrix_view<int const>(ids.data(), 17, 1), cp::matrix_view<int>(labels.data(), 10, 1),
                            std::span<std::uint8_t const>(raw_mask), std::span<std::uint8_t>(mask));
    std::ostringstream idx;
    for (auto g : part.local_index()) idx << (idx.tellp() ? "," : "") << g;
    t.row(r, idx.str(), names(local), names(labels), digits(mask));
    labels_ok = labels_ok && names(labels) == expect_labels[static_cast<std::size_t>(r)];
    for (auto m : mask) valid += m;
    if (r == 0) p.line(part);
  }
  p.print(t);
  p.check(labels_ok, "labels match docs/cp.md's table (roll the global padded buffer, then split)");
  p.check(valid == 10, "10 valid (label, mask) pairs: a3..a6 and b4..b9; rank 0 holds none (hence a 0-safe mean)");
}

void gather_round_trip(headroom::demo::printer& p) {
  int const cp_size = 4;
  std::vector<int> ok(cp_size, 0);
  std::string shape;
  headroom::host::launch(cp_size, [&](headroom::host::thread_communicator& comm) {
    std::mt19937_64 gen(2026);  // the same batch on every rank
    std::vector<i64> raw{0};
    for (int s = 0; s < 9; ++s) raw.push_back(raw.back() + 1 + static_cast<i64>(gen() % 300));
    cp::padding pad(raw, cp::alignment_for<cp::dual_chunk>(cp_size));
    cp::partition<> part(std::span<i64 const>(pad.padded_cu_seqlens()), cp_size, comm.rank());
    i64 const w = 16;
    std::vector<float> x(static_cast<std::size_t>(pad.padded_rows() * w));
    for (auto& v : x) v = static_cast<float>(gen() % 1000);
    std::vector<float> local(static_cast<std::size_t>(part.local_rows() * w)), back(x.size());
    cp::split(part, cp::matrix_view<float const>(x.data(), pad.padded_rows(), w), cp::matrix_view<float>(local.data(), part.local_rows(), w));
    cp::gather(comm, part, cp::matrix_view<float const>(local.data(), part.local_rows(), w),
               cp::matrix_view<float>(back.data(), pad.padded_rows(), w));
    ok[static_cast<std::size_t>(comm.rank())] = back == x;
    if (comm.rank() == 0) {
      std::ostringstream os;
      os << pad.raw_rows() << " raw rows in 9 sequences -> " << pad.padded_rows() << " padded -> " << part.local_rows()
         << " rows per rank";
      shape = os.str();
    }
  });
  p.line("thread_group, cp = 4: ", shape);
  p.check(ok == std::vector<int>(cp_size, 1), "gather(split(x)) == x on every rank");
}

void memory_query(headroom::demo::printer& p) {
  // 128K tokens in sequences of 8K, cp = 2, Qwen3 vocabulary, bf16 logits. No tensor exists.
  std::vector<i64> cu;
  for (i64 s = 0; s <= 16; ++s) cu.push_back(s * 8192);
  cp::partition<> part(cu, 2, 0);
  i64 const vocab = 151936;
  auto const full = cp::plan_output<cp::gather_output::full>(part, vocab, 2);
  auto const chunked = cp::plan_output<cp::gather_output::full>(part, vocab, 2, {8192});  // 8K-row workspace
  auto const none = cp::plan_output<cp::gather_output::none>(part, vocab, 2);
  auto const per_token = cp::plan_output<cp::gather_output::per_token>(part, 1, 4);
  std::size_t const local = static_cast<std::size_t>(part.local_rows() * vocab) * 2;
  headroom::demo::table t{"gather_output", "result", "result bytes", "workspace", "extra vs local logits"};
  auto row = [&](cp::output_plan const& pl, char const* note = "") {
    std::ostringstream shape;
    shape << "[" << pl.result_rows << ", " << pl.width << "]";
    t.row(std::string(pl.policy) + note, shape.str(), headroom::format_bytes(pl.output_buffer_bytes), headroom::format_bytes(pl.workspace_bytes),
          headroom::format_bytes(pl.extra_bytes()));
  };
  row(full);
  row(chunked, " (8K-row chunks)");
  row(none);
  row(per_token);
  p.line("last stage at 128K tokens x 151,936 bf16, cp = 2: local logits ", headroom::format_bytes(local), " per rank");
  p.print(t);
  p.check(full.output_buffer_bytes == 2 * local,
          "full keeps cp x the local logits: 37 GiB, the per-rank OOM that AReaL's PR #1223 removed by not gathering logits");
  p.check(chunked.workspace_bytes * 16 == full.workspace_bytes,
          "a gather in 8K-row chunks of whole sequences needs 1/16 of the workspace (16 all-gathers)");
  p.check(none.extra_bytes() == 0 && per_token.extra_bytes() < local / 1000,
          "none adds nothing; per_token adds under 0.1% of the local logits");
}

void loss_normalisation(headroom::demo::printer& p) {
  // DP = 2 replicas x CP = 2: each rank holds a disjoint shard's (loss sum, token count).
  double const sums[4] = {3.0, 5.0, 2.5, 0.0}, counts[4] = {4, 6, 5, 0};
  std::vector<cp::token_mean> got(4);
  headroom::host::launch(4, [&](headroom::host::thread_communicator& world) {
    auto const r = static_cast<std::size_t>(world.rank());
    got[r] = cp::normalize_loss<cp::loss_placement::cp_local>(world, sums[r], counts[r], 2);
  });
  p.line("DP x CP = 2 x 2, local (loss sum, tokens): (3, 4) (5, 6) (2.5, 5) (0, 0) -> ", got[0]);
  p.check(got[0].mean == 10.5 / 15 && got[3].mean == got[0].mean, "token mean over DP x CP, the same on every rank");
  p.check(got[0].grad_scale == 1.0 / 15, "grad_scale = 1 / (tokens over DP x CP); a CP rank with 0 tokens is fine");
}

}  // namespace

void demo_cp(headroom::demo::printer& p) {
  p.section("cp: packed-sequence context parallelism (split, labels, gather, memory, loss)");
  reference_example(p);
  gather_round_trip(p);
  memory_query(p);
  loss_normalisation(p);
}
