"""Files on disk: the config file, input data, the fsynced results and metadata, transcripts,
run folders and the history.

Everything APE reads or writes in an output folder goes through these modules, so a
format is defined in one place (each module's docstring documents its files).

May import: ``ape.schemas``, ``ape.tasks.common``, ``ape.tasks.plugins``.
"""
