"""The report: sessions table, leaderboard tables, JSON envelope, markdown, chart, provenance, trend.

``build`` turns saved results into every report file; the other modules each produce one
part of it.

May import every other sub-package of ``ape.tasks`` (it is the top of the plain-function
layers); only ``recording`` and ``session`` sit above it.
"""
