"""The run's mirror in the Prefect UI: each session's stage chain as task runs, what the
server has recorded of a run, and the chains a run left out, recorded afterwards.

- ``run``: :class:`RunRecording`, the one object a flow run's mirror is owned by (the
  flows talk to it alone), and :func:`wait_for_server`, a parent flow's end wait
- ``stage_runs``: a session's stages as marks (start, end, state) and the task-run events
  made from them; the recorder the stages report to
- ``server``: what the Prefect server holds of a run, how long to wait for it, and which
  stage chains it takes while it is behind
- ``afterwards``: the chains a run left out, rebuilt from its saved results and sent
  (``ape record``)

Below the session chain (``ape.tasks.session``), which reports to it; it imports nothing
of the chain.
"""

from ape.tasks.recording.run import RunRecording, wait_for_server

__all__ = ["RunRecording", "wait_for_server"]
