"""The run's mirror in the Prefect UI: each session's stage chain as task runs, what the
server has recorded of a run, and the chains a run left out, recorded afterwards.

- ``stage_runs``: a session's stages as marks (start, end, state) and the task-run events
  made from them; the recorder the stages report to
- ``server``: what the Prefect server holds of a run, how long to wait for it, and which
  stage chains it takes while it is behind
- ``afterwards``: the chains a run left out, rebuilt from its saved results and sent
  (``ape record``)

Below the session chain (``ape.tasks.session``), which reports to it; it imports nothing
of the chain.
"""
