"""The code sandboxes this machine offers, as pytest parameters that skip the missing ones."""

from __future__ import annotations

import pytest

from ape.tasks.checking.code import sandbox as sandboxes


def available(kind: str) -> bool:
    try:
        sandboxes.prefix(kind)  # type: ignore[arg-type]
        return True
    except sandboxes.SandboxUnavailable:
        return False


KINDS = [
    pytest.param(kind, marks=pytest.mark.skipif(not available(kind), reason=f"no {kind} here"))
    for kind in ("bwrap", "unshare")
]
