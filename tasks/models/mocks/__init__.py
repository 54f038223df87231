"""The built-in mock models (``provider = "mock"``), features for demos, dry runs and load
tests: the chat model (``chat``), its answers from the item (``oracle``), its reasoning
(``reasoning``), its arguments checked against the data (``data``), the log-likelihood mock
(``scorer``), and the demo's mock ``ModelAdapter``s (``demo_adapters``).

May import, inside ``ape.tasks.models``: ``chat_wrapper``, ``session_item`` and
``score_types``; and what the package may import.
"""
