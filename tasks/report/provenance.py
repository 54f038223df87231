"""Provenance: what a reader needs to trust (and redo) a run's numbers.

Recorded in every run's metadata file (``metadata.json``, key ``provenance``) when a run
starts, and gathered into ``report.json`` (``provenance``: the report builder's environment plus
each run's record, by model). Nothing here is secret: API keys and secret-looking
model arguments never enter a model fingerprint (:func:`ape.tasks.models.fingerprint.model_fingerprint`).

Fields: ``ape_version``; ``python``; ``platform``; ``packages`` (versions of the
libraries that shape results); ``config_file``, ``config_sha256`` (the file's bytes),
``config_resolved_sha256`` (the validated config after command-line overrides);
``data_file``, ``data_sha256`` and ``hf_dataset`` (a Hugging Face dataset's id,
configuration, split, revision, commit, fingerprint and rows' hash; null for a data file:
:func:`ape.tasks.storage.data.data_provenance`); ``git_commit`` and ``git_dirty`` of the config's
folder when it is inside a git work tree (else null); ``seeds`` (the report's bootstrap
seed and every model's ``seed`` argument); ``models`` (model id -> its fingerprint, the
fingerprint's hash, and ``requests``: what each request asks for, log-probabilities,
sampling, token limit, stop sequences and batch mode, from
:func:`ape.tasks.models.requests.request_settings`, the decision the client is built
from); ``sandbox`` (how ``code_exec`` runs candidate code);
``agent_sandbox`` (an agent benchmark's ``[sandbox]``: its isolation and every limit, spelled
out, since they are part of the benchmark's definition; null without one);
``session_limits`` (``[solver]`` ``max_steps`` and ``max_session_tokens``, the limits that end
a session's tool loop).
"""

from __future__ import annotations

import hashlib
import json
import platform
import subprocess
import sys
from collections.abc import Iterable
from functools import lru_cache
from importlib import metadata
from pathlib import Path
from typing import Any

from ape.schemas.config import ApeConfig
from ape.tasks.checking.code.sandbox import SandboxUnavailable, resolve
from ape.tasks.models.fingerprint import model_fingerprint
from ape.tasks.models.requests import request_settings
from ape.tasks.stats.intervals import BOOTSTRAP_SEED
from ape.tasks.storage.data import data_provenance, file_sha256
from ape.tasks.storage.run_files import RunFiles

PACKAGES = (
    "ape-bench",
    "prefect",
    "pydantic",
    "langchain-core",
    "langchain-openai",
    "numpy",
    "scipy",
    "pandas",
    "pyarrow",
    "sacrebleu",
    "rouge-score",
    "prefect-dask",
)


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str]:
    """Installed versions of ``names``; packages that are not installed are left out."""
    found = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


@lru_cache(maxsize=32)
def git_state(folder: str) -> tuple[str | None, bool | None]:
    """(commit, dirty) of the git work tree holding ``folder``; (None, None) outside one."""

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", "-C", folder, *args], capture_output=True, text=True, timeout=10, check=False)
        except (OSError, subprocess.SubprocessError):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if not commit:
        return None, None
    status = git("status", "--porcelain", "--untracked-files=no")
    return commit, (bool(status) if status is not None else None)


def environment() -> dict[str, Any]:
    """The software that computed a result: APE, Python, the platform and key packages."""
    versions = package_versions()
    return {
        "ape_version": versions.get("ape-bench"),
        "python": platform.python_version(),
        "platform": f"{sys.platform}-{platform.machine()}",
        "packages": versions,
    }


def run_provenance(config: ApeConfig) -> dict[str, Any]:
    """Everything about a run of ``config`` that its numbers depend on (see the module doc)."""

    commit, dirty = git_state(str(Path(config.base_dir).resolve()))
    resolved = json.dumps(config.model_dump(mode="json"), sort_keys=True, default=str)
    models = {}
    for model in config.model:
        fingerprint = model_fingerprint(model)
        text = json.dumps(fingerprint, sort_keys=True, default=str)
        models[model.model_id] = {
            "fingerprint": fingerprint,
            "sha256": hashlib.sha256(text.encode()).hexdigest(),
            "requests": request_settings(model).model_dump(mode="json"),
        }
    return {
        **environment(),
        "config_file": str(config.config_file) if config.config_file else None,
        "config_sha256": file_sha256(config.config_file) if config.config_file else None,
        "config_resolved_sha256": hashlib.sha256(resolved.encode()).hexdigest(),
        **data_provenance(config.data),
        "git_commit": commit,
        "git_dirty": dirty,
        "seeds": {
            "bootstrap": BOOTSTRAP_SEED,
            "models": {m.model_id: m.args.get("seed") for m in config.model if "seed" in m.args},
        },
        "models": models,
        "sandbox": sandbox_of(config),
        "agent_sandbox": agent_sandbox_of(config),
        "session_limits": session_limits_of(config),
    }


# what an agent's score depends on: the isolation and the limits (the seeding is the data's
# part, covered by the config's and the data's hashes; root and keep change no result)
AGENT_SANDBOX_KEYS = (
    "isolation",
    "command_timeout_s",
    "session_timeout_s",
    "cpu_seconds",
    "memory_bytes",
    "processes",
    "file_bytes",
    "disk_bytes",
    "output_bytes",
    "allow_hosts",
)


def agent_sandbox_of(config: ApeConfig) -> dict[str, Any] | None:
    """The ``[sandbox]`` section's isolation and limits, by key, plus the network the commands
    have (none under bwrap, or only the ``allow_hosts`` through the proxy); None for a run
    without a sandbox."""
    if config.sandbox is None:
        return None
    values = config.sandbox.model_dump(mode="json")
    network = "none" if config.sandbox.isolation == "bwrap" else "host (isolation none)"
    if config.sandbox.allow_hosts:
        network = "allow_hosts (filtering proxy)"
    return {**{key: values[key] for key in AGENT_SANDBOX_KEYS}, "network": network}


def session_limits_of(config: ApeConfig) -> dict[str, Any]:
    """The limits that end a session's tool loop (``[solver]``): model calls and tokens. An agent's
    score depends on them as on the sandbox's, so they are recorded by name (null: no limit)."""
    return {"max_steps": config.solver.max_steps, "max_session_tokens": config.solver.max_session_tokens}


def sandbox_of(config: ApeConfig) -> str | None:
    """The sandbox kind model-written code runs in (bwrap, unshare, none), or None when the
    checker runs no code."""
    if config.checker.implementation not in {"code_exec", "taskspec"}:
        return None

    try:
        return resolve(config.checker.args.get("sandbox", "auto"))
    except SandboxUnavailable as exc:
        return f"unavailable: {exc}"


def recorded_provenance(runs: Iterable[RunFiles]) -> dict[str, Any]:
    """Model id -> the ``provenance`` each of ``runs`` (from
    :func:`ape.tasks.storage.run_files.find_runs`) recorded in the metadata beside its results."""
    found: dict[str, Any] = {}
    for run in runs:
        if isinstance(run.metadata.get("provenance"), dict):
            found[run.model_id] = run.metadata["provenance"]
    return found
