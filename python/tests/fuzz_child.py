# SPDX-License-Identifier: Apache-2.0
"""The child process of test_fuzz_bindings.py (one per batch: a crash kills only it).

  fuzz_child.py --values                 the argument recipe names (JSON)
  fuzz_child.py --list [--module M]      every callable name of M (default headroom._core) as JSON;
                                         exit 77 when M is not importable
  fuzz_child.py --run [--module M] [--threads N]   runs the JSON batch [[name, [recipe, ...]], ...]
                                         from stdin
  fuzz_child.py --run --lifetimes        objects used after their owner is gone

Names: "f:<path>" calls a module function or class, "m:<class>:<method>" a method of a fresh
instance (FACTORIES), "p:<class>:<property>" reads a property of one, "u:<class>:<method>" and
"g:<class>:<property>" call the unbound method or the property's getter with drawn arguments
(the first one as `self`). Before each call it prints "call <i> <name> <recipes>"; a
call that raises anything but a headroom error, TypeError or MemoryError prints "BAD ..."; one
running past 10 s ends the process (faulthandler prints where).
"""
import faulthandler
import inspect
import json
import os
import resource
import sys
import threading

import numpy as np

CALL_SECONDS = 10


class DLPackTemp:
    """Exports a fresh copy through __dlpack__ each time: nothing else holds that buffer."""

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, stream=None, **kwargs):
        return np.array(self.a, copy=True).__dlpack__()

    def __dlpack_device__(self):
        return (1, 0)


class MutatingIndex:
    """__index__ drops the last reference to itself from the dict it sits in."""

    def __init__(self, owner, key):
        self.owner, self.key = owner, key

    def __index__(self):
        self.owner.pop(self.key, None)
        return 7


def _mutating_dict():
    d = {}
    d["a"] = MutatingIndex(d, "a")
    return d


VALUES = {
    "2**31": "2**31", "2**32": "2**32", "2**62+1": "2**62 + 1", "2**63-1": "2**63 - 1", "2**63": "2**63",
    "2**64": "2**64", "-2**63": "-2**63", "none": "None", "true": "True", "false": "False", "nan": "float('nan')", "inf": "float('-inf')",
    "float": "3.5", "str_layout": "'dual_chunk'", "str_contiguous": "'contiguous'", "str_bf16": "'bf16'",
    "str_max": "'max'", "str_fixed": "'fixed'", "str_interval": "'interval'", "str_by_bytes": "'by_bytes'",
    "str_alloc": "'alloc'", "str_free": "'free'", "str_empty": "''", "surrogate": "'\\ud800x'", "bytes": "b'ab'",
    "bytes16": "bytes(16)", "str_long": "'x' * 100000", "list_empty": "[]", "list_cu": "[0, 8, 24]",
    "list_neg": "[0, -8, 4]", "list_desc": "[24, 8, 0]", "list_2big": "[0, 2**63]", "list_long": "list(range(100000))",
    "list_nested": "[[1, 2], [3]]", "list_str": "['a', 'b']", "list_surrogate": "['\\ud800']",
    "frame": "('f.py', 'fn', 3)", "frame_bad": "(b'f', 5, 3)", "dict_empty": "{}", "dict": "{'a': 1, 'b': 2.5}",
    "dict_bad": "{'a': 'x', 1: None}", "dict_np": "{'a': np.datetime64('2020-01-01'), 'b': np.complex128(1j), "
    "'c': np.bool_(True), 'd': np.str_('s')}", "dict_mutating": "_mutating_dict()",
    "np_i64": "np.int64(5)", "np_u64max": "np.uint64(2**64 - 1)", "np_bool": "np.bool_(True)",
    "np_nan": "np.float64('nan')", "arr_empty": "np.zeros(0, np.int64)", "arr_cu": "np.array([0, 8, 24], np.int64)",
    "arr_i32": "np.array([0, 8, 24], np.int32)", "arr_strided": "np.arange(0, 48, 2, dtype=np.int64)[::3]",
    "arr_0d": "np.array(5)", "arr_2d": "np.zeros((2, 3), np.int64)", "arr_float": "np.array([0.5, np.nan])",
    "arr_str": "np.array(['a'])", "arr_u64": "np.array([2**64 - 1], np.uint64)", "arr_big": "np.arange(1 << 20)",
    "dlpack_tmp": "DLPackTemp(np.array([0, 8, 24], np.int64))", "dlpack_big": "DLPackTemp(np.arange(1 << 20))",
    "object": "object()", "func": "len", "workload": "make('pool.Workload')", "plan": "make('pool.Plan')",
    "order": "pool.training_order(2)", "orders": "[pool.training_order(2), pool.evaluation_order(2)]",
    "partition": "make('cp.Partition')", "cp_padding": "make('cp.Padding')", "snapshot": "make('trace.Snapshot')",
    "lease": "make('pool.Lease')", "pad_elements": "pool.Padding.elements(8)",
    # headroom._cuda's device boundaries, (pointer, entries, bytes per entry): make('cp.Partition')'s 3
    # entries, and a bad entry width.
    "device_cu": "(4096, 3, 8)", "device_cu_i32": "(4096, 3, 4)", "device_cu_bad": "(4096, 3, 2)",
}

