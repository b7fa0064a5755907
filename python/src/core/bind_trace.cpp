// SPDX-License-Identifier: Apache-2.0
// headroom::trace from Python: a recorder fed with allocator events (as they happen, or replayed
// from a list), its snapshot, and the memory_viz pickle / SVG of it. python/headroom/trace.py is
// the Pythonic layer.
#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "bindings.hpp"
#include "convert.hpp"
#include "headroom/trace/file.hpp"
#include "headroom/trace/memory_viz.hpp"
#include "headroom/trace/recorder.hpp"
#include "headroom/trace/snapshot.hpp"
#include "headroom/trace/svg.hpp"
#include "headroom/trace/take_snapshot.hpp"

namespace headroom::python {

namespace {

using namespace headroom::trace;

/// Events keep `char const*` to category names and file / function names (static storage in
/// C++). From Python the strings live here, shared by the recorder and its snapshots.
class string_pool {
 public:
  char const* intern(std::string s) {
    std::lock_guard lock(mutex_);
    return strings_.insert(std::move(s)).first->c_str();
  }

 private:
  std::mutex mutex_;
  std::set<std::string> strings_;
};

struct py_snapshot {
  snapshot s;
  std::shared_ptr<string_pool> strings;  // what s's events point into
};

struct py_recorder {
  explicit py_recorder(recorder_options const& o) : rec(o) {}
  recorder<trace::single_thread> rec;
  std::shared_ptr<string_pool> strings = std::make_shared<string_pool>();

