"""Chat models: building them from ``[model]`` sections, retries and rate limits, fingerprints.

Also the built-in mock models (demos, dry runs, load tests), the eval demo's mock
``ModelAdapter``s, the bridge that runs a ``ModelAdapter`` as a LangChain chat model, and
local GGUF models served by llama-cpp-python.

May import: ``ape.schemas``, ``ape.tasks.common``, ``ape.tasks.plugins``, ``ape.tasks.storage``,
``ape.tasks.stats``.
"""
