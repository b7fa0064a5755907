// SPDX-License-Identifier: Apache-2.0
// lifetime: the forum case (all-reduce of each layer's output on a comm stream) on the manual
// substrate, whose device lags the host until told to advance. The same loop runs with each
// release policy; the table shows what each one costs: memory held back, or host waits.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

#include "headroom/core.hpp"
#include "headroom/lifetime.hpp"
#include "printer.hpp"
#include "sections.hpp"

namespace {

namespace lt = headroom::lifetime;
using mstream = lt::manual::stream;
using mevent = lt::manual::event;
using reclaimer = lt::deferred_reclaimer<lt::manual::resource, mstream, mevent>;

constexpr int layers = 8;
constexpr std::size_t values = 4096;
constexpr std::size_t bytes = values * sizeof(std::int32_t);

struct outcome {
  std::size_t peak_reserved = 0;
  std::size_t host_waits = 0;
  std::size_t quarantine_peak = 0;
  bool readers_saw_their_data = true;
};

// Layer l writes the value l into its output on compute; the comm stream reads it back (the
// all-reduce stand-in) and checks it. The device only advances at the end, as if the host ran a
// whole iteration ahead of it.
template <class Guard, class Resource>
outcome forum_loop(lt::manual::timeline& t, Resource& res, lt::manual::resource& pool, mstream compute, mstream comm) {
  outcome o;
  std::optional<Guard> x;
  for (int l = 0; l < layers; ++l) {
    Guard y(res, compute, bytes, alignof(std::int32_t));
    auto* p = static_cast<std::int32_t*>(y.data());
    t.submit(compute, [p, l] { std::fill(p, p + values, l); });
    lt::manual::event produced;
    produced.record(compute);
    produced.wait_on(comm);
    t.submit(comm, [p, l, &o] { o.readers_saw_their_data &= std::all_of(p, p + values, [l](std::int32_t v) { return v == l; }); });
    y.use_on(comm);
    x = std::move(y);  // the previous output is released with the guard's policy
  }
  x.reset();
  t.run_all();
  o.peak_reserved = pool.usage().reserved_high;
  o.host_waits = t.host_waits();
  return o;
}

}  // namespace

void demo_lifetime(headroom::demo::printer& p) {
  using headroom::format_bytes;
  p.section("lifetime: releasing communication buffers (stream_ordered vs record_stream)");
  p.line(layers, " layers; each output (", format_bytes(bytes), ") is read by a comm stream, then freed.");
  p.line("The device lags the host by a whole iteration (manual substrate: work runs when told).");

  outcome so, de, bl;
  {
    lt::manual::timeline t;
    auto compute = t.make_stream("compute"), comm = t.make_stream("comm");
    lt::manual::resource pool(t);
    so = forum_loop<lt::guard<lt::manual::resource, mstream, mevent, lt::stream_ordered>>(t, pool, pool, compute, comm);
  }
  {
    lt::manual::timeline t;
    auto compute = t.make_stream("compute"), comm = t.make_stream("comm");
    lt::manual::resource pool(t);
    reclaimer quarantine(pool);
    de = forum_loop<lt::guard<reclaimer, mstream, mevent, lt::deferred>>(t, quarantine, pool, compute, comm);
    de.quarantine_peak = quarantine.stats().peak_quarantined_bytes;
  }
  {
    lt::manual::timeline t;
    auto compute = t.make_stream("compute"), comm = t.make_stream("comm");
    lt::manual::resource pool(t);
    bl = forum_loop<lt::guard<lt::manual::resource, mstream, mevent, lt::blocking>>(t, pool, pool, compute, comm);
  }

  headroom::demo::table tab{"policy", "peak reserved", "quarantine peak", "host waits", "readers ok"};
  tab.row("stream_ordered", format_bytes(so.peak_reserved), format_bytes(so.quarantine_peak), so.host_waits,
          so.readers_saw_their_data ? "yes" : "NO");
  tab.row("deferred", format_bytes(de.peak_reserved), format_bytes(de.quarantine_peak), de.host_waits,
          de.readers_saw_their_data ? "yes" : "NO");
  tab.row("blocking", format_bytes(bl.peak_reserved), format_bytes(bl.quarantine_peak), bl.host_waits,
          bl.readers_saw_their_data ? "yes" : "NO");
  p.print(tab);

  p.check(so.readers_saw_their_data && de.readers_saw_their_data && bl.readers_saw_their_data,
          "every comm-stream reader saw its layer's data under every policy");
  p.check(so.peak_reserved == 2 * bytes, "stream_ordered holds two outputs at most: ", format_bytes(so.peak_reserved));
  p.check(so.host_waits == 0, "stream_ordered never blocks the host");
  p.check(de.peak_reserved == layers * bytes, "deferred (record_stream) keeps every output the comm stream used: ",
          format_bytes(de.peak_reserved));
  p.check(bl.peak_reserved == 2 * bytes && bl.host_waits == layers, "blocking holds two outputs but waits on the host ",
          bl.host_waits, " times");
}
