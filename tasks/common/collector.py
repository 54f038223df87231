"""The garbage collector's pace while a run's sessions go: fewer, cheaper collections.

Why: with the interpreter's defaults (a young collection every 700 new objects) a
256-worker run on a 0.5 s model collected about 370 times in 2,560 sessions, and every
session still waiting on its model call survived each collection and was moved up, so the
older generations filled and their collections scanned everything the run had imported
(three full collections of 0.14-0.33 s, one of them holding the interpreter lock for a third
of a second while every solver thread waited): about 1.1 s of the run process's time.
Freezing what exists when the loop starts (modules, the config, the model clients: alive
for the whole run anyway) keeps it out of every collection, and a young generation of
20,000 objects lets a session's short-lived objects die before a collection sees them. The
run process's CPU for those 2,560 sessions went from 5.7 to 5.0 s (four alternating runs
each, docs/performance.md).

Cycles made during the loop are still collected, only less often; everything goes back as
it was when the last loop ends (runs of a serving process may overlap: counted).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

# the young generation's threshold while sessions run (the interpreter's default is 700)
YOUNG = 20_000

_lock = threading.Lock()
_depth = 0
_saved: tuple[int, ...] = ()


@contextmanager
def fewer_collections(young: int = YOUNG) -> Iterator[None]:
    """While the block runs: what exists is frozen and the young threshold is ``young``."""
    global _depth, _saved
    with _lock:
        if _depth == 0:
            _saved = gc.get_threshold()
            gc.freeze()
            gc.set_threshold(max(young, _saved[0]), *_saved[1:])
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                gc.set_threshold(*_saved)
                gc.unfreeze()
