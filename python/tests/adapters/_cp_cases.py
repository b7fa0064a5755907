# SPDX-License-Identifier: Apache-2.0
"""Shared cases of the CP op tests: random packed batches and the reference vectors."""
import random

import torch

# Reference example: cp = 2, raw [0,7,17] padded to [0,8,20] (docs/cp.md).
PADDED_CU = [0, 8, 20]
RANK_ROWS = {0: [0, 1, 6, 7, 8, 9, 10, 17, 18, 19], 1: [2, 3, 4, 5, 11, 12, 13, 14, 15, 16]}
GATHER_INDEX = [0, 1, 10, 11, 12, 13, 2, 3, 4, 5, 6, 14, 15, 16, 17, 18, 19, 7, 8, 9]

DTYPES = [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int64, torch.int32, torch.int8,
          torch.uint8, torch.bool, torch.complex128]


def random_raw_cu(rng: random.Random, sequences: int, max_len: int = 40):
    cu = [0]
    for _ in range(sequences):
        cu.append(cu[-1] + rng.randint(0, max_len))
    return cu


def random_padded_cu(rng: random.Random, sequences: int, cp: int, max_chunks: int = 5):
    cu = [0]
    for _ in range(sequences):
        cu.append(cu[-1] + 2 * cp * rng.randint(0 if cp > 1 else 1, max_chunks))
    return cu


def random_tensor(shape, dtype, gen: torch.Generator):
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=gen).bool()
    if dtype.is_floating_point or dtype.is_complex:
        return torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype)
    return torch.randint(-100 if dtype.is_signed else 0, 100, shape, generator=gen).to(dtype)
