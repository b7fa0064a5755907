#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Checks memory snapshots the way PyTorch's memory_viz viewer reads them.

    python3 tests/trace/check_snapshot.py DIR_OR_FILE... [--any-protocol]

For every *.pickle found:
  * protocol: the PROTO opcode says 2..4 and every opcode is one MemoryViz.js's unpickler
    handles (torch/utils/viz/MemoryViz.js `unpickle`); --any-protocol skips this (for
    snapshots written by torch itself with Python's default protocol);
  * structure: `segments` and `device_traces` as annotate_snapshot, process_alloc_data and
    MemoryView need them (keys, types, block sizes summing to the segment size, frames with
    filename/line/name, an "unknown" category when categories are used); for headroom's files
    also allocator_settings (trace_alloc_max_entries, trace_alloc_overflowed as PyTorch writes
    them) and time_us as Unix-epoch microseconds;
  * replays: the Active Memory Timeline pairing (an address freed before it is allocated
    again) and the Allocator State History's backward simulation (every block inside a
    segment at every event, a free_requested only on a live block).
If DIR holds manifest.json ({file: {events, segments, active_bytes, dropped}}), the values
are compared with the snapshot's (the writer's own record of what it wrote).
Exit status 0 when every file passes; the failures are printed otherwise.
"""
import json
import os
import pickle
import pickletools
import sys

# Opcodes MemoryViz.js's unpickle() has a case for.
VIEWER_OPCODES = {
    "APPENDS", "BINGET", "BININT", "BININT1", "BININT2", "EMPTY_DICT", "EMPTY_LIST", "FRAME", "LONG1",
    "LONG_BINGET", "MARK", "MEMOIZE", "PROTO", "SETITEMS", "SHORT_BINUNICODE", "STOP", "TUPLE2", "APPEND",
    "NEWFALSE", "NEWTRUE", "BINPUT", "BINUNICODE", "EMPTY_TUPLE", "NONE", "BINFLOAT", "TUPLE", "TUPLE1",
    "TUPLE3", "LONG_BINPUT", "LIST", "DICT", "SETITEM",
}
BLOCK_ACTIONS = {"alloc", "free_requested", "free_completed"}
SEGMENT_ACTIONS = {"segment_alloc", "segment_free", "segment_map", "segment_unmap"}
OTHER_ACTIONS = {"snapshot", "oom", "user_defined"}
STATES = {"active_allocated", "active_pending_free", "inactive"}


class Failure(Exception):
    pass


def expect(cond, msg):
    if not cond:
        raise Failure(msg)


def check_protocol(data):
    ops = list(pickletools.genops(data))
    expect(ops and ops[0][0].name == "PROTO", "pickle does not start with PROTO")
    version = ops[0][1]
    expect(2 <= version <= 4, f"pickle protocol {version}; the viewer reads 2..4")
    for op, _arg, pos in ops:
        expect(op.proto <= 4, f"opcode {op.name} at {pos} needs protocol {op.proto}")
        expect(op.name in VIEWER_OPCODES, f"opcode {op.name} at {pos} is unknown to MemoryViz.js")
    return version


def check_frames(frames, where):
    expect(isinstance(frames, list), f"{where}: frames is {type(frames).__name__}, expected a list")
    for f in frames:
        for k, t in (("filename", str), ("line", int), ("name", str)):
            expect(isinstance(f.get(k), t), f"{where}: frame {f} lacks {k} as {t.__name__}")


def check_structure(snap):
    expect(isinstance(snap, dict), f"top level is {type(snap).__name__}, expected dict")
    segments, traces = snap.get("segments"), snap.get("device_traces")
    expect(isinstance(segments, list), "segments missing or not a list")
    expect(isinstance(traces, list) and all(isinstance(t, list) for t in traces),
           "device_traces missing or not a list of lists")
    categories = set()
    for d, trace in enumerate(traces):
        for i, e in enumerate(trace):
            where = f"device_traces[{d}][{i}]"
            a = e.get("action")
            expect(a in BLOCK_ACTIONS | SEGMENT_ACTIONS | OTHER_ACTIONS, f"{where}: action {a!r}")
            if a != "oom":
                expect(isinstance(e.get("addr"), int), f"{where}: addr missing or not an int")
            expect(isinstance(e.get("size"), int) and e["size"] >= 0, f"{where}: size missing or negative")
            expect(isinstance(e.get("stream", 0), int), f"{where}: stream is not an int")
            if "frames" in e:
                check_frames(e["frames"], where)
            if "category" in e:
                categories.add(e["category"])
    if categories:
        # annotate_snapshot: `snapshot.categores.push('unknown')` throws unless one is present.
        expect("unknown" in categories, f"categories {sorted(categories)} lack 'unknown'")
    settings = snap.get("allocator_settings", {})
    expect(isinstance(settings, dict), "allocator_settings is not a dict")
    if "headroom" in snap:
        # headroom's files: PyTorch's ring fields, and time_us as Unix-epoch microseconds.
        dropped = snap["headroom"].get("dropped_events", 0)
        expect(isinstance(settings.get("trace_alloc_max_entries"), int), "allocator_settings lacks trace_alloc_max_entries")
        expect(settings.get("trace_alloc_overflowed") is (dropped > 0),
               f"allocator_settings.trace_alloc_overflowed is {settings.get('trace_alloc_overflowed')!r} "
               f"with {dropped} dropped events")
        for d, trace in enumerate(traces):
            for i, e in enumerate(trace):
                t = e.get("time_us")
                expect(isinstance(t, int) and 1_577_836_800_000_000 < t < 4_102_444_800_000_000,
                       f"device_traces[{d}][{i}]: time_us {t!r} is not Unix-epoch microseconds (2020..2100)")
    for s, seg in enumerate(segments):
        where = f"segments[{s}]"
        for k in ("device", "address", "total_size", "stream"):
            expect(isinstance(seg.get(k), int), f"{where}: {k} missing or not an int")
        expect(isinstance(seg.get("blocks"), list), f"{where}: blocks missing")
        total = 0
        for b, blk in enumerate(seg["blocks"]):
            bw = f"{where}.blocks[{b}]"
            expect(isinstance(blk.get("size"), int) and blk["size"] >= 0, f"{bw}: size")
            expect(blk.get("state") in STATES, f"{bw}: state {blk.get('state')!r}")
            if "frames" in blk:
                check_frames(blk["frames"], bw)
                expect(isinstance(blk.get("requested_size"), int), f"{bw}: frames without requested_size")
            total += blk["size"]
        expect(total == seg["total_size"], f"{where}: blocks sum to {total}, total_size is {seg['total_size']}")
    return categories


def final_blocks(snap, device):
    """Blocks as annotate_snapshot addresses them (segment address + preceding sizes)."""
    segs, blocks = {}, {}
    for seg in snap["segments"]:
        if seg["device"] != device:
            continue
        segs[seg["address"]] = seg["total_size"]
        addr = seg["address"]
        for b in seg["blocks"]:
            if b["state"] in ("active_allocated", "active_pending_free"):
                blocks[addr] = {"size": b["size"], "pending": b["state"] == "active_pending_free"}
            addr += b["size"]
    return segs, blocks


def merged_trace(trace):
    """annotate_snapshot: free_requested directly followed by free_completed of the same addr -> free."""
    out = []
    for e in trace:
        if e["action"] == "free_completed" and out and out[-1]["action"] == "free_requested" \
                and out[-1]["addr"] == e["addr"]:
            out[-1] = dict(out[-1], action="free")
            continue
        out.append(e)
    return out


def check_timeline(trace):
    """process_alloc_data: an address is freed before it is allocated again."""
    live = set()
    for i, e in enumerate(trace):
        if e["action"] == "alloc":
            expect(e["addr"] not in live, f"event {i}: alloc of {e['addr']:#x}, still allocated")
            live.add(e["addr"])
        elif e["action"] in ("free", "free_completed"):
            live.discard(e["addr"])


def check_segment_history(snap, device, trace):
    """MemoryView.simulate_memory, run backwards from the final state over every event."""
    segs, blocks = final_blocks(snap, device)

    def inside(addr):
        return any(a <= addr < a + n for a, n in segs.items())

    for addr in blocks:
        expect(inside(addr), f"final block {addr:#x} lies in no segment")
    for i in range(len(trace) - 1, -1, -1):
        e = trace[i]
        a = e["action"]
        if a in ("free", "free_completed"):
            blocks[e["addr"]] = {"size": e["size"], "pending": a == "free_completed"}
            expect(inside(e["addr"]), f"event {i} ({a} {e['addr']:#x}): the block lies in no segment")
        elif a == "free_requested":
            expect(e["addr"] in blocks, f"event {i}: free_requested of {e['addr']:#x}, which is not live")
            blocks[e["addr"]]["pending"] = False
        elif a == "alloc":
            blocks.pop(e["addr"], None)
        elif a == "segment_free":
            segs[e["addr"]] = e["size"]
        elif a == "segment_alloc":
            expect(e["addr"] in segs, f"event {i}: segment_alloc of {e['addr']:#x} never freed nor live")
            size = segs.pop(e["addr"])
            inner = [b for b in blocks if e["addr"] <= b < e["addr"] + size]
            expect(not inner, f"event {i}: blocks {[hex(b) for b in inner]} outlive their segment's alloc")


def check_file(path, any_protocol=False):
    with open(path, "rb") as f:
        data = f.read()
    version = None if any_protocol else check_protocol(data)
    snap = pickle.loads(data)
    check_structure(snap)
    for device, trace in enumerate(snap["device_traces"]):
        merged = merged_trace(trace)
        check_timeline(merged)
        check_segment_history(snap, device, merged)
    return snap, version


def summary(snap):
    events = sum(1 for t in snap["device_traces"] for e in t if e["action"] != "snapshot")
    active = sum(b["size"] for s in snap["segments"] for b in s["blocks"] if b["state"] != "inactive")
    return {"events": events, "segments": len(snap["segments"]), "active_bytes": active,
            "dropped": snap.get("headroom", {}).get("dropped_events", 0)}


def main(argv):
    any_protocol = "--any-protocol" in argv
    args = [a for a in argv if not a.startswith("--")]
    if not args:
        print(__doc__)
        return 2
    files, manifests = [], {}
    for a in args:
        if os.path.isdir(a):
            for root, _dirs, names in os.walk(a):
                files += [os.path.join(root, n) for n in sorted(names) if n.endswith(".pickle")]
                if "manifest.json" in names:
                    with open(os.path.join(root, "manifest.json")) as f:
                        for name, want in json.load(f).items():
                            manifests[os.path.join(root, name)] = want
        else:
            files.append(a)
    if not files:
        print(f"no .pickle files in {args}")
        return 1
    failed = 0
    for a in args:
        # The writer's primitive encodings: values.pickle must load to what values.json says.
        bin_path, json_path = os.path.join(a, "values.pickle.bin"), os.path.join(a, "values.json")
        if os.path.isdir(a) and os.path.exists(bin_path):
            with open(bin_path, "rb") as f:
                data = f.read()
            with open(json_path) as f:
                want = json.load(f)
            try:
                check_protocol(data)
                got = pickle.loads(data)
                expect(got == want, f"loads to {got!r}, expected {want!r}")
                print(f"ok   {bin_path}: {len(want)} values round-trip")
            except Exception as ex:  # noqa: BLE001
                failed += 1
                print(f"FAIL {bin_path}: {type(ex).__name__}: {ex}")
    for path in files:
        try:
            snap, version = check_file(path, any_protocol)
            got = summary(snap)
            want = manifests.get(path)
            if want is not None:
                for k, v in want.items():
                    expect(got.get(k) == v, f"{k} is {got.get(k)}, the writer recorded {v}")
            print(f"ok   {path}: protocol {version}, {got['events']} events, {got['segments']} segments, "
                  f"{got['active_bytes']} active bytes, {got['dropped']} dropped")
        except Exception as ex:  # noqa: BLE001 -- every failure is reported, then counted
            failed += 1
            print(f"FAIL {path}: {type(ex).__name__}: {ex}")
    missing = [p for p in manifests if p not in files]
    for p in missing:
        failed += 1
        print(f"FAIL {p}: listed in manifest.json but not written")
    print(f"{len(files) - failed + len(missing)} of {len(files)} snapshot(s) pass")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