# One valid instance per class (methods and properties are fuzzed on fresh ones).
FACTORIES = {
    "pool.Bucket": "pool.Bucket('bf16', 4096, 'w')",
    "pool.Unit": "pool.Unit('u', [pool.Bucket('bf16', 4096)])",
    "pool.Workload": "pool.Workload('w', [pool.Unit('u0', [pool.Bucket('bf16', 4096), pool.Bucket('f32', 512)]), "
                     "pool.Unit('u1', [pool.Bucket('bf16', 4096)]), pool.Unit('u2', [pool.Bucket('f32', 100)])], "
                     "[pool.Bucket('f32', 64)])",
    "pool.ExecutionOrder": "pool.training_order(3)",
    "pool.Padding": "pool.Padding.elements(8)",
    "pool.Plan": "pool.make_interval_plan(make('pool.Workload'), [pool.training_order(3)])",
    "pool.Slot": "make('pool.Plan').slots[0]",
    "pool.SlotShape": "make('pool.Plan').shapes[0]",
    "pool.HostUnitPool": "pool.HostUnitPool(pool.make_plan(make('pool.Workload'), 'max'))",
    "pool.Lease": "make('pool.HostUnitPool').acquire(0)",
    "pool.ResidencyConflict": "pool.find_conflict(make('pool.Plan'), pool.training_order(3), 3)",
    "cp.Padding": "cp.Padding([0, 5, 12], 4)",
    "cp.Partition": "cp.Partition([0, 8, 24], 2, 1)",
    "trace.Recorder": "trace.Recorder(64, 64)",
    "trace.Snapshot": "snapshot_with_events()",
}


def snapshot_with_events():
    r = NS["trace"].Recorder(64, 64)
    r.start()
    r.record("alloc", 4096, 512, 0, "weights", ("model.py", "init", 3))
    r.record("free", 4096, 512)
    return r.snapshot()


root = None
_cache = {}
_shared = False


def resolve(path):
    obj = root
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj


def make(cls):
    if _shared and cls in _cache:
        return _cache[cls]
    obj = eval(FACTORIES[cls], NS)  # noqa: S307 - recipes of this file
    if _shared:
        _cache[cls] = obj
    return obj


def load(module):
    global root
    import importlib

    import headroom  # noqa: F401 - registers the error classes
    root = importlib.import_module(module)
    for name in ("pool", "cp", "trace", "stats", "pipeline"):
        NS[name] = getattr(importlib.import_module("headroom._core"), name)
    NS.update(headroom=headroom)


NS = {"np": np, "DLPackTemp": DLPackTemp, "_mutating_dict": _mutating_dict, "make": None,
      "snapshot_with_events": snapshot_with_events}
NS["make"] = make


def listing():
    out = []

    def walk(obj, prefix):
        for name, v in sorted(vars(obj).items()):
            if name.startswith("_") and name not in ("__init__",):
                continue
            path = f"{prefix}{name}"
            if inspect.ismodule(v):
                if v.__name__.startswith(root.__name__):
                    walk(v, path + ".")
            elif isinstance(v, type):
                out.append(f"f:{path}")
                for attr, member in sorted(vars(v).items()):
                    if attr.startswith("__") and attr not in ("__getitem__", "__eq__", "__len__", "__contains__",
                                                              "__str__", "__repr__"):
                        continue
                    if isinstance(member, property):
                        out.append(f"{'p' if path in FACTORIES else 'g'}:{path}:{attr}")
                    elif callable(member):
                        if type(member).__name__ == "nb_func":  # def_static
                            out.append(f"f:{path}.{attr}")
                        else:
                            out.append(f"u:{path}:{attr}")
                            if path in FACTORIES:
                                out.append(f"m:{path}:{attr}")
            elif callable(v):
                out.append(f"f:{path}")

    walk(root, "")
    return out


def allowed(name, e):
    import headroom

    if isinstance(e, (headroom.error, TypeError, MemoryError)):
        return True
    # Python's protocols: a missing key or index.
    return isinstance(e, (KeyError, IndexError)) and name.endswith("__getitem__")


# Under ASan a failed operator new is ASan's own fatal report, not std::bad_alloc: ints are kept
# below 2^24 there (the normal build's run draws the huge ones).
ASAN = "asan" in os.environ.get("LD_PRELOAD", "")


