"""The check side of a session: run a checker safely, the built-in metrics and metric checkers, task specs.

``check`` runs any checker with a time limit and turns its answer into a check result;
``metrics`` are the scorers (exact match, F1, BLEU-4, ROUGE-L, code_exec); ``grade``
applies one metric to one answer; ``builtin`` holds the checkers a metric name builds;
``taskspec`` grades task specs; ``code`` runs model-written code in a sandbox.

May import: ``ape.schemas``, ``ape.tasks.common``, ``ape.tasks.plugins``, ``ape.tasks.storage``,
``ape.tasks.stats``, ``ape.tasks.models``, ``ape.tasks.solving``.
"""
