// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

// Writes every kind of snapshot (plain blocks, a pool arena with leases, deferred frees, a
// wrapped ring with blocks live before it, an empty trace, a profiler's step file) into
// $HEADROOM_TRACE_SNAPSHOT_DIR (a fresh temporary directory when unset), checks them here,
// and lists them in manifest.json for tests/trace/check_snapshot.py, which ctest runs next.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "headroom/host.hpp"
#include "headroom/trace.hpp"

using namespace headroom;
namespace tr = headroom::trace;
namespace fs = std::filesystem;
using host::aligned_resource;
using host::inline_stream;

namespace {
inline_stream const hs{};

fs::path output_dir() {
  static fs::path const dir = [] {
    char const* env = std::getenv("HEADROOM_TRACE_SNAPSHOT_DIR");
    fs::path d = env != nullptr && *env != '\0'
                     ? fs::path(env)
                     : fs::temp_directory_path() / ("headroom_trace_" + std::to_string(tr::now_ns()));
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

std::ostringstream manifest;  // "name": {...}, entries

void save(std::string const& name, tr::snapshot const& s) {
  tr::write_file_atomically(output_dir() / name, tr::to_memory_viz(s, {{"kind", name}}));
  std::size_t markers = 0;  // the writer's "snapshot" marker is not an event of the trace
  manifest << (manifest.tellp() > 0 ? ",\n" : "") << "  \"" << name << "\": {\"events\": " << s.trace.size() + markers
           << ", \"segments\": " << s.segments.size() << ", \"active_bytes\": " << s.active_bytes()
           << ", \"dropped\": " << s.dropped << "}";
}

std::size_t count(tr::snapshot const& s, tr::action a) {
  std::size_t n = 0;
  for (auto const& e : s.trace) n += e.kind == a ? 1 : 0;
  return n;
}
}  // namespace

TEST_CASE("pickle_writer: primitive values round-trip through Python (values.pickle.bin)") {
  tr::pickle_writer w;
  std::ostringstream json;
  json.precision(17);
  w.begin_list();
  json << "[";
  std::vector<std::int64_t> const ints{0,          1,          255,        256,       65535,    65536,
                                       -1,         -256,       2147483647, -2147483647 - 1, 2147483648LL,
                                       -2147483649LL, 1LL << 53, std::numeric_limits<std::int64_t>::max(),
                                       std::numeric_limits<std::int64_t>::min(), 0x7f0000000000LL};
  for (auto v : ints) {
    w.integer(v);
    json << v << ", ";
  }
  w.unsigned_integer(std::numeric_limits<std::uint64_t>::max());
  json << std::numeric_limits<std::uint64_t>::max() << ", ";
  std::string const long_string(300, 'x');
  for (std::string const& s : {std::string("alloc"), std::string(""), long_string}) {
    w.string(s);
    json << "\"" << s << "\", ";
  }
  for (double d : {0.5, -1.25e300, 3.0}) {
    w.real(d);
    json << d << ", ";
  }
  w.boolean(true);
  w.boolean(false);
  w.none();
  w.begin_dict();
  w.key("k");
  w.integer(1);
  w.end_dict();
  json << "true, false, null, {\"k\": 1}]";
  w.end_list();
  auto const bytes = w.finish();
  CHECK(static_cast<unsigned char>(bytes[0]) == 0x80);
  CHECK(bytes[1] == 4);
  CHECK(bytes.back() == '.');
  tr::write_file_atomically(output_dir() / "values.pickle.bin", bytes);
  tr::write_file_atomically(output_dir() / "values.json", json.str());

  tr::pickle_writer open;
  open.begin_list();
  CHECK_THROWS_WITH_AS((void)open.finish(), doctest::Contains("1 container(s) still open"), logic_error);
}

TEST_CASE("blocks from a plain resource get segments of their own") {
  tr::recorder<> rec;
  tr::recording_resource act(aligned_resource{}, rec, tr::categories::activation);
  tr::recording_resource comm(aligned_resource{}, rec, tr::categories::communication);
  rec.start();
  void* a = act.allocate(hs, 1 << 20);
  void* b = comm.allocate(hs, 1 << 18);
  void* c = act.allocate(hs, 1 << 19);
  act.deallocate(hs, a, 1 << 20);
  auto const s = tr::take_snapshot(rec);
  // Each lone block is wrapped: segment_alloc before its alloc, segment_free after its free; the
  // free is free_requested + free_completed, as PyTorch writes an ordinary free, and carries
  // the frame of the allocation.
  CHECK(count(s, tr::action::segment_alloc) == 3);
  CHECK(count(s, tr::action::segment_free) == 1);
  CHECK(count(s, tr::action::free_requested) == 1);
  REQUIRE(s.trace.size() == 9);
  CHECK(s.trace[6].kind == tr::action::free_requested);
  CHECK(s.trace[7].kind == tr::action::free_completed);
  CHECK(s.trace[6].addr == s.trace[7].addr);
  CHECK(s.trace[7].line == s.trace[1].line);  // s.trace[1]: the alloc of `a`
  CHECK(s.trace[7].line != 0);
  // time_us is Unix-epoch time, as PyTorch's.
  auto const now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::system_clock::now().time_since_epoch()).count();
  CHECK(s.trace.front().time <= s.trace.back().time);
  CHECK(s.trace.back().time <= now_ns);
  CHECK(s.trace.front().time > now_ns - std::int64_t{60'000'000'000});
  REQUIRE(s.segments.size() == 2);
  CHECK(s.active_bytes() == (1u << 18) + (1u << 19));
  CHECK(s.reserved_bytes() == s.active_bytes());
  save("blocks.pickle", s);
  comm.deallocate(hs, b, 1 << 18);
  act.deallocate(hs, c, 1 << 19);
}

TEST_CASE("an arena segment with blocks, and frees pending at the end (deferred)") {
  tr::recorder<> rec;
  rec.start();
  std::vector<std::byte> arena(4096);
  auto const base = reinterpret_cast<std::uintptr_t>(arena.data());
  auto const* p = arena.data();
  rec.segment_alloc(p, 4096, 0, tr::categories::pool);
  rec.alloc(p + 256, 512, 0, tr::categories::pool);
  rec.alloc(p + 1024, 1024, 0, tr::categories::pool);
  rec.alloc(p + 3072, 256, 0, tr::categories::communication);
  rec.free_requested(p + 3072, 256, 5);           // deferred: still pending at the end
  rec.free_requested(p + 256, 512, 0);            // ... this one completes
  rec.free_completed(p + 256, 512, 0);
  auto const s = tr::take_snapshot(rec);
  REQUIRE(s.segments.size() == 1);
  auto const& seg = s.segments[0];
  CHECK(seg.addr == base);
  std::uint64_t sum = 0;
  for (auto const& b : seg.blocks) sum += b.size;
  CHECK(sum == 4096);
  // inactive [0,1024), active [1024,2048), inactive [2048,3072), pending [3072,3328), inactive rest
  REQUIRE(seg.blocks.size() == 5);
  CHECK(seg.blocks[1].state == tr::block_state::active_allocated);
  CHECK(seg.blocks[3].state == tr::block_state::active_pending_free);
  CHECK(seg.blocks[4].size == 4096 - 3328);
  CHECK(count(s, tr::action::segment_alloc) == 1);  // blocks inside the arena add none
  save("arena_deferred.pickle", s);
}

TEST_CASE("a wrapped ring keeps the newest events; blocks live before it stay in the picture") {
  tr::recorder<> rec({.max_entries = 16});
  tr::recording_resource act(aligned_resource{}, rec, tr::categories::activation);
  void* before = act.allocate(hs, 4096);   // live before recording: an initially allocated block
  void* freed = act.allocate(hs, 2048);    // live before recording, freed during it
  rec.start();
  act.deallocate(hs, freed, 2048);
  for (int i = 0; i < 20; ++i) {
    void* p = act.allocate(hs, 100 + static_cast<std::size_t>(i));
    act.deallocate(hs, p, 100 + static_cast<std::size_t>(i));
  }
  auto const s = tr::take_snapshot(rec);
  CHECK(s.dropped == 41 - 16);
  CHECK(rec.events().size() == 16);
  CHECK(rec.events()[15].kind == tr::action::free_completed);
  CHECK(rec.events()[15].size == 119);
  REQUIRE(s.segments.size() == 1);
  CHECK(s.segments[0].addr == reinterpret_cast<std::uintptr_t>(before));
  // The block live before recording gets a synthetic alloc at the start, with its category and
  // frame, so the viewer colours and labels it.
  CHECK(s.synthetic == 1);
  REQUIRE(s.trace.size() >= 2);
  CHECK(s.trace[1].kind == tr::action::alloc);
  CHECK((s.trace[1].flags & tr::event::synthetic) != 0);
  CHECK(s.trace[1].what == tr::categories::activation);
  CHECK(s.trace[1].line != 0);
  auto const t = tr::make_active_timeline(s);
  CHECK(t.total(1) == 4096);
  save("wrapped.pickle", s);
  act.deallocate(hs, before, 4096);
}

TEST_CASE("an arena live before recording: synthetic segment_alloc, then its blocks' allocs") {
  tr::recorder<> rec;
  std::vector<std::byte> arena(8192);
  auto const* p = arena.data();
  rec.segment_alloc(p, 8192, 0, tr::categories::pool);
  rec.alloc(p, 1024, 0, tr::categories::pool);
  rec.alloc(p + 4096, 2048, 0, tr::categories::pool);
  rec.start();
  rec.free_completed(p + 4096, 2048, 0);
  auto const s = tr::take_snapshot(rec);
  REQUIRE(s.trace.size() >= 5);
  CHECK(s.synthetic == 2);
  CHECK(s.trace[0].kind == tr::action::segment_alloc);
  CHECK(s.trace[0].what == tr::categories::pool);
  CHECK(s.trace[1].kind == tr::action::alloc);
  CHECK(s.trace[2].kind == tr::action::alloc);
  CHECK(s.trace[2].addr == reinterpret_cast<std::uintptr_t>(p + 4096));
  CHECK(count(s, tr::action::segment_alloc) == 1);  // the blocks lie in the arena: no segments of their own
  save("arena_live_before.pickle", s);
}

TEST_CASE("an empty trace with live blocks still opens") {
  tr::recorder<> rec;
  tr::recording_resource act(aligned_resource{}, rec, tr::categories::activation);
  void* p = act.allocate(hs, 1000);
  auto const s = tr::take_snapshot(rec);
  CHECK(s.trace.size() == 2);  // the live block's synthetic alloc, in a segment of its own
  CHECK(s.synthetic == 1);
  CHECK(s.active_bytes() == 1000);
  save("no_events.pickle", s);
  act.deallocate(hs, p, 1000);
}

TEST_CASE("a full live table: the blocks it could not hold are left out, consistently, and counted") {
  tr::recorder<> rec({.max_live = 3});
  tr::recording_resource act(aligned_resource{}, rec, tr::categories::activation);
  rec.start();
  std::vector<void*> blocks;
  for (int i = 0; i < 6; ++i) blocks.push_back(act.allocate(hs, 256));
  act.deallocate(hs, blocks[4], 256);  // untracked: its free is left out with its alloc
  act.deallocate(hs, blocks[0], 256);
  auto const s = tr::take_snapshot(rec);
  CHECK(s.untracked == 3);
  CHECK(s.active_bytes() == 2 * 256);
  for (auto const& e : s.trace) {
    for (int i = 3; i < 6; ++i) CHECK(e.addr != reinterpret_cast<std::uintptr_t>(blocks[static_cast<std::size_t>(i)]));
  }
  CHECK(tr::to_svg(s).find("3 blocks left out") != std::string::npos);
  save("full_live_table.pickle", s);
  for (std::size_t i = 1; i < blocks.size(); ++i) {
    if (i != 4) act.deallocate(hs, blocks[i], 256);
  }
}

TEST_CASE("shared policy: threads' buffers merged into one consistent snapshot") {
  tr::recorder<tr::shared> rec;
  tr::recording_resource act(aligned_resource{}, rec, tr::categories::activation);
  tr::recording_resource comm(aligned_resource{}, rec, tr::categories::communication);
  void* early = act.allocate(hs, 4096);
  rec.start();
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        void* p = (t % 2 == 0 ? act : comm).allocate(hs, 64 + static_cast<std::size_t>(i));
        (t % 2 == 0 ? act : comm).deallocate(hs, p, 64 + static_cast<std::size_t>(i));
      }
    });
  }
  for (auto& t : threads) t.join();
  act.deallocate(hs, early, 4096);
  auto const s = tr::take_snapshot(rec);
  CHECK(s.dropped == 0);
  CHECK(count(s, tr::action::alloc) == 151);  // 150 + the synthetic alloc of `early`
  CHECK(count(s, tr::action::free_completed) == 151);
  save("shared_threads.pickle", s);
}

