"""The plain functions of every job, grouped by job, and the Prefect task wrappers on top.

Sub-packages, from the bottom layer up (each may import the ones listed before it, and
``ape.schemas``; ``tests/unit/test_layers.py`` checks it, and that no modules import each
other in a circle):

- ``common``: time limits for plugin calls, the safe arithmetic evaluator
- ``plugins``: the registry of built-in short names and loading user code by dotted path
- ``storage``: data files, saved results, transcripts, run folders, the history
- ``stats``: aggregation, intervals, calibration, power, regression, cost
- ``models``: chat models from config, retries and rate limits, mocks, fingerprints
- ``solving``: render, solve (the dialogue and its tools), adapt, log-likelihood choices
- ``checking``: run a checker, metrics, built-in checkers, task specs, ``code`` (sandbox)
- ``agent``: an agent session's sandbox (a working folder per session, built on ``code``'s
  namespaces, seeded from the item or its archive, under a disk quota), what killed a
  command (its limits), the ``bash``, ``python`` and ``files`` tools, the ``sandbox_state``
  grade (a test command or a user check function)
- ``report``: the sessions table, leaderboard tables, envelope, markdown, chart, provenance

Above them, the session and its mirror in the Prefect UI:

- ``recording``: each session's stage chain as task runs, what the Prefect server has
  recorded of a run and how long to wait for it, and the chains a run left out, recorded
  afterwards (``ape record``)
- ``session``: a session's chain (``stages``, ``chain``) and its cache; it reports to
  ``recording``

On top, and free to import all of them:

- ``setup``: what one model's run is made of (data model, template, checker, provider,
  fingerprints), the canary's grading, preflight's hand-over, the judge-agreement task
- ``after_run``: what follows a new run: the report and history tasks, comparisons,
  re-scoring, alerts
"""
