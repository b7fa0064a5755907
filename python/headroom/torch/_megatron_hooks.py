# SPDX-License-Identifier: Apache-2.0
"""headroom.torch.megatron_fsdp's hooks into Megatron-FSDP and torch, outside any allocator:
``install`` / ``uninstall`` / ``installed`` patch the two allocator names of Megatron-FSDP's
``param_and_grad_buffer`` and check the buffers it builds afterwards, and a torch optimizer
post-step hook warns when ``end_step()`` is missing. Warnings go to the adapter's logger, once each."""
from __future__ import annotations

import logging
import sys
from typing import Any, Dict, List, Optional

import headroom
from headroom import pool as hp

logger = logging.getLogger(__package__ + ".megatron_fsdp")

_warned: set = set()


def warn_once(key: str, msg: str, *args) -> None:
    if key not in _warned:
        _warned.add(key)
        logger.warning(msg, *args)


# ---------------------------------------------------------------------------------------------
# a missing end_step()

_steps = {"optimizer": 0, "leases": 0, "hook": None}


def _after_optimizer_step(*_unused) -> None:
    """torch's global optimizer post-step hook. It counts the optimizer steps after which a
    learning allocator had served new leases; three without end_step() (fully_shard_optimizer
    runs one step at construction, after the buffers' initial leases) mean end_step() is missing."""
    from .megatron_fsdp import allocators

    learning = [a for a in allocators() if a.plan is None and a._leases]
    leases = sum(a._leases for a in learning)
    if leases != _steps["leases"]:
        _steps["leases"] = leases
        _steps["optimizer"] += 1
    if _steps["optimizer"] >= 3 and learning:
        warn_once(
            "end_step", "[headroom] %d optimizer steps ran without headroom.torch.megatron_fsdp.end_step(): %s still "
            "learn from the caching allocator and their traces grow every step; call end_step() on every rank after "
            "optimizer.step()", _steps["optimizer"],
            ", ".join(f"{a.name} ({a.planner}, {a._leases} leases)" for a in learning))


def watch_optimizer_steps() -> None:
    if _steps["hook"] is None:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        _steps["hook"] = register_optimizer_step_post_hook(_after_optimizer_step)


def step_ended() -> None:
    _steps["optimizer"] = 0


# ---------------------------------------------------------------------------------------------
# installation

_saved: Dict[str, Any] = {}


def _target_modules(module) -> List[Any]:
    if module is not None:
        return [module]
    found = [m for n, m in list(sys.modules.items()) if n.endswith("megatron_fsdp.param_and_grad_buffer") and m]
    if not found:
        try:
            import megatron_fsdp.param_and_grad_buffer as pgb
        except ImportError as e:
            raise headroom.invalid_argument(
                "headroom.torch.megatron_fsdp.install: megatron_fsdp is not importable (pip install "
                "megatron-fsdp); pass module= to patch another copy of param_and_grad_buffer") from e
        found = [pgb]
    return found


def _checking_init(init):
    """ParamAndGradBuffer.__init__, then a warning when it did not build headroom's allocators."""
    from .megatron_fsdp import PoolAllocator

    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        if not isinstance(getattr(self, "weight_alloc", None), PoolAllocator):
            cfg = getattr(self, "ddp_config", None)
            why = ("fsdp_double_buffer=False" if not getattr(cfg, "fsdp_double_buffer", False)
                   else "no fsdp_unit_modules")
            warn_once("no_double_buffer", "[headroom] headroom.torch.megatron_fsdp is installed (planner %s) but "
                      "Megatron-FSDP built its buffers with %s: it uses %s, not headroom's PoolAllocator; pass "
                      "fsdp_double_buffer=True (and fsdp_unit_modules) to fully_shard_model", installed(), why,
                      type(getattr(self, "weight_alloc", None)).__name__)

    __init__.__wrapped__ = init
    return __init__


def install(planner: str = "max", *, module=None, alignment: int = hp.default_alignment, group=None,
            max_events: Optional[int] = None) -> type:
    """Makes Megatron-FSDP build :class:`PoolAllocator` (with ``planner``) wherever it would build
    ``MaxPoolAllocator`` or ``FixedPoolAllocator``: both names in every loaded
    ``megatron_fsdp.param_and_grad_buffer`` (or ``module``), for buffers built afterwards
    (``fully_shard_model`` / ``MegatronFSDP(...)`` with ``fsdp_double_buffer=True``; without it
    Megatron builds no double buffer and a warning says so). Returns the installed class."""
    from .megatron_fsdp import PLANNERS, PoolAllocator

    if planner not in PLANNERS:
        raise headroom.invalid_argument(
            f"headroom.torch.megatron_fsdp.install: planner {planner!r}; expected one of {', '.join(PLANNERS)}")
    cls = type(f"PoolAllocator_{planner}", (PoolAllocator,),
               {"planner": planner, "alignment": alignment, "group": group, "max_events": max_events})
    for m in _target_modules(module):
        if m.__name__ not in _saved:
            buf = getattr(m, "ParamAndGradBuffer", None)
            _saved[m.__name__] = (m, m.MaxPoolAllocator, m.FixedPoolAllocator, buf, buf and buf.__dict__["__init__"])
            if buf is not None:
                buf.__init__ = _checking_init(buf.__dict__["__init__"])
        m.MaxPoolAllocator = cls
        m.FixedPoolAllocator = cls
    _warned.discard("no_double_buffer")
    watch_optimizer_steps()
    return cls


def uninstall() -> None:
    """Puts Megatron's own classes back, for buffers built afterwards: buffers built while
    installed keep their PoolAllocators (and their arenas) until they are destroyed."""
    from .megatron_fsdp import allocators

    kept = [a.name for a in allocators()]
    for name, (m, max_pool, fixed_pool, buf, init) in list(_saved.items()):
        m.MaxPoolAllocator, m.FixedPoolAllocator = max_pool, fixed_pool
        if buf is not None:
            buf.__init__ = init
        del _saved[name]
    if kept:
        logger.warning("[headroom] uninstall(): Megatron's allocators are back for buffers built from now on; "
                       "%d PoolAllocators of buffers already built stay in use (%s)", len(kept), ", ".join(kept))


def installed() -> Optional[str]:
    """The planner installed, or None."""
    from .megatron_fsdp import PoolAllocator

    for m, *_ in _saved.values():
        cls = m.MaxPoolAllocator
        if isinstance(cls, type) and issubclass(cls, PoolAllocator):
            return cls.planner
    return None