TEST_CASE("SVG of the active memory timeline: stacked categories, peak in the title") {
  tr::recorder<> rec;
  tr::recording_resource act(aligned_resource{}, rec, tr::categories::activation);
  tr::recording_resource logits(aligned_resource{}, rec, tr::categories::cp_logits);
  rec.start();
  void* a = act.allocate(hs, 3 << 20);
  void* l = logits.allocate(hs, 1 << 20);
  logits.deallocate(hs, l, 1 << 20);
  act.deallocate(hs, a, 3 << 20);
  auto const s = tr::take_snapshot(rec);
  auto const t = tr::make_active_timeline(s);
  REQUIRE(t.bytes.size() == 5);
  CHECK(t.peak == 4u << 20);
  CHECK(t.total(4) == 0);
  auto const svg = tr::to_svg(s, "test <&>");
  CHECK(svg.starts_with("<svg "));
  CHECK(svg.find("peak 4.00 MiB") != std::string::npos);
  // Round y ticks (1 MiB apart up to the 4 MiB peak), x ticks at event indices, the legend right
  // of the plot, colours in the viewer's category order (activation first: tableau10[0]).
  for (char const* tick : {">0 MiB<", ">1 MiB<", ">2 MiB<", ">3 MiB<", ">4 MiB<", ">0<", ">4<"}) {
    CHECK_MESSAGE(svg.find(tick) != std::string::npos, tick);
  }
  CHECK(svg.find("MiB<", svg.find(">4 MiB<") + 7) == std::string::npos);
  CHECK(svg.find("<polygon fill=\"#4e79a7\"") != std::string::npos);
  CHECK(svg.find("<rect x=\"870.0\"") != std::string::npos);  // legend at plot right + 16
  CHECK(svg.find("test &lt;&amp;&gt;") != std::string::npos);
  CHECK(svg.find(">cp.logits</text>") != std::string::npos);
  CHECK(svg.find("<polygon") != std::string::npos);
  tr::write_file_atomically(output_dir() / "timeline.svg", svg);
  CHECK(fs::file_size(output_dir() / "timeline.svg") == svg.size());
  CHECK_FALSE(fs::exists(output_dir() / "timeline.svg.partial"));

  // An empty step: one tick, "0 B", and a note; not "1 B, 0 B, 0 B".
  auto const empty = tr::to_svg(tr::snapshot{});
  CHECK(empty.find(">0 B<") != std::string::npos);
  CHECK(empty.find(">1 B<") == std::string::npos);
  CHECK(empty.find("no memory held") != std::string::npos);
}

