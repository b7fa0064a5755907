// SPDX-License-Identifier: Apache-2.0
#include <doctest/doctest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <string_view>
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

struct temp_dir {
  fs::path path = fs::temp_directory_path() / ("headroom_trace_profiler_" + std::to_string(tr::now_ns()));
  temp_dir() { fs::create_directories(path); }
  ~temp_dir() {
    std::error_code ec;
    fs::permissions(path, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(path, ec);
  }
};

tr::profiler_config enabled(fs::path dir) {
  tr::profiler_config c;
  c.enabled = true;
  c.output_dir = std::move(dir);
  return c;
}
}  // namespace

TEST_CASE("defaults follow AReaL: off, steps {0, 1}, 100000 entries") {
  tr::profiler_config const c;
  CHECK_FALSE(c.enabled);
  CHECK(c.steps == std::vector<std::int64_t>{0, 1});
  CHECK(c.max_entries == 100000);
  tr::profiler prof(c);  // disabled: no directory is created or needed
  CHECK_FALSE(fs::exists(c.output_dir));
  tr::recording_resource r(aligned_resource{}, prof.recorder());
  for (std::int64_t step = 0; step < 3; ++step) {
    prof.begin_step(step);
    CHECK_FALSE(prof.profiling());
    r.deallocate(hs, r.allocate(hs, 64), 64);
    CHECK_FALSE(prof.end_step(step).has_value());
  }
  CHECK(prof.recorder().events().size() == 0);
}

TEST_CASE("the default steps 0 and 1 are written; blocks live at step start appear") {
  temp_dir dir;
  tr::profiler prof(enabled(dir.path));
  tr::recording_resource r(aligned_resource{}, prof.recorder(), tr::categories::activation);
  void* kept = r.allocate(hs, 4096);
  for (std::int64_t step = 0; step < 4; ++step) {
    prof.begin_step(step);
    CHECK(prof.profiling() == (step < 2));
    void* x = r.allocate(hs, 128);
    r.deallocate(hs, x, 128);
    auto const out = prof.end_step(step);
    REQUIRE(out.has_value() == (step < 2));
    if (out) {
      CHECK(out->pickle.filename() == "step_" + std::to_string(step) + ".dp0.pp0.tp0.cp0.pickle");
      CHECK(out->active_bytes == 4096);  // `kept`, allocated before step 0, is in the picture
      // `kept`: a synthetic alloc (+ its segment); x: segment_alloc, alloc, free_requested,
      // free_completed, segment_free.
      CHECK(out->events == 7);
    }
  }
  std::size_t files = 0;
  for (auto const& e : fs::directory_iterator(dir.path)) files += e.path().extension() == ".pickle" ? 1 : 0;
  CHECK(files == 2);
  r.deallocate(hs, kept, 4096);
}

TEST_CASE("a full ring keeps the newest events and says how many were dropped") {
  temp_dir dir;
  auto c = enabled(dir.path);
  c.steps = {0};
  c.max_entries = 10;
  tr::profiler prof(c);
  tr::recording_resource r(aligned_resource{}, prof.recorder());
  prof.begin_step(0);
  for (int i = 0; i < 25; ++i) r.deallocate(hs, r.allocate(hs, 64), 64);
  auto const out = prof.end_step(0);
  REQUIRE(out.has_value());
  CHECK(out->dropped == 40);
  CHECK(prof.recorder().events().size() == 10);
}

TEST_CASE("bad configurations are rejected with the bad value named") {
  temp_dir dir;
  auto c = enabled(dir.path);
  c.steps = {};
  CHECK_THROWS_WITH_AS(tr::profiler<>{c}, doctest::Contains("steps is empty"), invalid_argument);
  c.steps = {0, -2};
  CHECK_THROWS_WITH_AS(tr::profiler<>{c}, doctest::Contains("step -2 is negative"), invalid_argument);
  c.steps = {0};
  c.max_entries = 0;
  CHECK_THROWS_WITH_AS(tr::profiler<>{c}, doctest::Contains("max_entries is 0"), invalid_argument);
  c.max_entries = 10;
  c.coordinates = {{"d.p", 0}};
  CHECK_THROWS_WITH_AS(tr::profiler<>{c}, doctest::Contains("axis name 'd.p'"), invalid_argument);
  c.coordinates = {{"dp", -1}};
  CHECK_THROWS_WITH_AS(tr::profiler<>{c}, doctest::Contains("dp=-1 is negative"), invalid_argument);
}

