# SPDX-License-Identifier: Apache-2.0
"""Drop-ins: TransformerEngine's THD helpers against TE's documented vectors, and AReaL's packed
CP helpers against AReaL's own functions (AReaL 1.0.4's module file, loaded by path with
Megatron's parallel_state stubbed as AReaL's tests do) on random packed batches."""
import importlib.util
import os
import random
import sys
import types
from dataclasses import dataclass

import pytest
import torch

import headroom
from headroom.torch import areal as hr_areal
from headroom.torch import te

from _cp_cases import random_padded_cu, random_tensor

# ---- headroom.torch's modules use cp's public surface only --------------------------------------------------


def test_torch_modules_use_only_public_names_of_cp():
    # cp.py is the public surface, _cp_*.py its private machinery: no other module of headroom.torch
    # (te.py, areal.py, ...) imports a private name of cp or a _cp_ module, and each file stays small.
    import ast
    import pathlib

    from headroom.torch import cp

    root = pathlib.Path(cp.__file__).parent
    for path in sorted(root.glob("*.py")):
        source = path.read_text()
        if path.name == "cp.py" or path.name.startswith("_cp_"):
            assert source.count("\n") <= 450, f"{path.name}: {source.count(chr(10))} lines, expected at most 450"
            continue
        cp_names = set()  # names bound to the cp module: `from . import cp`, `import headroom.torch.cp as x`
        for node in ast.walk(ast.parse(source, str(path))):
            if isinstance(node, ast.ImportFrom):
                module = node.module or ""
                assert not module.split(".")[-1].startswith("_cp_"), f"{path.name} imports {module}"
                if module in ("cp", "headroom.torch.cp"):
                    for alias in node.names:
                        assert alias.name in cp.__all__, f"{path.name} imports {alias.name} from headroom.torch.cp"
                if module in ("", "headroom.torch"):
                    for alias in node.names:
                        assert not alias.name.startswith("_cp_"), f"{path.name} imports {alias.name}"
                        if alias.name == "cp":
                            cp_names.add(alias.asname or "cp")
            elif isinstance(node, ast.Import):
                cp_names.update(a.asname for a in node.names if a.name == "headroom.torch.cp" and a.asname)
        for node in ast.walk(ast.parse(source, str(path))):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in cp_names:
                assert not node.attr.startswith("_"), f"{path.name} uses {node.value.id}.{node.attr}"


# ---- TransformerEngine ----------------------------------------------------------------------------------


def test_te_partitioned_indices_documented_vectors():
    # TE tests/pytorch/attention/test_cp_utils.py: cu [0,8,16], cp 2.
    cu = torch.tensor([0, 8, 16], dtype=torch.int32)
    r0 = te.thd_get_partitioned_indices(cu, 16, 2, 0)
    assert r0.dtype == torch.int32 and r0.tolist() == [0, 1, 6, 7, 8, 9, 14, 15]
    assert te.thd_get_partitioned_indices(cu, 16, 2, 1).tolist() == [2, 3, 4, 5, 10, 11, 12, 13]
    # The worked example: cu [0,8,20], cp 2.
    cu = torch.tensor([0, 8, 20], dtype=torch.int32)
    assert te.thd_get_partitioned_indices(cu, 20, 2, 0).tolist() == [0, 1, 6, 7, 8, 9, 10, 17, 18, 19]
    assert te.thd_get_partitioned_indices(cu, 20, 2, 1).tolist() == [2, 3, 4, 5, 11, 12, 13, 14, 15, 16]
    # cp 4, cu [0,8,24].
    cu = torch.tensor([0, 8, 24], dtype=torch.int32)
    expect = [[0, 7, 8, 9, 22, 23], [1, 6, 10, 11, 20, 21], [2, 5, 12, 13, 18, 19], [3, 4, 14, 15, 16, 17]]
    for r in range(4):
        assert te.thd_get_partitioned_indices(cu, 24, 4, r).tolist() == expect[r]


def test_te_reorder_docstring_vector():
    # TE's thd_sequence_order_to_cp_rank_order docstring: cu [0,8,16,24,40], cp 4, x = [0..7]*3 + [0..15].
    cu = torch.tensor([0, 8, 16, 24, 40], dtype=torch.int32)
    x = torch.tensor(list(range(8)) * 3 + list(range(16)))
    expect = [0, 7, 0, 7, 0, 7, 0, 1, 14, 15, 1, 6, 1, 6, 1, 6, 2, 3, 12, 13,
              2, 5, 2, 5, 2, 5, 4, 5, 10, 11, 3, 4, 3, 4, 3, 4, 6, 7, 8, 9]
    ranked = te.thd_sequence_order_to_cp_rank_order(x, cu, 4)
    assert ranked.tolist() == expect
    assert torch.equal(te.thd_cp_rank_order_to_sequence_order(ranked, cu, 4), x)


