"""The run's mirror in the Prefect UI: each session's stage chain as task runs, what the
server has recorded of a run, and the chains a run left out, recorded afterwards.

- ``run``: :class:`RunRecording`, the one object a flow run's mirror is owned by (the
  flows talk to it alone), and :func:`finish_recording`, a parent flow's end (a short wait, then the
  background catch-up)
- ``stage_runs``: a session's stages as marks (start, end, state) and the task-run events
  made from them; the recorder the stages report to
- ``server``: what the Prefect server holds of a run, how long to wait for it, and which
  stage chains it takes while it is behind
- ``afterwards``: the sessions and chains a run left out, rebuilt from its saved results
  and sent (``ape record``)
- ``catch_up``: the detached ``ape record`` a run starts at its end when the server is
  behind, so the run never waits for its monitor

Below the session chain (``ape.tasks.session``), which reports to it; it imports nothing
of the chain.
"""

from ape.tasks.recording.run import RunRecording, finish_recording, wait_for_server

__all__ = ["RunRecording", "finish_recording", "wait_for_server"]
