"""Mock ModelAdapters for the eval demo, and the bridge from adapter objects to config.

The mocks answer task specs (:class:`ape.schemas.taskspec.TaskSpec`) without a
model: they read the task they are given (``generate(prompt, task)``) and
answer right or wrong on purpose, in the shape the task's post-processing
expects, so the metric layer and calibration see realistic answers:

- :class:`RuleBasedAdapter`: right on every task (``error_rate`` makes it err),
  with high confidence.
- :class:`NoisyAdapter`: wrong on most tasks, yet always highly confident.
- :class:`BiasedAdapter`: right on one category, wrong on every other.
- :class:`RandomAdapter`: random words with a random confidence.

Each answer depends only on the adapter's settings and the task id (never on
call order or thread), so parallel and sequential runs give identical results.
They are pydantic models: their fields are the ``args`` of a ``[[model]]
class = "ape.tasks.models.mocks.demo_adapters:RuleBasedAdapter"`` section, and
:func:`model_entry` turns any adapter object back into such a section.
"""

from __future__ import annotations

import hashlib
import math
import random
import threading
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ape.schemas.errors import ApeError
from ape.schemas.models import ModelAdapter
from ape.schemas.results import Generation
from ape.tasks.plugins.loader import load_object

# Words that appear in no sensible reference: random answers score (near) nothing.
_RANDOM_WORDS = tuple(
    "blue river quickly window music cloud paper orange silent garden ladder violin pebble marble thunder velvet "
    "lantern puzzle".split()
)
# Fluent but wrong answers for text tasks.
_DISTRACTORS = (
    "I believe it is something else entirely.",
    "Nobody can know that for certain.",
    "Perhaps a different option would fit better.",
    "That depends on several unstated factors.",
)
# Code that runs but solves nothing: every test of a code task fails.
_WRONG_CODE = "def solution(*args, **kwargs):\n    return None\n"


# ---------------------------------------------------------------- answers in a task's shape


def _field(task: Any, name: str, default: Any = None) -> Any:
    if isinstance(task, dict):
        return task.get(name, default)
    return getattr(task, name, default)


def first_reference(task: Any) -> str:
    """The task's (first) reference answer; a clear error for tasks that have none."""
    reference = _field(task, "reference")
    if isinstance(reference, (list, tuple)):
        reference = reference[0] if reference else None
    if reference is None:
        raise ValueError(
            f"the mock adapters answer task specs with a 'reference' field; got "
            f"{type(task).__name__} (use ape.schemas.taskspec:TaskSpec as the data schema)"
        )
    return str(reference)


def shaped(task: Any, answer: str) -> str:
    """``answer`` dressed the way a model would write it, so the task's post-processing
    has something to do and still recovers ``answer`` exactly."""
    rule = _field(task, "postprocess", "strip")
    if rule == "extract_code":
        return f"Here is the code:\n\n```python\n{answer}\n```\n"
    if rule == "last_number":
        return f"Working step by step, the result is {answer}"
    if rule == "first_line":
        return f"{answer}\nThat is my answer."
    if rule == "lower":
        return f" {answer.upper()} " if answer.islower() else answer
    if rule == "strip":
        return f"  {answer}\n"
    return answer


def correct_answer(task: Any) -> str:
    """An answer that earns the task's full marks after post-processing."""
    return shaped(task, first_reference(task))


def wrong_answer(task: Any, rng: random.Random) -> str:
    """A plausible answer that does not earn the task's marks."""
    reference = first_reference(task)
    if _field(task, "metric") == "code_exec":
        return shaped(task, _WRONG_CODE)
    try:
        number = float(reference.replace(",", ""))
    except ValueError:
        number = None
    if number is not None:
        off = number + rng.choice((-3, -2, -1, 1, 2, 3))
        return shaped(task, str(int(off)) if off.is_integer() else str(off))
    choices = [d for d in _DISTRACTORS if d.strip().lower() != reference.strip().lower()]
    return shaped(task, rng.choice(choices))


def generation(text: str, confidence: float) -> Generation:
    """A Generation whose token statistics agree with its confidence.

    ``token_nll`` is set so that the geometric-mean token probability equals the
    confidence, as it would for a real model scored by its log-probabilities.
    """
    confidence = round(min(1.0, max(0.0, confidence)), 4)
    tokens = max(1, len(text.split()))
    nll = -math.log(max(confidence, 1e-9)) * tokens
    return Generation(text=text, confidence=confidence, token_nll=round(nll, 6), token_count=tokens)


# ---------------------------------------------------------------- the adapters


