"""APE's log-likelihood scoring against lm-evaluation-harness's, on the same items, model and server.

    python -m venv --system-site-packages /tmp/lmeval && /tmp/lmeval/bin/pip install 'lm-eval[api]'
    /tmp/lmeval/bin/python benchmarks/loglikelihood_crosscheck.py [--limit 40] [--skip-stock] [--repeat 3]

Needs the ``llm`` extra (llama-cpp-python's server, SmolLM2-135M) and ``lm-eval`` (0.4.13
here; no torch needed for its API models). The items are the 40 of
``examples/multiple_choice`` (ARC-style: "Question: ...\\nAnswer:", each choice's text
scored after a space), as an lm-evaluation-harness ``multiple_choice`` task built from the
same file (``doc_to_text``, ``doc_to_choice``, ``doc_to_target``, ``target_delimiter``,
metrics ``acc`` and ``acc_norm``).

lm-evaluation-harness talks to llama-cpp-python's OpenAI-compatible server through its
``gguf`` model (``/v1/completions`` with ``echo``, the continuation split by
``text_offset``); its ``local-completions`` model needs a Hugging Face tokenizer to split
the prompt, which cannot be fetched offline. APE scores the same items twice: with
``provider = "openai"`` against the same server (its ``/v1/completions`` scorer), and
with ``provider = "llama-cpp"``, which computes in its own process. Per item and choice
the log-likelihoods must agree within 1e-4, and acc and acc_norm item by item.

The server is started with ``--kv_overrides tokenizer.ggml.add_bos_token=bool:true``
(and APE's in-process scorer with ``args.add_bos = true``, the same inputs): llama-cpp-python
reports prompt log-probabilities one position late for a model that adds no BOS token,
as SmolLM2 does (its issue #1983), and with a BOS token they are right, so the two
harnesses are compared on correct numbers. ``--skip-stock`` leaves out the second part:
the stock server (SmolLM2 as shipped, no BOS), which lm-evaluation-harness scores without
a word while APE's log-probability canary refuses it, and APE's in-process scores of
SmolLM2 as shipped against that server's.

One thing is adjusted on lm-evaluation-harness's side, and reported: its ``gguf`` model sums
``token_logprobs[idx:-1]``, dropping the answer's last token as the generated one, but
llama-cpp-python generates nothing when the model's most likely next token ends the text
(EOS, ``finish_reason`` "stop"), so lm-eval then drops the continuation's own last token (a
one-token continuation such as " Ireland" scores 0). The script appends an empty generated
token to such answers before lm-eval reads them, and also reports lm-eval's values as
shipped (its own ``get_result`` on the untouched answers) with how many answers ended so.

Times: each harness's wall time over the same requests on the same server (lm-eval's
``simple_evaluate`` call; APE's benchmark flow's ``wall_seconds`` from report.json, the
process and a local Prefect server's start-up excluded and reported apart), and items/s.
``--repeat R`` times both R times on the same server, alternating which goes first, and
says in how many rounds APE was no slower.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "multiple_choice"
TOLERANCE = 1e-4
TEMPLATE = "Question: {{ question }}\\nAnswer:"
LM_EVAL_TASK = """task: ape_mc_crosscheck
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: multiple_choice
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: answer
target_delimiter: " "
metric_list:
  - metric: acc
  - metric: acc_norm
