"""Local GGUF models through llama-cpp-python: its OpenAI-compatible server started per run
(``llama_server``), the chat model that speaks to it (``llama_chat``), and the model loaded
in process for log-likelihood scoring (``llama_inprocess``).

May import, inside ``ape.tasks.models``: ``reasoning_chat`` and ``score_types``; and what
the package may import.
"""
