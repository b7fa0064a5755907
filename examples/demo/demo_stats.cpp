// SPDX-License-Identifier: Apache-2.0
// demo_stats: the dashboard blind spot of pipeline parallelism, and its fix in one collective.
// Four pipeline stages run as thread ranks; under 1F1B the first stage keeps the most
// micro-batches in flight, so it holds the memory peak, while the dashboard writer is the last.
#include <cstdint>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "headroom/core.hpp"
#include "headroom/host.hpp"
#include "headroom/stats.hpp"
#include "sections.hpp"

namespace hs = headroom::stats;

void demo_stats(headroom::demo::printer& p) {
  p.section("stats: every stage's memory peak, reduced in one collective");
  constexpr int stages = 4;
  constexpr std::size_t mib = std::size_t{1} << 20;
  using step_report = hs::report<hs::field<"allocated_bytes.all.peak", std::int64_t>,
                                 hs::field<"allocation.all.peak", std::int64_t>,
                                 hs::field<"num_alloc_retries", std::int64_t>,
                                 hs::field<"free_fraction", double, hs::minimum>>;
  std::optional<hs::rank_table> table;
  std::optional<step_report> reduced;
  std::vector<std::int64_t> peaks(stages);
  std::size_t collectives = 0;
  std::mutex m;

  headroom::host::launch(stages, [&](headroom::host::thread_communicator& pp) {
    int const stage = pp.rank();
    hs::counting_communicator<headroom::host::thread_communicator> comm(pp);
    hs::statistics_resource<headroom::host::aligned_resource> memory;
    headroom::host::inline_stream s;
    // 1F1B warm-up: stage k has (stages - k) micro-batches of 4 MiB activations in flight.
    std::vector<void*> live;
    for (int mb = 0; mb < stages - stage; ++mb) live.push_back(memory.allocate(s, 4 * mib));
    for (void* q : live) memory.deallocate(s, q, 4 * mib);
    auto const counts = memory.report();
    double const capacity = 32.0 * static_cast<double>(mib);
    step_report const local(counts.get<"allocated_bytes.all.peak">(), counts.get<"allocation.all.peak">(),
                            stage == 2 ? 1 : 0, 1.0 - static_cast<double>(counts.get<"allocated_bytes.all.peak">()) / capacity);
    hs::reducer<> reduce(hs::reduce_plan::for_report<step_report>());
    auto t = reduce.gather_to(stages - 1, local, comm);
    auto r = reduce.max_to(stages - 1, local, comm);
    std::lock_guard lock(m);
    peaks[static_cast<std::size_t>(stage)] = local.get<"allocated_bytes.all.peak">();
    if (t) table = std::move(t);
    if (r) reduced = *r;
    if (stage == 0) collectives = comm.counts().collectives();
  });

  headroom::demo::table out{"stat", "max", "held by stage", "min", "mean", "writer's own"};
  for (auto const& row : *table) {
    auto text = [](hs::value const& v) {
      std::ostringstream os;
      hs::print_value(os, v);
      return os.str();
    };
    out.row(row.name, text(row.max), row.argmax, text(row.min), row.mean, text(row.per_rank.back()));
  }
  p.print(out);
  auto const& peak = table->at("allocated_bytes.all.peak");
  p.line("the writer (stage ", stages - 1, ") saw ", headroom::format_bytes(static_cast<std::uint64_t>(peaks.back())),
         " locally; the group's peak is ", headroom::format_bytes(static_cast<std::uint64_t>(peaks.front())),
         " on stage ", peak.argmax);
  p.check(peak.argmax == 0 && peak.max == hs::value(peaks.front()), "the first stage holds the peak, and gather says so");
  p.check(reduced && reduced->get<"allocated_bytes.all.peak">() == peaks.front(), "max_to delivers the group's peak to the writer");
  p.check(reduced && reduced->get<"num_alloc_retries">() == 1 && table->at("num_alloc_retries").argmax == 2,
          "a retry on stage 2 is visible to the writer");
  p.check(reduced && hs::value(reduced->get<"free_fraction">()) == table->at("free_fraction").min &&
              table->at("free_fraction").argmin == 0,
          "the min-field (free fraction) comes back as the tightest stage's value");
  p.check(collectives == 2, "one collective per reduction (gather_to + max_to = ", collectives, ")");
}