def test_te_megatron_per_document_balancing():
    # TE TestContextParallelUtils (get_batch_on_this_cp_rank): tokens 1..16, cu [0,8,16], cp 2, rank 0.
    tokens = torch.arange(1, 17).unsqueeze(0)
    idx = te.thd_get_partitioned_indices(torch.tensor([0, 8, 16], dtype=torch.int32), 16, 2, 0)
    assert tokens.index_select(1, idx).tolist() == [[1, 2, 7, 8, 9, 10, 15, 16]]
    idx = te.thd_get_partitioned_indices(torch.tensor([0, 8], dtype=torch.int32), 8, 2, 1)
    assert tokens[:, :8].index_select(1, idx).tolist() == [[3, 4, 5, 6]]


def test_te_bad_input():
    cu = torch.tensor([0, 8, 16], dtype=torch.int32)
    with pytest.raises(headroom.invalid_argument, match=r"total_tokens = 14, expected a multiple of 2 \* world_size = 4"):
        te.thd_get_partitioned_indices(cu, 14, 2, 0)
    with pytest.raises(headroom.invalid_argument, match=r"total_tokens = 24, but cu_seqlens\[-1\] = 16"):
        te.thd_get_partitioned_indices(cu, 24, 2, 0)
    with pytest.raises(headroom.invalid_argument, match=r"sequence 0 has padded length 6"):
        te.thd_get_partitioned_indices(torch.tensor([0, 6, 16], dtype=torch.int32), 16, 2, 0)
    with pytest.raises(headroom.invalid_argument, match=r"dtype torch.float32"):
        te.thd_get_partitioned_indices(torch.tensor([0.0, 8.0]), 8, 2, 0)


def test_te_errors_speak_te():
    """What TE code sees: TE's function and argument names and TE's way to pad, no headroom C++ names."""
    cu = torch.tensor([0, 6, 16], dtype=torch.int32)
    cases = [
        (lambda: te.thd_get_partitioned_indices(cu, 16, 2, 0),
         "thd_get_partitioned_indices: sequence 0 has padded length 6 (cu_seqlens[0] = 0, cu_seqlens[1] = 6), expected "
         "a multiple of 4 for layout dual_chunk at world_size = 2; pad every sequence to a multiple of 2 * world_size "
         "first (TE's cu_seqlens_padded)"),
        (lambda: te.thd_get_partitioned_indices(torch.tensor([0, 8, 16]), 16, 2, 3),
         "thd_get_partitioned_indices: rank = 3 out of range [0, 2)"),
        (lambda: te.thd_cp_rank_order_to_sequence_order(torch.zeros(12), torch.tensor([0, 8, 16]), 2),
         "thd_cp_rank_order_to_sequence_order: tensor.shape[0] = 12, but cu_seqlens[-1] = 16; expected the padded total"),
        (lambda: te.thd_sequence_order_to_cp_rank_order(torch.zeros(16), cu, 2),
         "at cp_size = 2; pad every sequence to a multiple of 2 * cp_size first"),
    ]
    for call, text in cases:
        with pytest.raises(headroom.invalid_argument) as e:
            call()
        assert text in str(e.value) and "cp::" not in str(e.value), str(e.value)


