"""Statistics over saved sessions: aggregation, intervals, calibration, power, regression, cost.

Pure functions over pandas frames; each method cites its source in its module docstring.

May import: ``ape.schemas``, ``ape.tasks.common``, ``ape.tasks.plugins``, ``ape.tasks.storage``.
"""