TEST_CASE("many categories: the SVG stacks the ones past max_svg_categories as other") {
  std::vector<std::string> names;
  for (int i = 0; i < 40; ++i) names.push_back("category " + std::to_string(i));
  tr::recorder<> rec({.max_entries = 100, .max_live = 100});
  rec.start();
  for (std::size_t i = 0; i < names.size(); ++i)
    rec.alloc(reinterpret_cast<void const*>(std::uintptr_t{0x1000} * (i + 1)), 256, 0, tr::category{names[i].c_str()});
  auto const s = tr::take_snapshot(rec);
  auto const t = tr::make_active_timeline(s, tr::max_svg_categories);
  REQUIRE(t.categories.size() == tr::max_svg_categories);
  CHECK(t.categories.back() == "other");
  CHECK(t.merged == 40 - (tr::max_svg_categories - 1));
  CHECK(t.total(t.bytes.size() - 1) == 40 * 256);  // nothing lost in the merge
  auto const svg = tr::to_svg(s);
  CHECK(svg.find(">other (9 categories)</text>") != std::string::npos);
  CHECK(svg.find(">category 30</text>") != std::string::npos);
  CHECK(svg.find(">category 31</text>") == std::string::npos);
}

TEST_CASE("memory_viz writes a repeated file name or category once, then refers to it") {
  std::string const file(10'000, 'f');
  tr::recorder<> rec({.max_entries = 1000, .max_live = 1000});
  rec.start();
  for (std::uintptr_t i = 1; i <= 500; ++i)
    rec.alloc(reinterpret_cast<void const*>(i * 0x1000), 64, 0, tr::category{"a category name"},
              tr::frame{file.c_str(), "forward", 7});
  auto const bytes = tr::to_memory_viz(tr::take_snapshot(rec));
  std::size_t copies = 0;
  for (auto at = bytes.find(file); at != std::string::npos; at = bytes.find(file, at + 1)) ++copies;
  CHECK(copies == 1);
  CHECK(bytes.size() < 1'000'000);  // 500 events and blocks naming the 10 KB file: 10 MB written in full
}

TEST_CASE("nice_ticks: round steps in the peak's binary unit") {
  auto const t = tr::detail::nice_ticks(2.4 * (1 << 30), true);
  CHECK(std::string(t.unit_name) == "GiB");
  CHECK(t.step == doctest::Approx(0.5));
  CHECK(t.top == doctest::Approx(2.5));
  auto const m = tr::detail::nice_ticks(614.0 * (1 << 20) * 4, true);  // 2456 MiB = 2.40 GiB
  CHECK(std::string(m.unit_name) == "GiB");
  auto const e = tr::detail::nice_ticks(37, false, 8);
  CHECK(e.step == 5);
  CHECK(e.top == 40);
  auto const zero = tr::detail::nice_ticks(0, true);
  CHECK(std::string(zero.unit_name) == "B");
}

TEST_CASE("profiler writes step files named by step and coordinates; manifest last") {
  tr::profiler prof({.enabled = true,
                     .steps = {1},
                     .output_dir = output_dir() / "ranks",
                     .coordinates = {{"dp", 0}, {"pp", 1}, {"tp", 0}, {"cp", 1}}});
  tr::recording_resource act(aligned_resource{}, prof.recorder(), tr::categories::activation);
  void* weights = act.allocate(hs, 8192);  // allocated before any step
  for (std::int64_t step = 0; step < 3; ++step) {
    prof.begin_step(step);
    void* x = act.allocate(hs, 1024);
    void* y = act.allocate(hs, 2048);
    act.deallocate(hs, x, 1024);
    auto const written = prof.end_step(step);
    act.deallocate(hs, y, 2048);
    CHECK(written.has_value() == (step == 1));
    if (written) {
      CHECK(written->pickle == output_dir() / "ranks" / "step_1.dp0.pp1.tp0.cp1.pickle");
      CHECK(written->svg == output_dir() / "ranks" / "step_1.dp0.pp1.tp0.cp1.svg");
      CHECK(fs::exists(written->pickle));
      CHECK(fs::exists(written->svg));
      CHECK(written->active_bytes == 8192 + 2048);
      CHECK(written->dropped == 0);
      manifest << ",\n  \"ranks/step_1.dp0.pp1.tp0.cp1.pickle\": {\"events\": " << written->events
               << ", \"segments\": 2, \"active_bytes\": " << written->active_bytes << ", \"dropped\": 0}";
    }
  }
  CHECK_FALSE(fs::exists(output_dir() / "ranks" / "step_0.dp0.pp1.tp0.cp1.pickle"));
  CHECK_FALSE(fs::exists(output_dir() / "ranks" / "step_2.dp0.pp1.tp0.cp1.pickle"));
  act.deallocate(hs, weights, 8192);
  tr::write_file_atomically(output_dir() / "manifest.json", "{\n" + manifest.str() + "\n}\n");
  MESSAGE("snapshots written to " << output_dir().string());
}
