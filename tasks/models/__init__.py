"""Chat models: building them from ``[model]`` sections, the wrapper every model runs in, fingerprints.

The package is a core and four wings. The core: ``build`` (a ``[model]`` section made a
chat model), ``managed`` (retries and rate limits around each request), ``chat_wrapper``
(the one wrapper a chat model that delegates or binds tools its own way derives from),
``adapter_chat``, ``requests``, ``fingerprint``, ``reasoning_chat``, ``reasoning_effort``,
``sdk_types``, ``shared_clients``, ``session_item``, and the log-likelihood scorers
(``scoring``, ``score_types``, ``completions``). The wings, from the bottom up:

- ``local``: local GGUF models served or loaded by llama-cpp-python;
- ``limits``: what limits a model's requests (retries, rate limits, the Prefect server's
  limits, the meter of requests going now, the endpoints' reachability);
- ``mocks``: the built-in mock models and the demo's mock ``ModelAdapter``s;
- ``batch``: a model asked through its provider's batch API.

A wing may import the wings listed above it and the core modules it names in its own
docstring; the core's top (``build``, ``managed``, ``scoring``, ``fingerprint``,
``completions``) may import every wing.

May import: ``ape.schemas``, ``ape.tasks.common``, ``ape.tasks.plugins``, ``ape.tasks.storage``,
``ape.tasks.stats``.
"""