"""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(model: Path, log: Path, *, add_bos: bool, threads: int) -> tuple[subprocess.Popen[bytes], str]:
    """llama-cpp-python's server for ``model`` on a free loopback port; (process, base URL)."""
    port = _free_port()
    argv = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(model),
        "--model_alias",
        "local",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--n_ctx",
        "2048",
        "--logits_all",
        "true",
        "--n_threads",
        str(threads),
        "--n_threads_batch",
        str(threads),
    ]
    if add_bos:
        argv += ["--kv_overrides", "tokenizer.ggml.add_bos_token=bool:true"]
    handle = log.open("wb")
    proc = subprocess.Popen(argv, stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited: {log.read_text()[-800:]}")
        try:
            with urllib.request.urlopen(f"{base}/v1/models", timeout=2):
                return proc, base
        except OSError:
            time.sleep(0.3)
    proc.kill()
    raise RuntimeError("the server did not start in 180 s")


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def items(limit: int, folder: Path) -> Path:
    """The example's first ``limit`` items, as a JSONL file both harnesses read."""
    lines = (EXAMPLE / "data.jsonl").read_text(encoding="utf-8").splitlines()[:limit]
    path = folder / "data.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# -- lm-evaluation-harness --------------------------------------------------------------------
def one_generated_token() -> list[tuple[str, str, dict[str, Any], str | None]]:
    """Make every echo answer of llama-cpp-python's server end in one generated token, as
    lm-eval's ``gguf`` model assumes; returns the list the untouched answers are kept in.

    lm-eval sums ``token_logprobs[idx:-1]``: it drops the last token as the generated one.
    When the model's most likely next token ends the text (EOS), llama-cpp-python generates
    nothing (``finish_reason`` "stop") and the dropped token is the continuation's own last
    one: a one-token continuation then scores 0. An empty generated token is appended to
    such answers, so lm-eval drops that instead; its request building, splitting, sums and
    metrics are left as they are. lm-eval's values as shipped are recomputed from the kept
    answers with its own ``get_result``.
    """
    import copy

    from lm_eval.models.gguf import GGUFLM

    kept: list[tuple[str, str, dict[str, Any], str | None]] = []
    original = GGUFLM.gguf_completion

    def completion(self: Any, context: str, continuation: str | None = None, **kwargs: Any) -> Any:
        response = original(self, context, continuation=continuation, **kwargs)
        if continuation and response and response.get("choices"):
            choice = response["choices"][0]
            logprobs = choice.get("logprobs") or {}
            kept.append((context, continuation, copy.deepcopy(logprobs), choice.get("finish_reason")))
            if choice.get("finish_reason") == "stop" and logprobs.get("tokens"):
                logprobs["tokens"].append("")
                logprobs["text_offset"].append(len(context + continuation))
                logprobs["token_logprobs"].append(0.0)
                logprobs["top_logprobs"].append({"": 0.0})
        return response

    GGUFLM.gguf_completion = completion  # type: ignore[method-assign]
    return kept


def as_shipped(kept: list[tuple[str, str, dict[str, Any], str | None]], data: Path) -> dict[str, Any]:
    """lm-eval's per-item values without the shim: its own ``get_result`` on the kept answers."""
    from lm_eval.models.gguf import get_result

    by_request = {(c, k): get_result(lp, len(c))[0] for c, k, lp, _ in kept}
    per_item: dict[str, dict[str, Any]] = {}
    for line in data.read_text(encoding="utf-8").splitlines():
        doc = json.loads(line)
        context = f"Question: {doc['question']}\nAnswer:"
        lls = [float(by_request[(context, " " + choice)]) for choice in doc["choices"]]
        chars = [len(choice) for choice in doc["choices"]]
        pred = max(range(len(lls)), key=lambda i: (lls[i], -i))
        pred_norm = max(range(len(lls)), key=lambda i: (lls[i] / chars[i], -i))
        per_item[str(doc["id"])] = {
            "lls": lls,
            "acc": float(pred == doc["answer"]),
            "acc_norm": float(pred_norm == doc["answer"]),
        }
    n = len(per_item) or 1
    stops = sum(1 for *_, finish in kept if finish == "stop")
    return {
        "items": per_item,
        "acc": sum(v["acc"] for v in per_item.values()) / n,
        "acc_norm": sum(v["acc_norm"] for v in per_item.values()) / n,
        "stops": stops,
    }


def run_lm_eval(data: Path, base_url: str, folder: Path) -> dict[str, Any]:
    """The task through lm-eval's ``gguf`` model at ``base_url``: per-item lls, acc, acc_norm, time."""
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import lm_eval
    from lm_eval.tasks import TaskManager

    tasks = folder / "lm_eval_tasks"
    tasks.mkdir(exist_ok=True)
    (tasks / "ape_mc_crosscheck.yaml").write_text(LM_EVAL_TASK.format(data=data), encoding="utf-8")
    manager = TaskManager(include_path=str(tasks))
    kept = one_generated_token()
    started = time.perf_counter()
    results = lm_eval.simple_evaluate(
        model="gguf",
        model_args=f"base_url={base_url}",
        tasks=["ape_mc_crosscheck"],
        task_manager=manager,
        log_samples=True,
        num_fewshot=0,
        bootstrap_iters=0,
    )
    wall = time.perf_counter() - started
    assert results is not None
    per_item: dict[str, dict[str, Any]] = {}
    for sample in results["samples"]["ape_mc_crosscheck"]:
        doc = sample["doc"]
        lls = [float(resp[0][0]) for resp in sample["resps"]]
        per_item[str(doc["id"])] = {"lls": lls, "acc": float(sample["acc"]), "acc_norm": float(sample["acc_norm"])}
    metrics = results["results"]["ape_mc_crosscheck"]
    return {
        "items": per_item,
        "acc": float(metrics["acc,none"]),
        "acc_norm": float(metrics["acc_norm,none"]),
        "wall_s": wall,
        "requests": sum(len(v["lls"]) for v in per_item.values()),
        "shipped": as_shipped(kept, data),
    }


# -- APE --------------------------------------------------------------------------------------
def ape_config(folder: Path, data: Path, model: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(EXAMPLE / "mc_items.py", folder / "mc_items.py")
    text = f"""name = "crosscheck"
[data]
file = "{data}"
schema = "mc_items:ChoiceQuestion"
category_field = "category"
[prompt]
template = "{TEMPLATE}"
[choices]
field = "choices"
gold = "answer"
continuation = "text"
metric = "acc"
{model}
[run]
solver_workers = 1
cache = false
output = "output"
"""
    path = folder / "config.toml"
    path.write_text(text, encoding="utf-8")
    return path


def run_ape(config: Path) -> dict[str, Any]:
    """``python -m ape run`` as a user runs it; per-item lls, acc, acc_norm and the flow's wall time."""
    out = config.parent / "output"
    shutil.rmtree(out, ignore_errors=True)
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        PREFECT_LOGGING_LEVEL="WARNING",
    )
    started = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "ape", "run", str(config), "--no-progress"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
    )
    process_s = time.perf_counter() - started
    if not (out / "report.json").is_file():
        return {"refused": (proc.stderr.strip().splitlines() or ["(no output)"])[-1], "rc": proc.returncode}
    per_item: dict[str, dict[str, Any]] = {}
    for line in (out / "results.jsonl").read_text().splitlines():
        if not line.strip():
            continue
        session = json.loads(line)["sessions"][0]
        meta = (session.get("check") or {}).get("metadata") or {}
        per_item[session["item_id"]] = {
            "lls": list((session.get("solution") or {}).get("loglikelihoods") or []),
            "acc": float(meta.get("acc", 0.0)),
            "acc_norm": float(meta.get("acc_norm", 0.0)),
        }
    envelope = json.loads((out / "report.json").read_text())
    n = len(per_item) or 1
    return {
        "items": per_item,
        "acc": sum(v["acc"] for v in per_item.values()) / n,
        "acc_norm": sum(v["acc_norm"] for v in per_item.values()) / n,
        "wall_s": float(envelope["summary"]["wall_seconds"]),
        "process_s": process_s,
    }


