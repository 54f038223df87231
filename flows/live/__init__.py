"""A running model's live parts, as one object the evaluate flow's runner hands to its loop.

``run`` (:class:`~ape.flows.live.run.LiveRun`: the progress bar, the live view and the
control, and what the run notes of them in metadata.json), ``view`` (live.json and the flow
run's artifacts, every few seconds), ``control`` (pause, resume and drain of the loop),
``batch_column`` (the progress bar's waiting provider batch). The channels that carry a
control request live in :mod:`ape.tasks.storage.control_channel`, so that ``ape ctl``
reaches them without importing a flow.

It may import what ``ape.flows`` may (``ape.tasks``, ``ape.schemas``) and ``ape.flows.progress``
and ``ape.flows.logs``; nothing below ``ape.flows`` imports it.
"""