def one_call(i, name, recipes, lock):
    args = []
    for r in recipes:
        v = int(r[4:]) if r.startswith("int:") else eval(VALUES[r], NS)  # noqa: S307
        if ASAN and type(v) is int and abs(v) >= 1 << 24:
            v = v % (1 << 24) if v > 0 else -(-v % (1 << 24))
        args.append(v)
    with lock:
        print(f"call {i} {name} {recipes}", flush=True)
    kind, _, rest = name.partition(":")
    if kind == "f":
        fn = __import__("ctypes").string_at if rest == "ctypes.string_at" else resolve(rest)  # the self-test
        call = lambda: fn(*args)  # noqa: E731
    elif kind in ("m", "p"):
        cls, _, attr = rest.partition(":")
        obj = make(cls)
        call = (lambda: getattr(obj, attr)(*args)) if kind == "m" else (lambda: getattr(obj, attr))
    elif kind == "g":  # a property's getter with a drawn object
        cls, _, attr = rest.partition(":")
        getter = vars(resolve(cls))[attr].fget
        call = lambda: getter(*args)  # noqa: E731
    else:
        cls, _, attr = rest.partition(":")
        member = vars(resolve(cls))[attr]
        call = lambda: member(*args)  # noqa: E731
    try:
        call()
    except BaseException as e:  # noqa: BLE001 - judged below
        if not allowed(name, e):
            with lock:
                print(f"BAD call {i} {name} {recipes}: {type(e).__module__}.{type(e).__name__}: {str(e)[:300]}",
                      flush=True)
        elif len(str(e)) > 2000:
            with lock:
                print(f"BAD call {i} {name} {recipes}: a message of {len(str(e))} characters", flush=True)


def run(batch, threads):
    lock = threading.Lock()
    if threads <= 1:
        for i, (name, recipes) in enumerate(batch):
            faulthandler.dump_traceback_later(CALL_SECONDS, exit=True)
            one_call(i, name, recipes, lock)
            faulthandler.cancel_dump_traceback_later()
        return
    global _shared
    _shared = True  # the threads share instances: concurrent calls on one object
    faulthandler.dump_traceback_later(CALL_SECONDS * len(batch), exit=True)
    work = list(enumerate(batch))
    barrier = threading.Barrier(threads)

    def worker(k):
        barrier.wait()
        for i, (name, recipes) in work[k::threads]:
            one_call(i, name, recipes, lock)

    ts = [threading.Thread(target=worker, args=(k,)) for k in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    faulthandler.cancel_dump_traceback_later()


def lifetimes():
    """Objects whose owner is gone: each must still work (nanobind keeps the owner alive) or raise."""
    import gc

    pool, cp, trace = NS["pool"], NS["cp"], NS["trace"]
    w = make("pool.Workload")
    plan = pool.make_plan(w, "max")
    hp = pool.HostUnitPool(plan)
    lease = hp.acquire(0)
    slots = plan.slots
    del hp, plan, w
    gc.collect()
    assert len(lease) >= 1 and lease.nbytes(0) > 0 and slots[0].bytes > 0
    other = pool.HostUnitPool(pool.make_plan(make("pool.Workload"), "max"))
    try:
        other.offset(lease, 0)
        raise AssertionError("offset() of another pool's lease returned")
    except NS["headroom"].invalid_argument:
        pass
    rec = trace.Recorder(64, 64)
    rec.start()
    rec.record("alloc", 4096, 512, 0, "x" * 1000, ("f" * 1000, "g", 1))
    snap = rec.snapshot()
    del rec
    gc.collect()
    assert snap.trace[0]["category"] == "x" * 1000 and len(snap.to_memory_viz()) > 0
    part = cp.Partition(DLPackTemp(np.array([0, 8, 24], np.int64)), 2, 0)
    idx = part.local_index()
    del part
    gc.collect()
    assert len(idx) == 12 and int(idx.max()) < 24
    print("lifetimes: ok", flush=True)


def main():
    if "--values" in sys.argv:
        print(json.dumps(sorted(VALUES)))
        return 0
    faulthandler.enable()
    module = sys.argv[sys.argv.index("--module") + 1] if "--module" in sys.argv else "headroom._core"
    try:
        load(module)
    except ImportError as e:
        print(f"not importable: {e}", file=sys.stderr)
        return 77
    if "--list" in sys.argv:
        print(json.dumps(listing()))
        return 0
    if "LD_PRELOAD" not in os.environ or "asan" not in os.environ["LD_PRELOAD"]:
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))  # a huge allocation is a MemoryError
    if "--lifetimes" in sys.argv:
        lifetimes()
        return 0
    threads = int(sys.argv[sys.argv.index("--threads") + 1]) if "--threads" in sys.argv else 1
    run(json.load(sys.stdin), threads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