def compare(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    """Largest per-choice log-likelihood difference, and items whose acc / acc_norm differ."""
    worst, differ_acc, differ_norm, missing = 0.0, 0, 0, 0
    for key, left in a["items"].items():
        right = b["items"].get(key)
        if right is None or len(right["lls"]) != len(left["lls"]):
            missing += 1
            continue
        worst = max([worst, *(abs(x - y) for x, y in zip(left["lls"], right["lls"], strict=True))])
        differ_acc += left["acc"] != right["acc"]
        differ_norm += left["acc_norm"] != right["acc_norm"]
    return {"max_abs_ll_diff": worst, "acc_differ": differ_acc, "acc_norm_differ": differ_norm, "missing": missing}


def _row(name: str, result: dict[str, Any], items_n: int, check: dict[str, Any] | None) -> str:
    if "refused" in result:
        reason = result["refused"].partition("failed: ")[2] or result["refused"]
        return f"| {name} | refused before any item (exit {result['rc']}): {reason[:220]} | | | | |"
    speed = items_n / result["wall_s"] if result["wall_s"] else float("nan")
    diff = (
        "reference"
        if check is None
        else (
            f"{check['max_abs_ll_diff']:.1e}; acc/acc_norm differ on {check['acc_differ']}/{check['acc_norm_differ']}"
            + (f"; {check['missing']} missing" if check["missing"] else "")
        )
    )
    return (
        f"| {name} | {result['acc']:.3f} | {result['acc_norm']:.3f} | {result['wall_s']:.1f} | {speed:.2f} | {diff} |"
    )


def _passes(check: dict[str, Any]) -> bool:
    same = check["acc_differ"] == check["acc_norm_differ"] == check["missing"] == 0
    return bool(check["max_abs_ll_diff"] <= TOLERANCE and same)


def pace_table(pace: list[tuple[float, float | None]], items_n: int) -> list[str]:
    """Both harnesses' wall times on the same server, round by round, and how often APE
    was no slower (its ratio to lm-eval at most 1.0)."""
    lines = [
        "| round | first | lm-eval wall s | APE wall s | APE / lm-eval | APE items/s |",
        "|---|---|---|---|---|---|",
    ]
    ratios = []
    for round_, (lm_s, ape_s) in enumerate(pace):
        first = "APE" if round_ % 2 else "lm-eval"
        if ape_s is None:
            lines.append(f"| {round_ + 1} | {first} | {lm_s:.1f} | refused | | |")
            continue
        ratios.append(ape_s / lm_s)
        lines.append(
            f"| {round_ + 1} | {first} | {lm_s:.1f} | {ape_s:.1f} | {ape_s / lm_s:.3f} | {items_n / ape_s:.3f} |"
        )
    if ratios:
        held = sum(r <= 1.0 for r in ratios)
        median = sorted(ratios)[len(ratios) // 2]
        lines.append(
            f"\nAPE no slower than lm-eval on the same server in {held} of {len(ratios)} round(s); "
            f"median ratio {median:.3f}"
        )
    return lines


HEADER = ["| harness | acc | acc_norm | wall s | items/s | max abs ll diff; items whose acc/acc_norm differ |"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=int, default=40, help="items of the example to use (40)")
    parser.add_argument("--threads", type=int, default=1, help="llama.cpp threads, server and in process alike")
    parser.add_argument("--skip-stock", action="store_true", help="leave out the stock server (no BOS) part")
    parser.add_argument(
        "--repeat", type=int, default=1, help="time lm-eval and APE on the same server this many times, alternating"
    )
    args = parser.parse_args()
    import importlib.util

    from ape import server as prefect_server
    from ape.tasks.models.local.llama_server import KNOWN_MODELS

    module, filename, _ = KNOWN_MODELS["smollm2-135m"]
    spec = importlib.util.find_spec(module)
    model = Path((spec.submodule_search_locations or [""])[0]) / filename if spec else Path(filename)
    work = Path(tempfile.mkdtemp(prefix="ape-ll-crosscheck-"))
    # a Prefect server for APE's runs, as `ape run` starts one; its start-up is not timed
    os.environ["APE_HOME"] = str(work / "ape-home")
    info = prefect_server.start(port=_free_port())
    os.environ.update(prefect_server.client_env(info))
    data = items(args.limit, work)
    n = len(data.read_text().splitlines())
    rows: list[str] = []
    ok = True
    try:
        proc, base = start_server(model, work / "server-bos.log", add_bos=True, threads=args.threads)
        try:
            openai = f'[model]\nname = "smollm2-openai"\nprovider = "openai"\nmodel = "local"\nbase_url = "{base}/v1"\n'
            openai_config = ape_config(work / "ape-openai", data, openai)
            lm = run_lm_eval(data, base, work)
            ape_server = run_ape(openai_config)
            pace = [(lm["wall_s"], ape_server.get("wall_s"))]
            for round_ in range(1, args.repeat):  # alternate who goes first, so drift favours neither
                if round_ % 2:
                    ape_s = run_ape(openai_config).get("wall_s")
                    lm_s = run_lm_eval(data, base, work)["wall_s"]
                else:
                    lm_s = run_lm_eval(data, base, work)["wall_s"]
                    ape_s = run_ape(openai_config).get("wall_s")
                pace.append((lm_s, ape_s))
        finally:
            stop(proc)
        inproc = (
            '[model]\nname = "smollm2-inprocess"\nprovider = "llama-cpp"\nmodel = "smollm2-135m"\n'
            f"args = {{ add_bos = true, n_threads = {args.threads} }}\n"
        )
        ape_inproc = run_ape(ape_config(work / "ape-inprocess", data, inproc))
        shipped = {**lm["shipped"], "wall_s": lm["wall_s"]}
        checks = {
            "server": compare(lm, ape_server) if "items" in ape_server else None,
            "inproc": compare(lm, ape_inproc) if "items" in ape_inproc else None,
        }
        ok = all(check is not None and _passes(check) for check in checks.values())
        rows += [
            f"SmolLM2-135M-Instruct Q4_1, {n} items, {lm['requests']} log-likelihood requests, llama.cpp threads "
            f"{args.threads}; llama-cpp-python's server with add_bos_token=true",
            "",
            *HEADER,
            "|---|---|---|---|---|---|",
            _row("lm-eval 0.4.13 `gguf` -> llama-cpp-python server (one generated token ensured)", lm, n, None),
            _row("APE `openai` (/v1/completions) -> same server", ape_server, n, checks["server"]),
            _row("APE `llama-cpp` in process (add_bos = true)", ape_inproc, n, checks["inproc"]),
            _row(
                f"lm-eval `gguf` as shipped, same answers ({shipped['stops']} ended without a generated token)",
                shipped,
                n,
                compare(lm, shipped),
            ),
        ]
        rows += ["", *pace_table(pace, n)]
        for name, result in (("openai", ape_server), ("in-process", ape_inproc)):
            if "process_s" in result:
                rows.append(
                    f"\nAPE {name}: the `ape run` process took {result['process_s']:.1f} s in all "
                    "(start-up and the Prefect client's included)"
                )
        if not args.skip_stock:
            proc, base = start_server(model, work / "server-stock.log", add_bos=False, threads=args.threads)
            try:
                lm_stock = run_lm_eval(data, base, work)
                stock = (
                    f'[model]\nname = "smollm2-stock"\nprovider = "openai"\nmodel = "local"\nbase_url = "{base}/v1"\n'
                )
                ape_stock = run_ape(ape_config(work / "ape-stock", data, stock))
            finally:
                stop(proc)
            model_as_shipped = (
                '[model]\nname = "smollm2-shipped"\nprovider = "llama-cpp"\nmodel = "smollm2-135m"\n'
                f"args = {{ n_threads = {args.threads} }}\n"
            )
            ape_shipped = run_ape(ape_config(work / "ape-shipped", data, model_as_shipped))
            stock_shipped = {**lm_stock["shipped"], "wall_s": lm_stock["wall_s"]}
            reference = ape_shipped if "items" in ape_shipped else None
            rows += [
                "",
                "SmolLM2 as shipped (no BOS token); the stock llama-cpp-python server:",
                "",
                *HEADER,
                "|---|---|---|---|---|---|",
                _row("APE `llama-cpp` in process (the model as shipped)", ape_shipped, n, None),
                _row(
                    "lm-eval `gguf` as shipped -> stock server (prompt log-probs shifted; no warning)",
                    stock_shipped,
                    n,
                    compare(reference, stock_shipped) if reference else None,
                ),
                _row("APE `openai` -> stock server", ape_stock, n, None),
            ]
    finally:
        prefect_server.stop()
        shutil.rmtree(work, ignore_errors=True)
    print("\n".join(rows))
    verdict = "yes" if ok else "NO"
    print(f"\nAPE and lm-eval per-item log-likelihoods within {TOLERANCE:g}, identical acc/acc_norm: {verdict}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
