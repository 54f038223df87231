"""One table of APE's built-in names, so configs say ``factory = "calculator"``,
``schema = "taskspec"`` or ``class = "rule-based"`` instead of internal module paths.

Entries are lazy: a name maps to the dotted path of its implementation, and nothing is
imported until a config asks for it, so reading this table costs nothing and the
``schemas`` layer does not depend on ``tasks``. A name that is not found gets a
did-you-mean over the names of its kind.

Kinds and the config keys that use them:

========== ================================================
schema     ``[data] schema``
adapter    ``[adapter] implementation``
checker    ``[checker] implementation`` (built-in metrics and checker classes)
provider   ``[[model]] provider``
model      ``[[model]] class`` (mock models and ModelAdapters)
tool       ``[tools.X] factory``
postprocess the ``postprocess`` rule of a task spec
========== ================================================
"""

from __future__ import annotations

from typing import Literal

from ape.schemas.errors import ApeError, did_you_mean
from ape.schemas.taskspec import METRIC_NAMES

Kind = Literal["schema", "adapter", "checker", "provider", "model", "tool", "postprocess"]

_ADAPT = "ape.tasks.solving.adapt"
_MODELS = "ape.tasks.models.mocks.demo_adapters"

BUILTINS: dict[str, dict[str, str]] = {
    "schema": {"taskspec": "ape.schemas.taskspec:TaskSpec", "mmlu": "ape.schemas.choices:MMLUItem"},
    "adapter": {
        "raw": f"{_ADAPT}:RawAdapter",
        "strip": f"{_ADAPT}:StripAdapter",
        "regex": f"{_ADAPT}:RegexAdapter",
        "last_number": f"{_ADAPT}:LastNumberAdapter",
        "json": f"{_ADAPT}:JsonAdapter",
    },
    "checker": {
        **{name: f"ape.tasks.checking.metrics:{name}" for name in (*METRIC_NAMES, "accuracy")},
        "taskspec": "ape.tasks.checking.taskspec:TaskSpecChecker",
        "judge": "ape.tasks.checking.judge:JudgeChecker",
        "choice": "ape.tasks.checking.choice:ChoiceChecker",
        "sandbox_state": "ape.tasks.agent.grade:SandboxStateChecker",
    },
    "provider": {
        "mock": "ape.tasks.models.mocks.chat:MockChatModel",
        "openai": "langchain_openai:ChatOpenAI",
        "llama-cpp": "ape.tasks.models.local.llama_server:LlamaServer",
        "anthropic": "langchain_anthropic:ChatAnthropic",
        "azure_openai": "langchain_openai:AzureChatOpenAI",
        "bedrock_converse": "langchain_aws:ChatBedrockConverse",
        "cohere": "langchain_cohere:ChatCohere",
        "deepseek": "langchain_deepseek:ChatDeepSeek",
        "fireworks": "langchain_fireworks:ChatFireworks",
        "google_genai": "langchain_google_genai:ChatGoogleGenerativeAI",
        "google_vertexai": "langchain_google_vertexai:ChatVertexAI",
        "groq": "langchain_groq:ChatGroq",
        "mistralai": "langchain_mistralai:ChatMistralAI",
        "nvidia": "langchain_nvidia_ai_endpoints:ChatNVIDIA",
        "ollama": "langchain_ollama:ChatOllama",
        "perplexity": "langchain_perplexity:ChatPerplexity",
        "together": "langchain_together:ChatTogether",
        "xai": "langchain_xai:ChatXAI",
    },
    "model": {
        "mock": "ape.tasks.models.mocks.chat:MockChatModel",
        "rule-based": f"{_MODELS}:RuleBasedAdapter",
        "noisy": f"{_MODELS}:NoisyAdapter",
        "biased": f"{_MODELS}:BiasedAdapter",
        "random": f"{_MODELS}:RandomAdapter",
    },
    "tool": {
        "calculator": "ape.tasks.solving.tools:calculator",
        "bash": "ape.tasks.agent.tools:bash",
        "python": "ape.tasks.agent.tools:python",
        "files": "ape.tasks.agent.tools:files",
    },
    "postprocess": {
        "none": "ape.tasks.checking.taskspec:unchanged",
        "strip": "ape.tasks.checking.taskspec:stripped",
        "first_line": "ape.tasks.checking.taskspec:first_line",
        "lower": "ape.tasks.checking.taskspec:lowered",
        "extract_code": "ape.tasks.checking.taskspec:extract_code",
        "last_number": "ape.tasks.checking.taskspec:last_number",
    },
}

# pip package of a provider whose integration is not one of APE's dependencies
PROVIDER_PACKAGES: dict[str, str] = {
    name: path.partition(":")[0].replace("_", "-")
    for name, path in BUILTINS["provider"].items()
    if not path.startswith("ape.")
}

# where a kind is configured, for error messages
KEYS: dict[str, str] = {
    "schema": "[data] schema",
    "adapter": "[adapter] implementation",
    "checker": "[checker] implementation",
    "provider": "[model] provider",
    "model": "[model] class",
    "tool": "[tools] factory",
    "postprocess": "postprocess",
}


def is_short_name(text: str) -> bool:
    """A built-in name has neither '.' nor ':' (dotted paths always have one)."""
    return "." not in text and ":" not in text


def names(kind: Kind) -> list[str]:
    return list(BUILTINS[kind])


def resolve(kind: Kind, name: str, *, where: str | None = None) -> str:
    """The dotted path of built-in ``name`` of ``kind``, or an ApeError with did-you-mean."""
    table = BUILTINS[kind]
    key = name.strip()
    if key in table:
        return table[key]
    folded = key.lower().replace("_", "-")
    for candidate, path in table.items():
        if candidate.replace("_", "-") == folded:
            return path
    raise ApeError(
        f"'{name}' is not a built-in {kind}; built-ins are {', '.join(table)}, "
        "or give a dotted path 'module:attribute'",
        where=where or KEYS[kind],
        hint=did_you_mean(key, list(table)),
    )
