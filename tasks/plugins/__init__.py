"""User code named in the config: the registry of built-in short names and loading by dotted path.

``registry`` maps short names (``exact_match``, ``last_number``, ``mock``) to dotted paths
with "did you mean" errors; ``loader`` imports ``module:attribute`` paths, plugin files
beside a config under a private module name, never by editing ``sys.path``.

May import: ``ape.schemas``. Nothing else in ``ape.tasks`` (it is the bottom layer).
"""
