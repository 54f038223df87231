"""The Prefect flows, and what they need to run.

Flows: ``benchmark`` (every model, then the report: what ``ape run`` runs), ``evaluate``
(one model over the data, a subflow of it), ``served`` (the flow a deployment runs: the
owner's config file plus a few checked parameters) and ``demo`` (the eval demo).

Around them: ``preflight`` (the checks before any model call), ``item`` (one item's
session chain on a solver worker), ``feeders`` (threads or Dask workers), ``resume``,
``progress``, ``logs`` and ``states``; ``live`` (a running model's live parts as one object:
its progress bar, live view and control). The work itself is in :mod:`ape.tasks`.
"""