class MockAdapter(BaseModel):
    """Base of the mock adapters: seeded, deterministic per task, immutable."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model_id: str
    seed: int = Field(default=0, description="Changes which tasks go wrong and the confidences.")

    def rng(self, prompt: str, task: Any) -> random.Random:
        """A generator for this (adapter, task) pair alone: independent of call order."""
        key = _field(task, "id")
        if key is None:
            key = hashlib.sha256(prompt.encode()).hexdigest()
        return random.Random(f"{type(self).__name__}:{self.model_id}:{self.seed}:{key}")

    def generate(self, prompt: str, task: Any) -> Generation:
        return self.answer(self.rng(prompt, task), task)

    def answer(self, rng: random.Random, task: Any) -> Generation:  # pragma: no cover
        raise NotImplementedError


class RuleBasedAdapter(MockAdapter):
    """Near-perfect: answers with the reference, confidently; ``error_rate`` makes it err."""

    model_id: str = "rule-based"
    error_rate: float = Field(default=0.0, ge=0.0, le=1.0)

    def answer(self, rng: random.Random, task: Any) -> Generation:
        if rng.random() < self.error_rate:
            return generation(wrong_answer(task, rng), rng.uniform(0.3, 0.6))
        return generation(correct_answer(task), rng.uniform(0.85, 0.99))


class NoisyAdapter(MockAdapter):
    """Overconfident: wrong on ``error_rate`` of the tasks, always at least ``min_confidence`` sure."""

    model_id: str = "noisy"
    error_rate: float = Field(default=0.6, ge=0.0, le=1.0)
    min_confidence: float = Field(default=0.85, ge=0.0, le=1.0)

    def answer(self, rng: random.Random, task: Any) -> Generation:
        wrong = rng.random() < self.error_rate
        text = wrong_answer(task, rng) if wrong else correct_answer(task)
        return generation(text, rng.uniform(self.min_confidence, 1.0))


class BiasedAdapter(MockAdapter):
    """Good at ``strong_category``, wrong on every other category (and confident throughout)."""

    model_id: str = "biased"
    strong_category: str = "language"

    def answer(self, rng: random.Random, task: Any) -> Generation:
        if _field(task, "category") == self.strong_category:
            return generation(correct_answer(task), rng.uniform(0.8, 0.95))
        return generation(wrong_answer(task, rng), rng.uniform(0.7, 0.9))


class RandomAdapter(MockAdapter):
    """A floor to beat: a few random words and a uniformly random confidence."""

    model_id: str = "random"
    min_words: int = Field(default=3, ge=1)
    max_words: int = Field(default=10, ge=1)

    def answer(self, rng: random.Random, task: Any) -> Generation:
        count = rng.randint(self.min_words, max(self.min_words, self.max_words))
        text = " ".join(rng.choice(_RANDOM_WORDS) for _ in range(count))
        return generation(text, rng.random())


# ---------------------------------------------------------------- adapters as config entries

_REGISTRY: dict[str, ModelAdapter] = {}
_REGISTRY_LOCK = threading.Lock()
REGISTRY_PATH = "ape.tasks.models.mocks.demo_adapters:registered_adapter"


def register_adapter(adapter: ModelAdapter) -> str:
    """Keep ``adapter`` under a key that :func:`registered_adapter` resolves, in this process."""
    key = f"{adapter.model_id}@{id(adapter):x}"
    with _REGISTRY_LOCK:
        _REGISTRY[key] = adapter
    return key


def unregister_adapter(key: str) -> None:
    with _REGISTRY_LOCK:
        _REGISTRY.pop(key, None)


def registered_adapter(key: str) -> ModelAdapter:
    """The adapter object registered under ``key`` (the target of ``class = REGISTRY_PATH``)."""
    with _REGISTRY_LOCK:
        adapter = _REGISTRY.get(key)
    if adapter is None:
        raise ApeError(
            f"no adapter is registered under '{key}' in this process",
            where="[model] args.key",
            hint="registered adapters only live in the process that ran run_eval; use a "
            "class path with args for runs in other processes",
        )
    return adapter


def importable_path(obj: Any) -> str | None:
    """``module:QualName`` of an object's class when importing that path gives the class back."""
    cls = type(obj)
    path = f"{cls.__module__}:{cls.__qualname__}"
    if cls.__module__ == "__main__" or "<locals>" in cls.__qualname__:
        return None
    try:
        return path if load_object(path) is cls else None
    except ApeError:
        return None


def model_entry(adapter: Any) -> tuple[dict[str, Any], str | None]:
    """A ``[[model]]`` section (as a dict) for an adapter object, and its registry key if any.

    A pydantic adapter whose class imports by path becomes ``class`` + ``args`` (its
    fields), so the config is self-contained and each solver worker builds its own
    copy. Any other object is registered in this process and named by key; the
    caller unregisters it when the run is over.
    """
    if not isinstance(adapter, ModelAdapter):
        raise ApeError(
            f"{type(adapter).__name__} is not a ModelAdapter (it needs a 'model_id' and a "
            "generate(prompt, task) method)",
            where="adapters",
        )
    entry: dict[str, Any] = {"name": adapter.model_id, "max_retries": 0}
    if isinstance(adapter, BaseModel):
        path = importable_path(adapter)
        if path is not None:
            return {**entry, "class": path, "args": adapter.model_dump(mode="json")}, None
    key = register_adapter(adapter)
    return {**entry, "class": REGISTRY_PATH, "args": {"key": key}}, key


def demo_adapters() -> list[MockAdapter]:
    """The demo's line-up: a near-perfect, a noisy and a biased adapter plus the random floor."""
    return [
        RuleBasedAdapter(seed=1),
        NoisyAdapter(seed=2),
        BiasedAdapter(seed=3, strong_category="language"),
        RandomAdapter(seed=4),
    ]
