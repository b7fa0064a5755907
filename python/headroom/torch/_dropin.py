# SPDX-License-Identifier: Apache-2.0
"""What the drop-ins (``te.py``, ``areal.py``) share: headroom's errors retold in the peer's terms.

A drop-in is called by code written for TransformerEngine or AReaL, so its errors name the
peer's function, its arguments and its way to pad, not headroom's C++ (``cp::partition``,
``cp::padding``). The C++ message stays underneath as the exception's ``__cause__``.
"""
from __future__ import annotations

import contextlib
import re
from typing import Dict

from headroom import invalid_argument

# The producers whose names lead a message: the C++ partition and the torch ops.
_PREFIX = re.compile(r"^(cp::partition|headroom\.torch\.cp\.[\w.]+): ")


@contextlib.contextmanager
def peer_terms(what: str, pad_hint: str, names: Dict[str, str] = None):
    """Re-raises ``headroom.invalid_argument`` from the body as ``what: <message>`` with headroom's
    padding advice replaced by ``pad_hint`` and each ``names`` key (an argument name as headroom
    spells it, followed by `` = `` or `` has ``) by the peer's."""
    try:
        yield
    except invalid_argument as e:
        if str(e).startswith(f"{what}: "):
            raise  # told in the peer's terms already (an inner call)
        msg = _PREFIX.sub("", str(e))
        msg = msg.replace("pad with cp::padding first", pad_hint)
        for ours, theirs in (names or {}).items():
            msg = re.sub(rf"\b{re.escape(ours)}(?= = | has )", theirs, msg)
        raise invalid_argument(f"{what}: {msg}") from e