def test_areal_errors_speak_areal(monkeypatch):
    """AReaL's names, and a missing cp_group reported as such, without Megatron installed."""
    monkeypatch.setattr(hr_areal, "_mpu", lambda: None)
    bad = torch.tensor([0, 6, 16])
    cases = [
        (lambda: hr_areal.split_packed_seqs_for_context_parallel(torch.zeros(16), bad, cp_size=2, cp_rank=0),
         "split_packed_seqs_for_context_parallel: sequence 0 has padded length 6 (cu_seqlens[0] = 0, cu_seqlens[1] = "
         "6), expected a multiple of 4 for layout dual_chunk at cp_size = 2; pad first (AReaL: pad_packed_tensor_dict "
         "with seq_align_to = tp_size * cp_size * 2)"),
        (lambda: hr_areal.split_packed_seqs_for_context_parallel(torch.zeros(15), torch.tensor([0, 8, 16]), cp_size=2,
                                                                 cp_rank=0),
         "split_packed_seqs_for_context_parallel: tensor has 15 rows (shape (15,)), expected 16"),
        (lambda: hr_areal.build_cp_reassemble_indices(bad, 2), "build_cp_reassemble_indices: sequence 0 has padded"),
        (lambda: hr_areal.cp_local_labels(torch.zeros(16), torch.tensor([0, 8, 16]), cp_size=2, cp_rank=5),
         "cp_rank = 5 out of range [0, 2)"),
        (lambda: hr_areal.reassemble_cp_packed_logprobs(torch.zeros(8), torch.tensor([0, 8, 16]), cp_size=2, cp_rank=0),
         "reassemble_cp_packed_logprobs: cp_group not given, and Megatron's parallel_state, where AReaL finds them, is "
         "not importable; pass cp_group= (the context-parallel torch.distributed process group)"),
        (lambda: hr_areal.split_packed_seqs_for_context_parallel(torch.zeros(16), bad),
         "cp_size, cp_rank not given, and Megatron's parallel_state, where AReaL finds them, is not importable; pass "
         "cp_size=, cp_rank="),
    ]
    for call, text in cases:
        with pytest.raises(headroom.invalid_argument) as e:
            call()
        assert text in str(e.value) and "cp::" not in str(e.value), str(e.value)
    # cp_size = 1 needs no group: the tensor comes back as it is.
    t = torch.zeros(8)
    assert hr_areal.reassemble_cp_packed_logprobs(t, torch.tensor([0, 8]), cp_size=1, cp_rank=0) is t


# ---- AReaL ------------------------------------------------------------------------------------------------


def _areal_source():
    """AReaL's packed_context_parallel.py: from an installed areal (pip install --no-deps areal==1.0.4;
    found without importing areal's heavy __init__), or from the wheel HEADROOM_AREAL_WHEEL names."""
    rel = "areal/engine/megatron_utils/packed_context_parallel.py"
    wheel = os.environ.get("HEADROOM_AREAL_WHEEL")
    if wheel:
        import zipfile

        with zipfile.ZipFile(wheel) as z:
            return z.read(rel).decode(), f"{wheel}:{rel}"
    try:
        spec = importlib.util.find_spec("areal")
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        return None, None
    path = os.path.join(list(spec.submodule_search_locations)[0], "engine", "megatron_utils",
                        "packed_context_parallel.py")
    if not os.path.exists(path):
        return None, None
    with open(path) as f:
        return f.read(), path


@dataclass
class _PackedSeqParams:  # Megatron's fields as AReaL passes them
    qkv_format: str = "thd"
    cu_seqlens_q: torch.Tensor = None
    max_seqlen_q: int = 0
    cu_seqlens_kv: torch.Tensor = None
    max_seqlen_kv: int = 0
    cu_seqlens_q_padded: torch.Tensor = None
    cu_seqlens_kv_padded: torch.Tensor = None


class _ParallelState(types.ModuleType):
    def __init__(self):
        super().__init__("megatron.core.parallel_state")
        self.cp_size, self.cp_rank, self.tp_size = 1, 0, 1

    def get_context_parallel_world_size(self):
        return self.cp_size

    def get_context_parallel_rank(self):
        return self.cp_rank

    def get_tensor_model_parallel_world_size(self):
        return self.tp_size


@pytest.fixture
def areal(monkeypatch):
    """(AReaL's module, the stubbed parallel_state both AReaL's and headroom's functions read)."""
    source, origin = _areal_source()
    if source is None:
        pytest.skip("AReaL is not installed (pip install --no-deps areal==1.0.4) and HEADROOM_AREAL_WHEEL is unset")
    mpu = _ParallelState()
    megatron = types.ModuleType("megatron")
    core = types.ModuleType("megatron.core")
    core.parallel_state = mpu
    megatron.core = core
    psp = types.ModuleType("megatron.core.packed_seq_params")
    psp.PackedSeqParams = _PackedSeqParams
    data = types.ModuleType("areal.utils.data")
    data.is_multi_modal_key = lambda key: key.startswith("multi_modal_input")
    for name, mod in {"megatron": megatron, "megatron.core": core, "megatron.core.parallel_state": mpu,
                      "megatron.core.packed_seq_params": psp, "areal.utils.data": data}.items():
        monkeypatch.setitem(sys.modules, name, mod)
    module = types.ModuleType("areal_packed_context_parallel")
    module.__file__ = origin
    exec(compile(source, origin, "exec"), module.__dict__)
    return module, mpu


