"""An agent session's sandbox, its tools and its grade.

``sandbox`` keeps one working folder per session (seeded from the item or its ``archive``,
under a disk ``quota``) and runs each command in its own namespaces, built on
:mod:`ape.tasks.checking.code.sandbox`; ``network`` lets it reach only the hosts
``[sandbox] allow_hosts`` names; ``limits`` says what ended a command; ``tools`` are the
built-in ``bash``, ``python`` and ``files`` tools; ``grade`` is the ``sandbox_state`` checker.

It sits in the checking layer: it may import ``ape.schemas`` and the ``ape.tasks``
sub-packages up to ``checking`` (``tests/unit/test_layers.py``), nothing above.
"""
