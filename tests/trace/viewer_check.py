#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Opens snapshots in PyTorch's own viewer (MemoryViz.js) in headless Chromium and checks them.

    python3 tests/trace/viewer_check.py DIR_OR_FILE... [--screenshots OUTDIR [--only NAME]]

The viewer comes from a local copy: $HEADROOM_MEMORY_VIZ_DIR, default ../shared/tools/memory_viz
beside the repository root, holding MemoryViz.js (torch/utils/viz/MemoryViz.js, the d3@5
version). Its d3 imports are served from Debian's node-d3 (/usr/share/nodejs), and pages are
loaded by `chromium` (apt-get install chromium node-d3). Nothing is fetched from the network.

For every *.pickle, the file's own bytes are fed to the viewer (as pytorch.org/memory_viz
reads a dropped file) in its three views:
  * Active Memory Timeline and Active Cached Segment Timeline: rendered without a JS error,
    polygons drawn when the trace has allocations;
  * Allocator State History: every event of the list is clicked; no JS error at any of them,
    and a block drawn as pending-free ("waiting due to record_stream", red) at event i must have
    had its free_requested at or before i and its free_completed after i (replayed here from the
    file with the viewer's own free_requested + free_completed merge).
Exit status: 0 pass, 1 failure, 77 skipped (the harness, node-d3 or chromium missing; the
reason is printed).
"""
import base64
import functools
import html
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import check_snapshot  # noqa: E402

ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
NODEJS = "/usr/share/nodejs"
VIEWS = {"timeline": "Active Memory Timeline", "segments": "Active Cached Segment Timeline",
         "state": "Allocator State History"}
SKIP = 77

HARNESS = r"""
<div id="errors"></div><div id="result"></div>
<script>
function __err(m){ document.getElementById('errors').textContent += m + '\n'; }
window.addEventListener('error', e => __err('error: ' + e.message + ' @' + (e.filename||'') + ':' + (e.lineno||'')));
window.addEventListener('unhandledrejection', e => __err('rejection: ' + (e.reason && e.reason.stack || e.reason)));
const __ce = console.error; console.error = function(...a){ __err('console.error: ' + a.join(' ')); __ce.apply(console, a); };
var __tries = 0;
function __visible_root(){
  var visible = Array.from(document.querySelectorAll('body > div')).filter(
      d => d.style.display !== 'none' && d.id !== 'errors' && d.id !== 'result');
  return visible[visible.length - 1] || document.body;
}
function __run(){
  if (document.querySelectorAll('svg').length === 0 && __tries++ < 80) { setTimeout(__run, 250); return; }
  var root = __visible_root();
  if (location.search.indexOf('shot') >= 0) {  // a picture: no result text; the state view at mid-trace
    document.getElementById('errors').style.display = 'none';
    document.getElementById('result').style.display = 'none';
    var pres = Array.from(root.querySelectorAll('pre')).filter(
        p => p.parentElement && p.parentElement.style.gridColumn.startsWith('1'));
    if (window.__state && pres.length > 0) {
      pres[Math.floor(pres.length / 2)].dispatchEvent(new MouseEvent('mousedown', {bubbles: true, view: window}));
    }
    return;
  }
  var out = {svgs: document.querySelectorAll('svg').length, polygons: root.querySelectorAll('polygon').length};
  if (window.__state) {
    var list = Array.from(root.querySelectorAll('pre')).filter(
        p => p.parentElement && p.parentElement.style.gridColumn.startsWith('1'));
    out.events = list.length; out.pending = []; out.failing = [];
    var ev = new MouseEvent('mousedown', {bubbles: true, cancelable: true, view: window});
    for (var i = 0; i < list.length; ++i) {
      var before = document.getElementById('errors').textContent.length;
      try { list[i].dispatchEvent(ev); } catch (x) { __err('click ' + i + ': ' + x); }
      if (document.getElementById('errors').textContent.length > before) out.failing.push(i);
      var red = new Set();
      root.querySelectorAll('rect').forEach(r => {
        if (r.__data__ && r.__data__.free_requested === true) red.add(String(r.__data__.addr));
      });
      out.pending.push(Array.from(red));
    }
  }
  document.getElementById('result').textContent = JSON.stringify(out);
}
setTimeout(__run, 250);
</script>
"""


def skip(reason):
    print(f"SKIPPED: viewer check not run: {reason}")
    return SKIP


def importmap():
    imports = {
        "https://cdn.skypack.dev/d3@5": "/nodejs/d3/index.js",
        "https://cdn.skypack.dev/d3-axis@1": "/nodejs/d3-axis/src/index.js",
        "https://cdn.skypack.dev/d3-scale@1": "/nodejs/d3-scale/src/index.js",
        "https://cdn.skypack.dev/d3-zoom@1": "/nodejs/d3-zoom/src/index.js",
        "https://cdn.skypack.dev/d3-brush@1": "/nodejs/d3-brush/src/index.js",
        "internmap": "/nodejs/internmap/src/index.js",
    }
    for name in os.listdir(NODEJS):
        if name.startswith("d3-") and os.path.exists(os.path.join(NODEJS, name, "src", "index.js")):
            imports[name] = f"/nodejs/{name}/src/index.js"
    return '<script type="importmap">' + json.dumps({"imports": imports}) + "</script>\n"


def page(raw, view, state):
    buf = raw + b"\x00" * (3 - len(raw) % 3)  # the viewer's decode_base64 wants whole 3-byte groups
    files = json.dumps([{"name": "snapshot.pickle", "base64": base64.b64encode(buf).decode()}])
    flag = "<script>window.__state = true;</script>\n" if state else ""
    return ("<!DOCTYPE html>\n<html><head>\n" + importmap() + flag + HARNESS + "</head><body>\n"
            '<script type="module">\nimport {add_local_files} from "/viz/MemoryViz.js";\n'
            f"add_local_files({files}, {json.dumps(view)});\n</script>\n</body></html>\n")


class Handler(http.server.SimpleHTTPRequestHandler):
    """Static files; an extensionless module path is redirected to <path>.js, a package folder to
    its index.js (Debian's d3 v5 sources import "./foo" without an extension)."""

    def do_GET(self):  # noqa: N802
        path = self.translate_path(self.path)
        if not os.path.exists(path) and os.path.exists(path + ".js"):
            self.send_response(301)
            self.send_header("Location", self.path.split("?")[0] + ".js")
            self.end_headers()
            return None
        if os.path.isdir(path) and os.path.exists(os.path.join(path, "index.js")) and not self.path.endswith("/"):
            self.send_response(301)
            self.send_header("Location", self.path + "/index.js")
            self.end_headers()
            return None
        return super().do_GET()

    def log_message(self, *args):
        pass


def chromium_binary():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def run_page(chromium, url, screenshot=None):
    common = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1600,1000",
              "--virtual-time-budget=20000"]
    if screenshot:
        subprocess.run(common + [f"--screenshot={screenshot}", url], capture_output=True, timeout=180, check=False)
        return None
    done = subprocess.run(common + ["--dump-dom", url], capture_output=True, text=True, timeout=180, check=False)
    dom = done.stdout

    def div(name):
        m = re.search(rf'<div id="{name}"[^>]*>(.*?)</div>', dom, re.S)
        return html.unescape(m.group(1)).strip() if m else None

    errors, result = div("errors"), div("result")
    return {"errors": errors, "result": json.loads(result) if result else None, "rc": done.returncode,
            "stderr": done.stderr[-500:]}


def expected_pending(trace):
    """Per event of the viewer's merged list, the blocks truly pending: free_requested seen, the
    free_completed not yet."""
    pending, out = set(), []
    for e in trace:
        if e["action"] == "free_requested":
            pending.add(e["addr"])
        elif e["action"] in ("free_completed", "free", "alloc"):
            pending.discard(e["addr"])
        out.append(set(pending))
    return out


def check_snapshot_in_viewer(chromium, base_url, www, name, raw, screenshots):
    snap = check_snapshot.pickle.loads(raw)
    trace = check_snapshot.merged_trace(snap["device_traces"][snap_device(snap)]) if snap["device_traces"] else []
    failures = []
    for key, view in VIEWS.items():
        fname = f"{name}.{key}.html"
        with open(os.path.join(www, fname), "w") as f:
            f.write(page(raw, view, key == "state"))
        url = f"{base_url}/{urllib.parse.quote(fname)}"
        if screenshots:
            run_page(chromium, url + "?shot", os.path.join(screenshots, f"{name}.{key}.png"))
            continue
        got = run_page(chromium, url)
        if got["result"] is None:
            failures.append(f"{view}: the page did not finish (chromium rc {got['rc']}): {got['errors'] or got['stderr']}")
            continue
        if got["errors"]:
            failures.append(f"{view}: JS error: {got['errors'].splitlines()[0]}")
        res = got["result"]
        allocs = any(e["action"] == "alloc" for e in trace) or any(
            b["state"] != "inactive" for s in snap["segments"] for b in s["blocks"])
        if key != "state" and allocs and res["polygons"] == 0:
            failures.append(f"{view}: nothing drawn")
        if key == "state":
            if res["events"] != len(trace):
                failures.append(f"{view}: {res['events']} events listed, the file has {len(trace)} after merging")
            if res["failing"]:
                failures.append(f"{view}: {len(res['failing'])} events fail when clicked, first {res['failing'][0]}")
            want = expected_pending(trace)
            for i, drawn in enumerate(res["pending"][:len(want)]):
                wrong = sorted(int(a) for a in drawn if int(a) not in want[i])
                if wrong:
                    failures.append(f"{view}: event {i} ({trace[i]['action']}) draws {len(wrong)} block(s) as "
                                    f"pending-free that are not, first {wrong[0]:#x}")
                    break
    return failures


def snap_device(snap):
    for d, t in enumerate(snap["device_traces"]):
        if t:
            return d
    return 0


def main(argv):
    screenshots, only, args = None, None, []
    it = iter(argv)
    for a in it:
        if a == "--screenshots":
            screenshots = next(it)
        elif a == "--only":
            only = next(it)
        else:
            args.append(a)
    viz_dir = os.environ.get("HEADROOM_MEMORY_VIZ_DIR") or os.path.join(ROOT, "..", "shared", "tools", "memory_viz")
    if not os.path.isfile(os.path.join(viz_dir, "MemoryViz.js")):
        return skip(f"no MemoryViz.js in {os.path.abspath(viz_dir)} (set HEADROOM_MEMORY_VIZ_DIR)")
    chromium = chromium_binary()
    if chromium is None:
        return skip("chromium is not installed (apt-get install chromium)")
    if not os.path.isfile(os.path.join(NODEJS, "d3", "index.js")):
        return skip(f"Debian's node-d3 is not installed ({NODEJS}/d3; apt-get install node-d3)")
    files = []
    for a in args:
        if os.path.isdir(a):
            files += sorted(os.path.join(r, n) for r, _d, ns in os.walk(a) for n in ns if n.endswith(".pickle"))
        elif os.path.isfile(a):
            files.append(a)
    if only:
        files = [f for f in files if only in f]
    if not files:
        print(f"FAIL: no .pickle files in {args}")
        return 1
    with tempfile.TemporaryDirectory(prefix="headroom_viewer_") as www:
        os.makedirs(os.path.join(www, "viz"))
        shutil.copy(os.path.join(viz_dir, "MemoryViz.js"), os.path.join(www, "viz", "MemoryViz.js"))
        os.symlink(NODEJS, os.path.join(www, "nodejs"))
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=www))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        base_url = f"http://127.0.0.1:{server.server_address[1]}"
        if screenshots:
            os.makedirs(screenshots, exist_ok=True)
        failed = 0
        try:
            common = os.path.commonpath(files) if len(files) > 1 else os.path.dirname(files[0])
            for path in files:
                name = re.sub(r"[^A-Za-z0-9_.-]", "_", os.path.relpath(path, common)).replace(".pickle", "")
                with open(path, "rb") as f:
                    raw = f.read()
                problems = check_snapshot_in_viewer(chromium, base_url, www, name, raw, screenshots)
                if screenshots:
                    print(f"shot {path} -> {screenshots}/{name}.{{timeline,segments,state}}.png")
                    continue
                if problems:
                    failed += 1
                    print(f"FAIL {path}:")
                    for p in problems:
                        print(f"       {p}")
                else:
                    print(f"ok   {path}: 3 views, every Allocator State History event clicked, no JS error, "
                          f"pending-free blocks as recorded")
        finally:
            server.shutdown()
    if not screenshots:
        print(f"{len(files) - failed} of {len(files)} snapshot(s) pass in the viewer")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
