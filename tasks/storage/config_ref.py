"""A config handed to a flow by reference, where it is too large to be a flow-run parameter.

Prefect refuses a flow run whose parameters serialize to more than the server's
``server.api.max_parameter_size`` (512 kB by default) with a 422, before the flow starts; a
config with long ``scripted`` answers or many inline files passes that. So a config whose
JSON is over :data:`PARAMETER_BYTES` is stored in ``APE_HOME/configs/<sha256>.json`` (the
folder owner-only, the file ``0600``, written whole and renamed) and the flow's ``config``
parameter holds only a :class:`ConfigRef`: the file's SHA-256. A smaller config stays the
parameter itself, so the UI still shows every setting of an ordinary run.

The reference is a hash, never a path: whoever creates a flow run (a retry from the UI, the
API) can name only a file APE stored under its own folder, and the flow reads it only when
its content still hashes to the name (:func:`resolve_config`); a mismatch or a missing file is one
line. The stored files are the validated config as Prefect would have received it (the same
JSON), content-addressed, so rerunning one config stores nothing new; they are kept, so a
retry days later still finds its config.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from ape.schemas.config import ApeConfig
from ape.schemas.errors import ApeError, first_problem
from ape.tasks.common.home import ape_home

# Configs whose JSON is larger go by reference: half the server's default limit, leaving room
# for the other parameters and for a server configured a little below the default.
PARAMETER_BYTES = 256 * 1024
FOLDER = "configs"  # under APE_HOME
WHERE = "flow-run parameter config"


class ConfigRef(BaseModel):
    """A flow's ``config`` parameter when the config is stored under APE_HOME: its hash only."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    config_sha256: str = Field(
        pattern=r"^[0-9a-f]{64}$", description="SHA-256 of the config stored in APE_HOME/configs/<hash>.json."
    )


ConfigParameter = ApeConfig | ConfigRef
_PARAMETER: TypeAdapter[ConfigParameter] = TypeAdapter(ConfigParameter)


def config_folder() -> Path:
    """Where configs handed by reference are stored."""
    return ape_home() / FOLDER


def as_parameter(config: ApeConfig, limit: int = PARAMETER_BYTES) -> ConfigParameter:
    """``config`` itself, or, when its JSON is over ``limit`` bytes, a reference to it stored now."""
    data = config.model_dump_json(by_alias=True).encode("utf-8")
    if len(data) <= limit:
        return config
    return ConfigRef(config_sha256=store(data))


def store(data: bytes) -> str:
    """Store a config's JSON under its SHA-256 (owner-only, written whole); the hash."""
    digest = hashlib.sha256(data).hexdigest()
    folder = config_folder()
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(folder, 0o700)
    target = folder / f"{digest}.json"
    if target.is_file() and _digest(target) == digest:
        return digest
    fd, temporary = tempfile.mkstemp(prefix=f".{digest[:12]}.", dir=folder)  # created 0600
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, target)
    except OSError as exc:
        Path(temporary).unlink(missing_ok=True)
        raise ApeError(
            f"cannot store the config to hand to the flow by reference in {folder}: {exc.strerror}",
            where="APE_HOME",
            hint="make APE_HOME writable, or shorten the config below 256 kB",
        ) from None
    return digest


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def resolve_config(value: Any) -> ApeConfig:
    """The config a flow's ``config`` parameter stands for: the config itself, or the stored
    one a :class:`ConfigRef` (or its dict) names, after checking its hash; ApeError otherwise."""
    if isinstance(value, ApeConfig):
        return value
    if not isinstance(value, ConfigRef):
        value = _PARAMETER.validate_python(value)
        if isinstance(value, ApeConfig):
            return value
    path = config_folder() / f"{value.config_sha256}.json"
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ApeError(
            f"the config this flow run refers to (sha256 {value.config_sha256[:12]}...) cannot be read "
            f"from {path}: {exc.strerror}",
            where=WHERE,
            hint="start the run again with 'ape run config.toml', in the same APE_HOME",
        ) from None
    found = hashlib.sha256(data).hexdigest()
    if found != value.config_sha256:
        raise ApeError(
            f"the config stored at {path} does not match its hash (sha256 {found[:12]}..., the flow run "
            f"names {value.config_sha256[:12]}...): it was changed after the run started",
            where=WHERE,
            hint="start the run again with 'ape run config.toml'",
        )
    try:
        return ApeConfig.model_validate_json(data)
    except ValidationError as exc:
        raise ApeError(
            f"the config stored at {path} is not a valid config: {first_problem(exc)}", where=WHERE
        ) from None
