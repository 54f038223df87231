"""One session's chain: render -> solve -> adapt -> check -> score.

- ``stages``: the Prefect tasks of the stages, the worker they run on, and the cache
  records the task engine reads
- ``chain``: the stages as one session's chain calls them, per task granularity
- ``cache``: the model stages' result cache, read and written without the task engine
- ``report``: where the stages report (one context manager per stage), bound to the
  solver thread by the flow; the chain imports nothing of the run's mirror in the Prefect
  UI (``ape.tasks.recording``), whose recorder the flow binds there
"""
