"""fewer_collections freezes what exists and raises the young threshold, and puts both back."""

from __future__ import annotations

import gc

from ape.tasks.common.collector import fewer_collections


def test_inside_the_block_the_young_threshold_is_raised_and_everything_is_back_after() -> None:
    before, frozen = gc.get_threshold(), gc.get_freeze_count()
    with fewer_collections(young=12_345):
        assert gc.get_threshold() == (max(12_345, before[0]), *before[1:])
        assert gc.get_freeze_count() > frozen  # what existed is out of the collections
        with fewer_collections(young=99):  # an overlapping run: the first one's settings hold
            assert gc.get_threshold()[0] == max(12_345, before[0])
        assert gc.get_freeze_count() > frozen  # still frozen: the outer block runs on
    assert gc.get_threshold() == before and gc.get_freeze_count() == frozen


def test_a_cycle_made_inside_the_block_is_still_collected() -> None:
    import weakref

    class Node:
        pass

    with fewer_collections():
        a, b = Node(), Node()
        a.other, b.other = b, a  # type: ignore[attr-defined]
        gone = weakref.ref(a)
        del a, b
        gc.collect()
        assert gone() is None