  category category_of(nb::handle h) {
    if (h.is_none()) return {};
    if (!nb::isinstance<nb::str>(h))
      throw nb::type_error(headroom::detail::concat("category = ", repr_of(h), "; expected a str or None").c_str());
    return category{strings->intern(as_utf8(h, "category"))};
  }
  frame frame_of(nb::handle h) {
    if (h.is_none()) return {};
    if (!PyTuple_Check(h.ptr()) || PyTuple_Size(h.ptr()) != 3)
      throw nb::type_error(
          headroom::detail::concat("frame = ", repr_of(h), "; expected a (filename, function, line) tuple or None")
              .c_str());
    nb::tuple t = nb::borrow<nb::tuple>(h);
    auto const line = as_u64(t[2], "frame line");
    expects(line > 0 && line <= UINT32_MAX, "frame line = ", line, "; expected 1 .. 2^32 - 1");
    return frame{strings->intern(as_utf8(t[0], "frame filename")), strings->intern(as_utf8(t[1], "frame function")),
                 static_cast<std::uint32_t>(line)};
  }
  void record(action a, int_arg addr, int_arg size, int_arg stream, nb::typed<nb::handle, std::string> cat,
              nb::handle where) {
    std::uint64_t const p = as_u64(addr, "addr");
    expects(p != 0, "addr = 0; expected the block's non-null address");
    std::uint64_t const n = as_u64(size, "size");
    rec.record(a, reinterpret_cast<void const*>(static_cast<std::uintptr_t>(p)), static_cast<std::size_t>(n),
               as_u64(stream, "stream"), category_of(cat), frame_of(where));
  }
};

/// "free" is an ordinary free: the recorder records free_completed, and the snapshot writes it
/// free_requested + free_completed as PyTorch does. free_requested then free_completed is a
/// deferred free (the block is pending in between).
action action_of(nb::handle h) {
  auto const i =
      as_choice(h, "action", {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free", "free"});
  return i == 5 ? action::free_completed : static_cast<action>(i);
}

nb::list frames_list(frame const& f) {
  nb::list out;
  if (!f.empty()) {
    nb::dict d;
    d["filename"] = f.filename;
    d["name"] = f.function;
    d["line"] = f.line;
    out.append(d);
  }
  return out;
}

std::vector<std::pair<std::string, std::string>> labels_of(nb::handle h) {
  std::vector<std::pair<std::string, std::string>> out;
  if (h.is_none()) return out;
  if (!nb::isinstance<nb::dict>(h))
    throw nb::type_error(headroom::detail::concat("labels = ", repr_of(h), "; expected a dict of str").c_str());
  for (auto [k, v] : nb::cast<nb::dict>(h))
    out.emplace_back(as_utf8(nb::str(k), "labels key"), as_utf8(nb::str(v), "labels value"));
  return out;
}

}  // namespace

void bind_trace(nb::module_& m) {
  nb::module_ sub = m.def_submodule("trace", "headroom::trace");

  nb::class_<py_snapshot>(sub, "Snapshot", "Live segments and blocks plus the recorded events, as memory_viz reads.")
      .def_prop_ro("device", [](py_snapshot const& p) { return p.s.device; })
      .def_prop_ro("reserved_bytes", [](py_snapshot const& p) { return p.s.reserved_bytes(); })
      .def_prop_ro("active_bytes", [](py_snapshot const& p) { return p.s.active_bytes(); })
      .def_prop_ro("dropped", [](py_snapshot const& p) { return p.s.dropped; })
      .def_prop_ro("untracked", [](py_snapshot const& p) { return p.s.untracked; })
      .def_prop_ro("overlapping", [](py_snapshot const& p) { return p.s.overlapping; })
      .def_prop_ro(
          "synthetic", [](py_snapshot const& p) { return p.s.synthetic; },
          "Allocs added at the start of the trace for blocks live before it.")
      .def_prop_ro(
          "allocator_settings",
          [](py_snapshot const& p) {
            nb::dict d;
            d["trace_alloc_max_entries"] = p.s.max_entries;
            d["trace_alloc_overflowed"] = p.s.dropped > 0;
            return d;
          },
          "What the pickle's allocator_settings holds (PyTorch's keys for its ring).")
      .def_prop_ro("segments",
                   [](py_snapshot const& p) {
                     nb::list out;
                     for (auto const& seg : p.s.segments) {
                       nb::dict d;
                       d["address"] = seg.addr;
                       d["total_size"] = seg.size;
                       d["active_size"] = seg.active_bytes();
                       d["stream"] = seg.stream;
                       d["category"] = std::string(seg.what.view());
                       nb::list blocks;
                       for (auto const& b : seg.blocks) {
                         nb::dict bd;
                         bd["address"] = b.addr;
                         bd["size"] = b.size;
                         bd["state"] = std::string(block_state_name(b.state));
                         bd["category"] = std::string(b.what.view());
                         bd["frames"] = frames_list(b.where);
                         blocks.append(bd);
                       }
                       d["blocks"] = blocks;
                       out.append(d);
                     }
                     return out;
                   })
      .def_prop_ro("trace",
                   [](py_snapshot const& p) {
                     nb::list out;
                     for (auto const& e : p.s.trace) {
                       nb::dict d;
                       d["action"] = std::string(action_name(e.kind));
                       d["addr"] = e.addr;
                       d["size"] = e.size;
                       d["stream"] = e.stream;
                       d["time_us"] = e.time / 1000;  // Unix-epoch microseconds, as the pickle's
                       d["category"] = std::string(e.what.view());
                       d["frames"] = frames_list(e.where());
                       d["deferred"] = (e.flags & event::deferred) != 0;
                       d["synthetic"] = (e.flags & event::synthetic) != 0;
                       out.append(d);
                     }
                     return out;
                   })
      .def(
          "to_memory_viz",
          [](py_snapshot const& p, nb::handle labels) {
            std::string const bytes = to_memory_viz(p.s, labels_of(labels));
            return nb::bytes(bytes.data(), bytes.size());
          },
          nb::arg("labels") = nb::none(), "The pickle torch.cuda._memory_viz and pytorch.org/memory_viz open.")
      .def(
          "write",
          [](py_snapshot const& p, std::string const& path, nb::handle labels) {
            write_file_atomically(path, to_memory_viz(p.s, labels_of(labels)));
          },
          nb::arg("path"), nb::arg("labels") = nb::none(), "Writes the pickle to `path` (via path.partial).")
      .def(
          "to_svg",
          [](py_snapshot const& p, std::string const& title, int_arg max_points) {
            return to_svg(p.s, title, as_size(max_points, "max_points"));
          },
          nb::arg("title") = "Active Memory Timeline", nb::arg("max_points") = 2000,
          "The Active Memory Timeline as a self-contained SVG.");

  nb::class_<py_recorder>(sub, "Recorder", "Allocator events and live blocks of one device, for snapshots.")
      .def(
          "__init__",
          [](py_recorder* self, int_arg max_entries, int_arg max_live, int_arg device, bool timestamps) {
            recorder_options o;
            o.max_entries = as_size(max_entries, "max_entries");
            o.max_live = as_size(max_live, "max_live");
            o.device = as_int(device, "device");
            o.timestamps = timestamps;
            new (self) py_recorder(o);
          },
          nb::arg("max_entries") = 100'000, nb::arg("max_live") = 1u << 15, nb::arg("device") = 0,
          nb::arg("timestamps") = true)
      .def("start", [](py_recorder& r) { r.rec.start(); })
      .def("stop", [](py_recorder& r) { r.rec.stop(); })
      .def_prop_ro("recording", [](py_recorder const& r) { return r.rec.recording(); })
      .def("clear_events", [](py_recorder& r) { r.rec.clear_events(); })
      .def_prop_ro("dropped", [](py_recorder const& r) { return r.rec.dropped(); })
      .def_prop_ro(
          "untracked", [](py_recorder const& r) { return r.rec.live().untracked(); },
          "Allocations the full live table had no room for (left out of snapshots).")
      .def_prop_ro(
          "live", [](py_recorder const& r) { return r.rec.live().size(); }, "Blocks and segments live now.")
      .def(
          "record",
          [](py_recorder& r, str_arg a, int_arg addr, int_arg size, int_arg stream,
             nb::typed<nb::handle, std::string> cat,
             nb::handle where) { r.record(action_of(a), addr, size, stream, cat, where); },
          nb::arg("action"), nb::arg("addr"), nb::arg("size"), nb::arg("stream") = 0, nb::arg("category") = nb::none(),
          nb::arg("frame") = nb::none(),
          "One event: action alloc, free (an ordinary free), free_requested then free_completed (a deferred "
          "free), segment_alloc or segment_free.")
      .def(
          "snapshot",
          [](py_recorder const& r) {
            return py_snapshot{take_snapshot(r.rec), r.strings};
          },
          "The snapshot now: live segments and blocks, and the events recorded since start().");
}

}  // namespace headroom::python
