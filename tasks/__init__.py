"""The plain functions of every job, grouped by job, and the Prefect task wrappers on top.

Sub-packages, from the bottom layer up (each may import the ones listed before it, and
``ape.schemas``; ``tests/unit/test_layers.py`` checks it):

- ``common``: time limits for plugin calls, the safe arithmetic evaluator, moved paths
- ``plugins``: the registry of built-in short names and loading user code by dotted path
- ``storage``: data files, saved results, transcripts, run folders, the history
- ``stats``: aggregation, intervals, calibration, power, regression, cost
- ``models``: chat models from config, retries and rate limits, mocks, fingerprints
- ``solving``: render, solve (the dialogue and its tools), adapt, log-likelihood choices
- ``checking``: run a checker, metrics, built-in checkers, task specs, ``code`` (sandbox)
- ``report``: the sessions table, leaderboard tables, envelope, markdown, chart, provenance

``stages`` (the Prefect tasks of a session's stages and the worker they run on),
``chain`` (the stages as one session's chain calls them, per task granularity),
``stage_runs`` (the stage chain recorded as task runs, and the recorder the stages report
to) and ``recording`` (what the Prefect server has recorded of a run, and how long to wait
for it) sit on top and may import all of them. Dotted paths of earlier releases
(``ape.tasks.score``) still import, with a warning (:mod:`ape.tasks.common.moved`).
"""

from ape.tasks.common.moved import install as _install_moved_paths

_install_moved_paths()
