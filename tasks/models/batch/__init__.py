"""A model asked through its provider's batch API: the chat model (``chat``), the batcher
that gathers requests and keeps the ledger (``batcher``), the two providers' clients
(``clients``), which answers are the batcher's own (``trust``), and the board of what waits
(``status``), which hands its table to whoever displays it (the flow's live view).

May import, inside ``ape.tasks.models``: the ``limits`` wing (which errors are transient),
``chat_wrapper`` and ``session_item``; and what the package may import. It writes nothing to
Prefect: the display that registers with the board does.
"""
