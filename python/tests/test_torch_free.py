# SPDX-License-Identifier: Apache-2.0
import subprocess
import sys


def test_every_core_module_works_without_torch():
    # torch blocked: the five modules import and compute, and nothing pulls torch in.
    code = (
        "import sys; sys.modules['torch'] = None\n"
        "from headroom import pool, pipeline, cp, stats, trace\n"
        "p = pool.plan(pool.model_workload('Nemotron-H-4B'), 'max')\n"
        "s = pipeline.schedule('zb_h1', 2, 4); pipeline.from_pytorch(pipeline.to_pytorch(s))\n"
        "cp.index_plan([0, 5, 9], 2, 1)\n"
        "stats.max_of([{'a': 1}, {'a': 2}])\n"
        "trace.snapshot_of([('alloc', 16, 4)]).to_memory_viz()\n"
        "assert [m for m in sys.modules if m.startswith('torch') and sys.modules[m] is not None] == []\n"
        "print('ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
