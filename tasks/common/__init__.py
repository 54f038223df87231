"""Small helpers every job uses: time limits for plugin calls and the safe arithmetic evaluator.

May import: ``ape.schemas``. Nothing else in ``ape.tasks`` (it is the bottom layer).
"""