def _batches(seed, cp_size, count=6):
    rng = random.Random(seed)
    for _ in range(count):
        yield random_padded_cu(rng, rng.randint(1, 12), cp_size, max_chunks=6)


@pytest.mark.parametrize("cp_size", [1, 2, 4, 8])
def test_areal_split_equal(areal, cp_size):
    theirs, mpu = areal
    gen = torch.Generator().manual_seed(cp_size)
    for cu in _batches(cp_size, cp_size):
        cu_t = torch.tensor(cu, dtype=torch.int32)
        mpu.cp_size = cp_size
        for dtype in (torch.float32, torch.int64, torch.bfloat16, torch.bool):
            x = random_tensor((cu[-1],), dtype, gen)
            for rank in range(cp_size):
                mpu.cp_rank = rank
                ref = theirs.split_packed_seqs_for_context_parallel(x, cu_t)
                got = hr_areal.split_packed_seqs_for_context_parallel(x, cu_t)
                assert got.dtype == ref.dtype and torch.equal(got, ref)
                # Explicit keywords give the same without Megatron.
                assert torch.equal(hr_areal.split_packed_seqs_for_context_parallel(x, cu_t, cp_size=cp_size,
                                                                                   cp_rank=rank), ref)


@pytest.mark.parametrize("cp_size", [2, 4])
def test_areal_preprocess_equal(areal, cp_size):
    theirs, mpu = areal
    mpu.cp_size = cp_size
    for cu in _batches(10 + cp_size, cp_size):
        cu_t = torch.tensor(cu, dtype=torch.int32)
        ids = torch.randint(0, 1000, (cu[-1],))
        for rank in range(cp_size):
            mpu.cp_rank = rank
            ref_ids, ref_params = theirs.preprocess_packed_seqs_context_parallel(ids, cu_t)
            got_ids, got_params = hr_areal.preprocess_packed_seqs_context_parallel(ids, cu_t)
            assert torch.equal(got_ids, ref_ids)
            assert got_params.max_seqlen_q == ref_params.max_seqlen_q
            assert torch.equal(got_params.cu_seqlens_q_padded, ref_params.cu_seqlens_q_padded)
    bad = torch.tensor([0, 6], dtype=torch.int32)
    with pytest.raises(ValueError):
        theirs.preprocess_packed_seqs_context_parallel(torch.zeros(6, dtype=torch.int64), bad)
    with pytest.raises(headroom.invalid_argument, match=r"sequence lengths \[6\] are not multiples of"):
        hr_areal.preprocess_packed_seqs_context_parallel(torch.zeros(6, dtype=torch.int64), bad)


@pytest.mark.parametrize("cp_size", [2, 4, 8])
def test_areal_labels_equal(areal, cp_size):
    # megatron_engine (#1223): labels = split(roll(padded input_ids, -1)).
    theirs, mpu = areal
    mpu.cp_size = cp_size
    for cu in _batches(20 + cp_size, cp_size):
        cu_t = torch.tensor(cu, dtype=torch.int32)
        ids = torch.randint(0, 1000, (cu[-1],))
        for rank in range(cp_size):
            mpu.cp_rank = rank
            ref = theirs.split_packed_seqs_for_context_parallel(torch.roll(ids, shifts=-1, dims=-1), cu_t)
            assert torch.equal(hr_areal.cp_local_labels(ids, cu_t), ref)


@pytest.mark.parametrize("cp_size", [2, 4, 8])
def test_areal_reassemble_indices_equal(areal, cp_size):
    theirs, _ = areal
    for cu in _batches(30 + cp_size, cp_size):
        cu_t = torch.tensor(cu, dtype=torch.int64)
        ref = theirs._build_cp_reassemble_indices(cu_t, cp_size)
        got = hr_areal.build_cp_reassemble_indices(cu_t, cp_size)
        assert got.dtype == ref.dtype and torch.equal(got, ref)
        # Split on every rank, concatenate, reassemble: the original.
        x = torch.randn(cu[-1])
        flat = torch.cat([hr_areal.split_packed_seqs_for_context_parallel(x, cu_t, cp_size=cp_size, cp_rank=r)
                          for r in range(cp_size)])
        assert torch.equal(flat[got], x)
