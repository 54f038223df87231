"""What follows a new run (``OUTPUT/runs/<run id>``) once its report is written.

- :mod:`.join_history`: the run joins ``OUTPUT/history``; each model is compared with its own
  history, the previous run and the pinned baseline; what moved is explained.
- :mod:`.rescore`: when the checker changed between two runs, the earlier run's saved
  answers are graded again with the later checker, so a comparison measures the model.
- :mod:`.alerts`: regressions and improvements go out as Prefect events, an artifact and
  the ``[hooks] on_regression`` callable.

- :mod:`.tasks`: the benchmark flow's ``report`` and ``join-history`` tasks, which call them.
"""
