"""The solve side of a session: render the prompt, run the solver's dialogue and tools, adapt the answer.

May import: ``ape.schemas``, ``ape.tasks.common``, ``ape.tasks.plugins``, ``ape.tasks.storage``,
``ape.tasks.stats``, ``ape.tasks.models``.
"""
