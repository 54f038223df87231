"""A literal secret in the config is refused in one line pointing at ``api_key_env``: a config
travels to the Prefect server and into the outputs, a key from the environment does not."""

from __future__ import annotations

from pathlib import Path

import pytest

from ape.cli import main as ape_main
from ape.schemas.config import literal_secrets
from tests.helpers.paths import REPO_ROOT

KEY = "sk-live-0123456789abcdefghijklmnop"


def test_secret_keys_and_values_are_found_and_settings_are_not() -> None:
    args = {
        "api_key": "x1",
        "default_headers": {"Authorization": "Bearer abcdefghijk", "X-Trace": "on"},
        "model_kwargs": {"extra": [KEY]},
        "max_tokens": 10,
        "token_budget": 100,
        "openai_api_key": "y",
        "password": None,
    }
    assert sorted(literal_secrets(args)) == [
        "args.api_key",
        "args.default_headers.Authorization",
        "args.model_kwargs.extra[0]",
        "args.openai_api_key",
    ]
    assert literal_secrets({"temperature": 0.2, "behaviour": "arithmetic", "tokenizer": "gpt2"}) == []


def _config(tmp_path: Path, model_line: str) -> Path:
    example = REPO_ROOT / "examples" / "arithmetic"
    for name in ("data.jsonl", "arithmetic.py"):
        (tmp_path / name).write_bytes((example / name).read_bytes())
    config = tmp_path / "config.toml"
    config.write_text(
        f"""name = "secrets"
[data]
file = "data.jsonl"
schema = "arithmetic:Problem"
[prompt]
template = "Solve: {{{{ question }}}}"
[model]
name = "hosted"
{model_line}
[checker]
implementation = "exact_match"
args = {{ field = "answer" }}
""",
        encoding="utf-8",
    )
    return config


@pytest.mark.parametrize(
    "model_line",
    [
        f'provider = "openai"\nmodel = "gpt-4o-mini"\nargs = {{ api_key = "{KEY}" }}',
        f'provider = "openai"\nmodel = "m"\nargs = {{ default_headers = {{ Authorization = "Bearer {KEY}" }} }}',
        f'provider = "openai"\nmodel = "m"\nbase_url = "https://user:{KEY}@llm.example/v1"',
    ],
    ids=["api_key", "header", "url"],
)
def test_literal_secret_is_refused_before_anything_runs(
    tmp_path: Path, model_line: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("APE_HOME", str(tmp_path / "home"))
    config = _config(tmp_path, model_line)
    for command in (["validate", str(config)], ["run", str(config), "--no-server", "--no-progress"]):
        assert ape_main(command) == 2
        err = capsys.readouterr().err
        assert "literal secret" in err or "holds credentials" in err
        assert "api_key_env" in err and "config.toml" in err
        assert KEY not in err  # the error names the key, never shows it
    assert not (tmp_path / "output").exists()
    assert not (tmp_path / "home").exists()


def test_a_key_from_the_environment_is_accepted(tmp_path: Path) -> None:
    from ape.config import load_config

    config = _config(tmp_path, 'provider = "openai"\nmodel = "m"\napi_key_env = "OPENAI_API_KEY"')
    assert load_config(config).model[0].api_key_env == "OPENAI_API_KEY"