TEST_CASE("an output directory that cannot be created or written is rejected up front") {
  temp_dir dir;
  auto const file = dir.path / "a_file";
  std::ofstream(file) << "x";
  auto c = enabled(file / "sub");
  CHECK_THROWS_WITH_AS(tr::profiler<>{c}, doctest::Contains("cannot be created"), invalid_argument);
  c.output_dir = file;
  CHECK_THROWS_WITH_AS(tr::profiler<>{c}, doctest::Contains("a_file"), invalid_argument);
  c.output_dir = "";
  CHECK_THROWS_WITH_AS(tr::profiler<>{c}, doctest::Contains("output directory is empty"), invalid_argument);
  auto const locked = dir.path / "locked";
  fs::create_directories(locked);
  fs::permissions(locked, fs::perms::owner_read | fs::perms::owner_exec);
  std::ofstream probe(locked / "probe");
  if (probe.good()) {
    MESSAGE("running as a user who can write a read-only directory (root): skipping that check");
  } else {
    c.output_dir = locked;
    CHECK_THROWS_WITH_AS(tr::profiler<>{c}, doctest::Contains("is not writable"), invalid_argument);
  }
}

TEST_CASE("a directory that becomes unwritable fails end_step loudly, leaving no file behind") {
  temp_dir dir;
  auto c = enabled(dir.path / "out");
  c.steps = {0};
  tr::profiler prof(c);
  fs::remove_all(dir.path / "out");
  std::ofstream(dir.path / "out") << "now a file";
  prof.begin_step(0);
  CHECK_THROWS_WITH_AS((void)prof.end_step(0), doctest::Contains("cannot create"), invalid_argument);
  CHECK_FALSE(prof.profiling());
  prof.begin_step(1);  // the profiler is usable again
  CHECK_FALSE(prof.end_step(1).has_value());
}

TEST_CASE("a write that fails half-way leaves no partial file and a usable profiler") {
  temp_dir dir;
  auto c = enabled(dir.path);
  c.steps = {0};
  c.write_svg = false;
  // In a child process: a file size limit of 1 KiB (SIGXFSZ ignored, so write() fails with EFBIG).
  pid_t const child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    std::signal(SIGXFSZ, SIG_IGN);
    rlimit const limit{1024, 1024};
    setrlimit(RLIMIT_FSIZE, &limit);
    int code = 0;
    try {
      tr::profiler prof(c);
      tr::recording_resource r(aligned_resource{}, prof.recorder(), tr::categories::activation);
      prof.begin_step(0);
      for (int i = 0; i < 200; ++i) r.deallocate(hs, r.allocate(hs, 64), 64);
      (void)prof.end_step(0);
      code = 2;  // the write should have failed
    } catch (invalid_argument const& e) {
      code = std::string_view(e.what()).find("failed") != std::string_view::npos ? 0 : 3;
    } catch (...) {
      code = 4;
    }
    std::_Exit(code);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  for (auto const& e : fs::directory_iterator(dir.path)) {
    CHECK_MESSAGE(e.path().extension() != ".partial", e.path().string());
    CHECK_MESSAGE(e.path().extension() != ".pickle", e.path().string());
  }
}

TEST_CASE("a step number that comes round again gets a file of its own") {
  temp_dir dir;
  auto c = enabled(dir.path);
  c.steps = {1};
  c.coordinates = {{"dp", 0}, {"pp", 1}};
  tr::profiler prof(c);
  std::vector<fs::path> written;
  for (int epoch = 0; epoch < 3; ++epoch) {
    for (std::int64_t step = 0; step < 2; ++step) {
      prof.begin_step(step);
      if (auto out = prof.end_step(step)) {
        written.push_back(out->pickle);
        CHECK(out->occurrence == epoch + 1);
      }
    }
  }
  REQUIRE(written.size() == 3);
  CHECK(written[0].filename() == "step_1.dp0.pp1.pickle");
  CHECK(written[1].filename() == "step_1-2.dp0.pp1.pickle");
  CHECK(written[2].filename() == "step_1-3.dp0.pp1.pickle");
  for (auto const& p : written) CHECK(fs::exists(p));
  std::ifstream svg(dir.path / "step_1-2.dp0.pp1.svg");
  std::string const text((std::istreambuf_iterator<char>(svg)), std::istreambuf_iterator<char>());
  CHECK(text.find("step 1 (2), dp0 pp1") != std::string::npos);  // the rank's coordinates in the title
}

TEST_CASE("steps must be begun before they end, one at a time, never negative") {
  tr::profiler prof(tr::profiler_config{});
  CHECK_THROWS_WITH_AS((void)prof.end_step(3), doctest::Contains("end_step(3): no step was begun"), logic_error);
  CHECK_THROWS_WITH_AS(prof.begin_step(-1), doctest::Contains("step -1 is negative"), invalid_argument);
  prof.begin_step(4);
  CHECK_THROWS_WITH_AS(prof.begin_step(5), doctest::Contains("step 4 is still open"), logic_error);
  CHECK_THROWS_WITH_AS((void)prof.end_step(5), doctest::Contains("the open step is 4"), logic_error);
  CHECK_FALSE(prof.end_step(4).has_value());
}
