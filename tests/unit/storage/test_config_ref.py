"""A config too large for a flow-run parameter goes to the flows by reference
(ape.tasks.storage.config_ref): stored owner-only under APE_HOME, named by its SHA-256,
checked on read; a reference names a hash, never a path."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest
from pydantic import ValidationError

from ape.schemas.config import ApeConfig
from ape.schemas.errors import ApeError
from ape.tasks.setup.model import run_label
from ape.tasks.storage import config_ref
from ape.tasks.storage.config_file import load_config
from ape.tasks.storage.config_ref import ConfigRef, as_parameter, resolve_config
from tests.helpers.runner import make_benchmark


@pytest.fixture
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ApeConfig:
    monkeypatch.setenv("APE_HOME", str(tmp_path / "home"))
    return load_config(make_benchmark(tmp_path / "bench", 3))


def test_a_small_config_is_the_parameter_itself(config: ApeConfig) -> None:
    assert as_parameter(config) is config
    assert not config_ref.config_folder().exists()


def test_a_large_config_is_stored_owner_only_and_read_back_by_its_hash(config: ApeConfig) -> None:
    ref = as_parameter(config, limit=100)
    assert isinstance(ref, ConfigRef)
    stored = config_ref.config_folder() / f"{ref.config_sha256}.json"
    assert stat.S_IMODE(stored.parent.stat().st_mode) == 0o700 and stat.S_IMODE(stored.stat().st_mode) == 0o600
    assert resolve_config(ref) == config
    assert resolve_config(ref.model_dump()) == config  # as a flow run's parameters hold it
    assert run_label(ref) == "t · m"
    assert as_parameter(config, limit=100) == ref and len(list(stored.parent.iterdir())) == 1


def test_a_changed_stored_config_is_one_line_naming_the_hash(config: ApeConfig) -> None:
    ref = as_parameter(config, limit=100)
    assert isinstance(ref, ConfigRef)
    stored = config_ref.config_folder() / f"{ref.config_sha256}.json"
    stored.write_text(stored.read_text().replace('"name":"t"', '"name":"u"'))
    with pytest.raises(ApeError, match="does not match its hash") as caught:
        resolve_config(ref)
    assert "\n" not in str(caught.value) and "flow-run parameter config" in str(caught.value)
    stored.unlink()
    with pytest.raises(ApeError, match="cannot be read"):
        resolve_config(ref)


@pytest.mark.parametrize(
    "value",
    [
        {"config_sha256": "../../etc/passwd"},
        {"config_sha256": "/etc/passwd"},
        {"config_sha256": "A" * 64},
        {"config_sha256": "a" * 64, "path": "/etc/passwd"},
    ],
)
def test_a_reference_names_a_hash_never_a_path(value: dict[str, str]) -> None:
    with pytest.raises(ValidationError):
        ConfigRef.model_validate(value)
    with pytest.raises(ValidationError):
        resolve_config(value)
