#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# headroom: needs 2 GPUs
# headroom: stress lanes (tools/gpu-stress --lanes: each stress run below meets its peer on a free port of its own)
# headroom: stress as interval: --child interval --steps 4 --port {port} --result {dir}/r.json --snapshots {dir}
# headroom: stress as nccl_register: --child nccl_register --steps 4 --port {port} --result {dir}/r.json --snapshots {dir}
"""bench/megatron_fsdp_pool.py at data-parallel size 2 (one process per GPU, NCCL): the weights
are sharded, so Megatron-FSDP's parameter pools are exercised as well as its gradient pools.
Besides the one-GPU checks (losses bit-equal across MaxPool, max, by_bytes and interval; every
arena as planned; the interval saving; step time against MaxPool's) it checks real sharding,
the plan fingerprint compared across the 2 ranks before every arena, and the arena as one
segment of a pool on NCCL's allocator registered with the process group once. Outputs
$OUT/megatron_fsdp_pool_dp2.json (+ .png). Skips (exit 0, a message) without 2 GPUs or
megatron_fsdp, as megatron_fsdp_pool.py does; tools/gpu-check runs it through
tools/gpus-at-least 2.

  python3 bench/megatron_fsdp_pool_dp2.py [more megatron_fsdp_pool.py options, e.g. --steps 40]
"""
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().with_name("megatron_fsdp_pool.py")

if __name__ == "__main__":
    # later options win with argparse: the caller's --steps or --port replace these
    cmd = [sys.executable, str(BENCH), "--world-size", "2", "--steps", "24", "--port", "29711", *sys.argv[1:]]
    print("running: " + " ".join(cmd), flush=True)
    sys.exit(subprocess.run(cmd).returncode)
