"""The catalogue: `ape benchmarks` lists every required benchmark and says truly whether its
data is cached here; `ape init` writes a config that validates on data in the benchmark's
Hugging Face shape (given as local files), refuses to overwrite and names close names."""

from __future__ import annotations

import json

import pytest

from ape.catalogue import catalogue, config_text
from ape.cli import main

REQUIRED = {
    "gsm8k",
    "mmlu",
    "arc_challenge",
    "arc_easy",
    "hellaswag",
    "winogrande",
    "truthfulqa_mc1",
    "humaneval",
    "mbpp",
    "math500",
}

# two rows of each benchmark, in the shape its Hugging Face dataset serves
ARC = [
    {
        "id": "Q1",
        "question": "Which is a metal?",
        "choices": {"text": ["wood", "iron", "glass"], "label": ["A", "B", "C"]},
        "answerKey": "B",
    },
    {
        "id": "Q2",
        "question": "Water freezes at?",
        "choices": {"text": ["0 C", "50 C"], "label": ["1", "2"]},
        "answerKey": "1",
    },
]
SHAPES: dict[str, list[dict]] = {
    "gsm8k": [{"question": "2 + 2?", "answer": "#### 4"}, {"question": "1,000 + 1?", "answer": "#### 1,001"}],
    "mmlu": [
        {"question": "2 + 2?", "subject": "math", "choices": ["1", "2", "3", "4"], "answer": 3},
        {"question": "Red?", "subject": "art", "choices": ["a colour", "a dog", "a tree", "a car"], "answer": 0},
    ],
    "arc_challenge": ARC,
    "arc_easy": ARC,
    "hellaswag": [
        {
            "ind": 4,
            "activity_label": "Cooking",
            "ctx_a": "A man cracks an egg.",
            "ctx_b": "he",
            "endings": ["fries it.", "eats the pan.", "sings.", "flies away."],
            "label": "0",
        },
        {
            "ind": 9,
            "activity_label": "Cars",
            "ctx_a": "She starts the car.",
            "ctx_b": "she",
            "endings": ["drives."] * 4,
            "label": "2",
        },
    ],
    "winogrande": [
        {
            "sentence": "The cup fell off the table because _ was tilted.",
            "option1": "the cup",
            "option2": "the table",
            "answer": "2",
        },
        {"sentence": "Tom paid Bob because _ owed him.", "option1": "Tom", "option2": "Bob", "answer": "1"},
    ],
    "truthfulqa_mc1": [
        {"question": "Do we use 10% of our brain?", "mc1_targets": {"choices": ["No", "Yes"], "labels": [1, 0]}},
        {"question": "Is the earth flat?", "mc1_targets": {"choices": ["Yes", "No", "Maybe"], "labels": [0, 1, 0]}},
    ],
    "humaneval": [
        {
            "task_id": "HumanEval/0",
            "prompt": 'def add(a, b):\n    """Sum."""\n',
            "canonical_solution": "    return a + b\n",
            "test": "def check(f):\n    assert f(1, 2) == 3\n",
            "entry_point": "add",
        },
        {
            "task_id": "HumanEval/1",
            "prompt": "def neg(a):\n",
            "canonical_solution": "    return -a\n",
            "test": "def check(f):\n    assert f(1) == -1\n",
            "entry_point": "neg",
        },
    ],
    "mbpp": [
        {
            "task_id": 11,
            "text": "Add two numbers.",
            "code": "def add(a, b):\n    return a + b",
            "test_list": ["assert add(1, 2) == 3"],
            "test_setup_code": "",
        },
        {
            "task_id": 12,
            "text": "Negate.",
            "code": "def neg(a):\n    return -a",
            "test_list": ["assert neg(1) == -1"],
            "test_setup_code": "",
        },
    ],
    "math500": [
        {
            "problem": "1/2 + 0?",
            "solution": "...",
            "answer": "\\frac{1}{2}",
            "subject": "Algebra",
            "level": 1,
            "unique_id": "a/1.json",
        },
        {
            "problem": "2 + 2?",
            "solution": "...",
            "answer": "4",
            "subject": "Prealgebra",
            "level": 1,
            "unique_id": "b/2.json",
        },
    ],
}


def test_the_catalogue_holds_every_required_benchmark_described():
    entries = {e.name: e for e in catalogue()}
    assert set(entries) >= REQUIRED
    for entry in entries.values():
        assert entry.measures and entry.scoring and entry.format and entry.hf_path
        assert config_text(entry.name).count("\nmodel = {") == 1  # the one line to edit


