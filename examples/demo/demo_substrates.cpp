// SPDX-License-Identifier: Apache-2.0
// The host substrate: four ranks as threads of this process, running every collective and a
// point-to-point ring on real data. Each result is checked on every rank against a value
// computed here, without the communicator.
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "headroom/core.hpp"
#include "headroom/host.hpp"
#include "printer.hpp"
#include "sections.hpp"

namespace {

constexpr int ranks = 4;
constexpr std::size_t n = 6;  // elements each rank contributes

// Rank r's input: a mix of signs so that max and min differ from sum.
std::int64_t input_of(int r, std::size_t i) {
  return (static_cast<std::int64_t>(r) * 7 + static_cast<std::int64_t>(i) * 3) % 11 - 5;
}
double gather_input_of(int r, std::size_t i) { return r + 0.25 * static_cast<double>(i); }
float broadcast_value(std::size_t i) { return 1.5f * static_cast<float>(i) - 2.0f; }

template <class T>
std::string preview(std::vector<T> const& v, std::size_t shown = 6) {
  std::ostringstream os;
  os << "[";
  for (std::size_t i = 0; i < v.size() && i < shown; ++i) os << (i ? " " : "") << v[i];
  if (v.size() > shown) os << " ...";
  os << "]";
  return os.str();
}

// What one rank saw, filled by that rank only.
struct rank_results {
  std::vector<std::int64_t> sum, max, min, scattered, ring;
  std::vector<double> gathered;
  std::vector<float> broadcasted;
};

}  // namespace

void demo_substrates(headroom::demo::printer& p) {
  using headroom::reduce_op;
  p.section("substrates: host::thread_group, 4 ranks as threads");
  p.line("Every rank calls the same collectives in the same order; results are reduced in rank");
  p.line("order, so all ranks get identical values. Expected values are computed without it.");

  std::array<rank_results, ranks> got{};
  headroom::host::launch(ranks, [&](headroom::host::thread_communicator& comm) {
    int const r = comm.rank();
    auto& mine = got[static_cast<std::size_t>(r)];
    std::vector<std::int64_t> in(n);
    for (std::size_t i = 0; i < n; ++i) in[i] = input_of(r, i);
    std::span<std::int64_t const> const in_span(in);

    for (auto [op, out] : {std::pair{reduce_op::sum, &mine.sum}, std::pair{reduce_op::max, &mine.max},
                           std::pair{reduce_op::min, &mine.min}}) {
      out->assign(n, 0);
      comm.all_reduce(in_span, std::span<std::int64_t>(*out), op);
    }

    std::vector<double> gin(3);
    for (std::size_t i = 0; i < gin.size(); ++i) gin[i] = gather_input_of(r, i);
    mine.gathered.assign(gin.size() * ranks, 0.0);
    comm.all_gather(std::span<double const>(gin), std::span<double>(mine.gathered));

    std::vector<std::int64_t> rs_in(2 * ranks);
    for (std::size_t i = 0; i < rs_in.size(); ++i) rs_in[i] = input_of(r, i);
    mine.scattered.assign(2, 0);
    comm.reduce_scatter(std::span<std::int64_t const>(rs_in), std::span<std::int64_t>(mine.scattered),
                        reduce_op::sum);

    mine.broadcasted.assign(5, -1.0f);
    if (r == 2)
      for (std::size_t i = 0; i < mine.broadcasted.size(); ++i) mine.broadcasted[i] = broadcast_value(i);
    comm.broadcast(std::span<float>(mine.broadcasted), 2);

    // Ring: send to the right neighbour, receive from the left one (sends are buffered).
    mine.ring.assign(n, 0);
    comm.send(in_span, (r + 1) % ranks);
    comm.recv(std::span<std::int64_t>(mine.ring), (r + ranks - 1) % ranks);
  });

  // Expectations, computed directly from the inputs.
  std::vector<std::int64_t> e_sum(n, 0), e_max(n), e_min(n);
  for (std::size_t i = 0; i < n; ++i) {
    e_max[i] = e_min[i] = input_of(0, i);
    for (int r = 0; r < ranks; ++r) {
      e_sum[i] += input_of(r, i);
      e_max[i] = std::max(e_max[i], input_of(r, i));
      e_min[i] = std::min(e_min[i], input_of(r, i));
    }
  }
  std::vector<double> e_gathered;
  for (int r = 0; r < ranks; ++r)
    for (std::size_t i = 0; i < 3; ++i) e_gathered.push_back(gather_input_of(r, i));
  std::vector<float> e_broadcast(5);
  for (std::size_t i = 0; i < e_broadcast.size(); ++i) e_broadcast[i] = broadcast_value(i);
  auto e_scattered = [](int r) {
    std::vector<std::int64_t> v(2, 0);
    for (int src = 0; src < ranks; ++src)
      for (std::size_t i = 0; i < 2; ++i) v[i] += input_of(src, 2 * static_cast<std::size_t>(r) + i);
    return v;
  };
  auto e_ring = [](int r) {
    std::vector<std::int64_t> v(n);
    for (std::size_t i = 0; i < n; ++i) v[i] = input_of((r + ranks - 1) % ranks, i);
    return v;
  };

  headroom::demo::table t{"operation", "dtype", "in/rank", "out/rank", "ranks ok", "rank 0 result"};
  struct verdict {
    std::string what;
    int ok;
  };
  std::vector<verdict> verdicts;
  auto add = [&](std::string const& what, headroom::dtype type, std::size_t in, std::size_t out, auto member,
                 auto expected_for, std::string const& sample) {
    int ok = 0;
    for (int r = 0; r < ranks; ++r) ok += (got[static_cast<std::size_t>(r)].*member == expected_for(r)) ? 1 : 0;
    t.row(what, headroom::name_of(type), in, out, std::to_string(ok) + "/" + std::to_string(ranks), sample);
    verdicts.push_back({what, ok});
  };
  auto same = [](auto const& v) { return [&v](int) { return v; }; };
  using R = rank_results;
  auto const i64 = headroom::dtype_v<std::int64_t>;
  add("all_reduce sum", i64, n, n, &R::sum, same(e_sum), preview(got[0].sum));
  add("all_reduce max", i64, n, n, &R::max, same(e_max), preview(got[0].max));
  add("all_reduce min", i64, n, n, &R::min, same(e_min), preview(got[0].min));
  add("all_gather", headroom::dtype_v<double>, 3, 3 * ranks, &R::gathered, same(e_gathered), preview(got[0].gathered));
  add("reduce_scatter sum", i64, 2 * ranks, 2, &R::scattered, e_scattered, preview(got[0].scattered));
  add("broadcast root=2", headroom::dtype_v<float>, 5, 5, &R::broadcasted, same(e_broadcast),
      preview(got[0].broadcasted));
  add("send/recv ring", i64, n, n, &R::ring, e_ring, preview(got[0].ring));
  p.print(t);

  for (auto const& v : verdicts) p.check(v.ok == ranks, v.what, ": ", v.ok, " of ", ranks, " ranks got the expected values");
}