def test_ape_benchmarks_tells_what_is_cached(tmp_path, monkeypatch, capsys):
    pytest.importorskip("datasets", reason="the hf extra (datasets) is not installed")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    for name in ("HF_DATASETS_CACHE", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"):
        monkeypatch.delenv(name, raising=False)
    prepared = tmp_path / "hf" / "datasets" / "openai___gsm8k" / "main" / "0.0.0" / ("c" * 40)
    prepared.mkdir(parents=True)
    (prepared / "gsm8k-test.arrow").write_bytes(b"")
    assert main(["benchmarks"]) == 0
    blocks = {b.split(":", 1)[0]: b for b in capsys.readouterr().out.split("\n") if b and not b.startswith(" ")}
    assert REQUIRED <= set(blocks)
    out = main(["benchmarks"]) or capsys.readouterr().out
    data_lines = [line for line in out.splitlines() if line.strip().startswith("data ")]
    cached = [line for line in data_lines if "in the local Hugging Face cache" in line]
    assert len(cached) == 1 and "openai/gsm8k" in cached[0]
    assert sum("not here" in line for line in data_lines) == len(data_lines) - 1


def test_all_adds_lm_eval_tasks_or_says_how_to_install(capsys):
    assert main(["benchmarks", "--all"]) == 0
    out = capsys.readouterr().out
    try:
        import lm_eval  # noqa: F401
    except ImportError:
        assert "pip install lm-eval" in out
    else:
        assert "lm-evaluation-harness tasks (" in out and "gsm8k" in out.split("lm-evaluation-harness tasks")[1]


def test_init_refuses_to_overwrite_and_names_close_names(tmp_path, capsys):
    assert main(["init", "gsm8k", str(tmp_path)]) == 0
    written = tmp_path / "gsm8k.toml"
    before = written.read_text()
    written.write_text(before + "# mine\n")
    assert main(["init", "gsm8k", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "already exists; nothing was written" in err and "\n" not in err
    assert written.read_text().endswith("# mine\n")
    assert main(["init", "gms8k", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "error: no benchmark 'gms8k' in the catalogue; did you mean: gsm8k (`ape benchmarks` lists them)"
    assert main(["init", "arc", str(tmp_path)]) == 2
    assert "arc_challenge" in capsys.readouterr().err


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_every_config_validates_on_local_files_in_its_shape(name, tmp_path, monkeypatch, capsys):
    datasets = pytest.importorskip("datasets", reason="the hf extra (datasets) is not installed")
    if name == "math500":
        pytest.importorskip("math_verify", reason="the math extra (math-verify) is not installed")
    from ape.tasks.storage import hf_data

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    hf_data._load.cache_clear()
    assert main(["init", name, str(tmp_path)]) == 0
    config = tmp_path / f"{name}.toml"
    rows = tmp_path / f"{name}.jsonl"
    rows.write_text("".join(json.dumps(r) + "\n" for r in SHAPES[name]))
    text = config.read_text().replace('hf_split = "', f'hf_data_files = "{rows.name}"\nhf_split = "', 1)
    model_line = next(line for line in text.splitlines() if line.startswith("model = {"))
    mock = 'model = { name = "m", provider = "mock", model = "echo" }'  # validate calls no model
    config.write_text(text.replace(model_line, mock))
    capsys.readouterr()
    assert main(["validate", str(config)]) == 0, capsys.readouterr().err
    assert "data: 2 items" in capsys.readouterr().out


def test_without_datasets_no_data_reads_as_available(monkeypatch, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "datasets" else real(name, *a))
    assert main(["benchmarks"]) == 0
    text = " ".join(capsys.readouterr().out.split())  # the blocks' lines unwrapped
    assert text.count("not readable here: pip install 'ape-bench[hf]'") == len(catalogue())
    assert "in the local Hugging Face cache" not in text


def test_the_harness_tasks_of_the_catalogue_are_named_and_shown(capsys):
    entries = {e.name: e for e in catalogue()}
    for name in ("mmlu", "arc_challenge", "arc_easy", "hellaswag", "truthfulqa_mc1"):
        assert entries[name].lm_eval == name and entries[name].logprobs
        assert f'#   lm_eval = "{name}"' in config_text(name)  # the config's commented alternative
    assert entries["winogrande"].lm_eval is None  # several contexts per document: the harness's task is refused
    assert main(["benchmarks"]) == 0
    out = capsys.readouterr().out
    block = out.split("\narc_easy: ")[1].split("\narc_easy")[0]
    assert 'runs as [task] lm_eval = "arc_easy"' in block and "log-likelihood" in block
