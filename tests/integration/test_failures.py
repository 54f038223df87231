"""No silent failures, nothing lost or duplicated: each fault is injected for real.

Real processes (``python -m ape`` and ``prefect server start``), real files and real
mounts: a read-only bind mount and a small tmpfs need CAP_SYS_ADMIN; without it those
two tests are skipped with the reason.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.helpers.paths import REPO_ROOT
from tests.helpers.processes import free_port, wait_server
from tests.helpers.runner import make_benchmark, read_results

PLUGINS = '''

import time as _time
from pathlib import Path as _Path

from langchain_core.tools import StructuredTool


def check_mostly_raises(item, solution):
    """Raises for most items, returns no verdict for one, until the heal file exists."""
    if _Path(__file__).with_name("healed").exists() or item.id == "i0":
        return solution == item.answer
    if item.id == "i1":
        return "yes"
    raise RuntimeError("checker bug")


def check_hangs_on_i2(item, solution):
    if item.id == "i2":
        _time.sleep(3600)
    return solution == item.answer


def adapter_hangs_on_7(text):
    if text.strip().endswith(" 7"):
        _time.sleep(3600)
    return int(text.split()[-1])


def _calc(expression: str) -> str:
    if "5 + 10" in expression:
        _time.sleep(3600)
    return str(eval(expression, {"__builtins__": {}}))


def hanging_calculator():
    return StructuredTool.from_function(func=_calc, name="calculator",
                                        description="Evaluate an arithmetic expression.")
'''


def bench(tmp_path: Path, n: int = 6, **kw) -> Path:
    config = make_benchmark(tmp_path, n=n, **kw)
    with (tmp_path / "benchschema.py").open("a") as handle:
        handle.write(PLUGINS)
    return config


def env_for(api: str | None) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH="")
    env.pop("PREFECT_API_URL", None)
    if api:
        env["PREFECT_API_URL"] = api
    return env


def ape(*args: str, api: str | None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "ape", *args],
        cwd=REPO_ROOT,
        env=env_for(api),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def ape_bg(*args: str, api: str | None) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "ape", *args],
        cwd=REPO_ROOT,
        env=env_for(api),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def saved_ids(path: Path) -> list[str]:
    """Item ids of the complete lines of a results file (a torn last line is not saved)."""
    if not path.exists():
        return []
    return [json.loads(line)["item_id"] for line in path.read_text().split("\n")[:-1] if line.strip()]


def wait_saved(path: Path, count: int, proc: subprocess.Popen, limit: float = 180) -> None:
    deadline = time.monotonic() + limit
    while len(saved_ids(path)) < count:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the run saved too little in time"
        time.sleep(0.05)


def calls(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def every_item_once(results: Path, n: int) -> list[dict]:
    rows = read_results(results)
    ids = [row["item_id"] for row in rows]
    assert sorted(ids) == sorted(f"i{i}" for i in range(n)), "an item was lost or duplicated"
    return rows


def can_mount() -> bool:
    probe = Path(tempfile.mkdtemp(prefix="ape-mount-probe-"))
    try:
        ok = (
            subprocess.run(
                ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(probe)], capture_output=True
            ).returncode
            == 0
        )
        if ok:
            subprocess.run(["umount", str(probe)], check=True)
        return ok
    except OSError:
        return False
    finally:
        probe.rmdir()


# --- 1 and 9: check errors and session errors ------------------------------------------------


@pytest.mark.slow
def test_check_errors_fail_the_run_and_retry_rechecks_without_model_calls(tmp_path, prefect_server):
    log = tmp_path / "calls.log"
    config = bench(
        tmp_path,
        n=6,
        checker='implementation = "benchschema:check_mostly_raises"',
        model_args=f'behaviour = "arithmetic", call_log = "{log}"',
    )
    results = tmp_path / "out" / "results.jsonl"
    first = ape("run", str(config), "--no-server", api=prefect_server)
    out = first.stdout + first.stderr
    assert first.returncode == 1, out
    # one line per check error, a summary, the leaderboard column; no traceback
    assert "item i1 run 0: check error: TypeError: the checker returned str 'yes'" in first.stderr
    # the same error on i2-i5: the first to finish is shown (workers finish in any order), the
    # rest are folded into one line, and run.log holds every one
    assert re.search(r"item i[2-5] run 0: check error: RuntimeError: checker bug", first.stderr), first.stderr
    assert "the same check error on 4 sessions" in first.stderr
    run_log = (tmp_path / "out" / "run.log").read_text()
    assert all(f"item i{i} run 0: check error: RuntimeError: checker bug" in run_log for i in range(2, 6))
    assert "0 errored sessions, 5 check errors" in first.stderr
    assert "5 of 6 items of m errored (0 session error(s), 5 check error(s)" in first.stderr
    assert "Traceback" not in out
    header, _, row = [line for line in first.stdout.splitlines() if line.startswith("|")][:3]
    cells = dict(zip([c.strip() for c in header.split("|")], [c.strip() for c in row.split("|")]))
    assert cells["Check errors"] == "5"
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["leaderboard"][0]["check_errors"] == 5
    every_item_once(results, 6)
    asked = len(calls(log))
    assert asked == 6

    (tmp_path / "healed").write_text("ok")
    retry = ape("retry", str(tmp_path / "out"), "--no-server", api=prefect_server)
    assert retry.returncode == 0, retry.stdout + retry.stderr
    assert "redoing 5 item(s) whose session or check errored" in retry.stderr
    assert len(calls(log)) == asked, "re-checking called the model"
    rows = every_item_once(results, 6)
    assert all(s["check"]["status"] == "PASSED" for row in rows for s in row["sessions"])


def test_validate_finds_a_checker_field_missing_from_the_schema(tmp_path, capsys):
    from ape.cli import main

    config = bench(tmp_path, checker='implementation = "exact_match"\nargs = { field = "answr" }')
    assert main(["validate", str(config)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "[checker] args field" in err and "'answr'" in err and "did you mean 'answer'" in err


def test_a_property_of_the_schema_is_a_valid_checker_field():
    from pydantic import BaseModel

    from ape.schemas.errors import ApeError
    from ape.tasks.checking.builtin import builtin_checker
    from ape.tasks.setup.model import check_checker_fields

    class Problem(BaseModel):
        id: str
        test: str

        @property
        def tests(self) -> str:
            return self.test + "\n"

    check_checker_fields(builtin_checker("code_exec", {"tests_field": "tests"}), Problem, "[checker] args")
    with pytest.raises(ApeError, match="'testz'"):
        check_checker_fields(builtin_checker("code_exec", {"tests_field": "testz"}), Problem, "[checker] args")


def test_session_errors_print_one_line_each_without_traceback(tmp_path, prefect_server):
    model = '[model]\nname = "flaky"\nclass = "benchschema:Flaky"\nmax_retries = 0\nargs = { fail_marker = "4 + 7" }\n'
    config = bench(tmp_path, n=4, models=model)
    done = ape("run", str(config), "--no-server", api=prefect_server)
    assert done.returncode == 1, done.stdout + done.stderr
    lines = [line for line in done.stderr.splitlines() if ": session error: " in line]
    # the line names where the user's model raised (its own file and line)
    assert len(lines) == 1 and re.fullmatch(
        rf"item i2 run 0: session error: ConnectionError: endpoint down \(at {re.escape(str(tmp_path))}/benchschema\.py:\d+ in _generate\)",
        lines[0],
    ), done.stderr
    assert "1 errored sessions, 0 check errors" in done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    every_item_once(tmp_path / "out" / "results.jsonl", 4)


# --- 2: the Prefect server dies mid-run -------------------------------------------------------


@pytest.mark.slow
def test_killed_prefect_server_ends_the_run_with_one_line_and_a_rerun_resumes(tmp_path, prefect_server, kill_at_end):
    port = free_port()
    home = tmp_path / "server-home"
    home.mkdir()
    server_env = dict(os.environ, PREFECT_HOME=str(home), PREFECT_SERVER_ANALYTICS_ENABLED="false")
    server_env.pop("PREFECT_API_URL", None)
    server = kill_at_end(
        subprocess.Popen(
            [sys.executable, "-m", "prefect", "server", "start", "--host", "127.0.0.1", "--port", str(port)],
            env=server_env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    )
    doomed = f"http://127.0.0.1:{port}/api"
    wait_server(server, port, f"{doomed}/health")
    config = bench(tmp_path, n=40, model_args='behaviour = "arithmetic", latency_s = 0.15', run="solver_workers = 2")
    results = tmp_path / "out" / "results.jsonl"
    run = kill_at_end(ape_bg("run", str(config), "--no-server", api=doomed))
    wait_saved(results, 6, run)
    os.killpg(server.pid, signal.SIGKILL)  # the server and its workers, for real
    server.wait()
    out, err = run.communicate(timeout=120)  # a hang guard, not a timing assertion
    assert run.returncode == 1, out + err
    assert "error: lost the Prefect API" in err and "rerun the same command to resume" in err
    assert "Traceback" not in out + err
    assert "EventsWorker" not in err
    saved = saved_ids(results)
    assert len(saved) == len(set(saved)) >= 6

    again = ape("run", str(config), "--no-server", api=prefect_server)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"resuming, {len(saved)} of 40 items already saved" in again.stderr
    every_item_once(results, 40)


# --- 3: one writer per output folder -----------------------------------------------------------


@pytest.mark.slow
def test_second_run_on_one_folder_exits_2_and_a_stale_lock_is_taken_over(tmp_path, prefect_server, kill_at_end):
    log = tmp_path / "calls.log"
    # long enough that the first run is still going while the others start (then killed)
    config = bench(
        tmp_path,
        n=200,
        run="solver_workers = 2",
        model_args=f'behaviour = "arithmetic", latency_s = 0.3, call_log = "{log}"',
    )
    results = tmp_path / "out" / "results.jsonl"
    first = kill_at_end(ape_bg("run", str(config), "--no-server", api=prefect_server))
    wait_saved(results, 3, first)
    for extra in ([], ["--no-load-save"]):
        second = ape("run", str(config), "--no-server", *extra, api=prefect_server, timeout=120)
        assert second.returncode == 2, second.stdout + second.stderr
        line = second.stderr.strip()
        assert len(line.splitlines()) == 1, line
        assert f"in use by another ape run (pid {first.pid} on " in line and "started 20" in line
    assert not list((tmp_path / "out").glob("*.bak")), "the refused run moved files away"
    assert {c["pid"] for c in calls(log)} == {first.pid}, "the refused run called the model"

    os.killpg(first.pid, signal.SIGKILL)  # the holder dies; its lock file stays behind
    first.communicate()
    lock = json.loads((tmp_path / "out" / ".ape.lock").read_text())
    assert lock["pid"] == first.pid
    assert first.returncode == -signal.SIGKILL, "the first run ended before the checks"
    third = ape("run", str(config), "--no-server", "--workers", "16", api=prefect_server)
    assert third.returncode == 0, third.stdout + third.stderr
    every_item_once(results, 200)


# --- 4: damaged lines ----------------------------------------------------------------------------


@pytest.mark.slow
def test_damaged_lines_are_quarantined_their_items_redone_and_good_lines_kept(tmp_path, prefect_server):
    config = bench(tmp_path, n=8)
    out = tmp_path / "out"
    results = out / "results.jsonl"
    assert ape("run", str(config), "--no-server", api=prefect_server).returncode == 0
    lines = results.read_text().splitlines(keepends=True)
    damaged_ids = [json.loads(lines[2])["item_id"], json.loads(lines[5])["item_id"]]
    lines[2] = lines[2][: len(lines[2]) // 2] + "\n"  # cut in the middle, not at the end
    lines[5] = "\x00\x00 not json at all\n"
    results.write_text("".join(lines))

    report = ape("report", str(out), api=None)
    assert report.returncode == 0, report.stdout + report.stderr
    assert "results.jsonl:3: skipping a damaged line" in report.stderr
    assert "Traceback" not in report.stdout + report.stderr
    assert re.search(r"\| `m` \| 6 \|", report.stdout), report.stdout  # the report counts 6 saved items

    again = ape("run", str(config), "--no-server", api=prefect_server)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "results.jsonl:3 is damaged" in again.stderr and "results.jsonl:6 is damaged" in again.stderr
    assert "resuming, 6 of 8 items already saved" in again.stderr
    quarantined = (out / "results.jsonl.damaged").read_text().splitlines()
    assert quarantined == [lines[2].rstrip("\n"), lines[5].rstrip("\n")]
    rows = every_item_once(results, 8)
    assert {r["item_id"] for r in rows[-2:]} == set(damaged_ids)  # redone, appended


# --- 5: the output folder -------------------------------------------------------------------------


def test_output_folder_that_is_a_file_is_one_line_exit_2(tmp_path, capsys):
    from ape.cli import main

    config = bench(tmp_path)
    (tmp_path / "out").write_text("a file where the folder should be")
    for command in (["validate", str(config)], ["run", str(config), "--no-server"]):
        assert main(command) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "[run] output" in err and "is a file, not a folder" in err


@pytest.fixture
def mount() -> Iterator[Callable[..., None]]:
    """``mount(*options, target)`` mounts over ``target``; every mount is detached again after
    the test, passed or failed (lazily, so a process still writing there cannot keep it)."""
    targets: list[Path] = []

    def do(*options: str, target: Path) -> None:
        subprocess.run(["mount", *options, str(target)], check=True)
        targets.append(target)

    yield do
    for target in reversed(targets):
        subprocess.run(["umount", "--lazy", str(target)], check=False)


@pytest.mark.skipif(not can_mount(), reason="needs CAP_SYS_ADMIN for a read-only bind mount")
def test_read_only_output_folder_is_one_line_exit_2_even_for_root(tmp_path, capsys, mount):
    from ape.cli import main

    config = bench(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    # root ignores permission bits: a read-only bind mount stops every writer
    mount("--bind", "-o", "ro", str(out), target=out)
    for command in (["validate", str(config)], ["run", str(config), "--no-server"]):
        assert main(command) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and "is not writable: Read-only file system" in err, err


@pytest.mark.slow
@pytest.mark.skipif(not can_mount(), reason="needs CAP_SYS_ADMIN for a small tmpfs")
def test_disk_full_mid_run_ends_with_one_line_and_keeps_what_was_saved(tmp_path, prefect_server, mount, kill_at_end):
    disk = tmp_path / "disk"
    disk.mkdir()
    mount("-t", "tmpfs", "-o", "size=64m", "tmpfs", target=disk)
    config = bench(disk, n=40, model_args='behaviour = "arithmetic", latency_s = 0.15', run="solver_workers = 2")
    results = disk / "out" / "results.jsonl"
    run = kill_at_end(ape_bg("run", str(config), "--no-server", api=prefect_server))
    wait_saved(results, 5, run)
    before = results.read_text()
    with (disk / "filler").open("wb") as handle:  # fill the disk for real
        try:
            while True:
                handle.write(b"\0" * (1 << 20))
        except OSError:
            pass
    out, err = run.communicate(timeout=120)
    assert run.returncode == 1, out + err
    assert "No space left on device" in err and "items saved before are kept" in err
    assert "Traceback" not in out + err
    saved = saved_ids(results)
    assert results.read_text().startswith(before)  # nothing already saved was lost
    assert len(saved) == len(set(saved)) >= 5
    (disk / "filler").unlink()
    again = ape("run", str(config), "--no-server", api=prefect_server)
    assert again.returncode == 0, again.stdout + again.stderr
    every_item_once(results, 40)


# --- 6: time limits and bounds ----------------------------------------------------------------------


@pytest.mark.slow
def test_hung_checker_adapter_and_tool_end_their_session_and_the_run_goes_on(tmp_path, prefect_server):
    # items: i0 2 + 1, i1 3 + 4, i2 4 + 7, i3 5 + 10, i4 6 + 13; the adapter hangs on the
    # answer 7 (i1), the checker on i2, the calculator tool on "5 + 10" (i3)
    config = bench(
        tmp_path,
        n=5,
        checker='implementation = "benchschema:check_hangs_on_i2"\ntimeout_s = 1',
        model_args='behaviour = "arithmetic", use_tools = true',
        extra='\n[tools.calculator]\nfactory = "benchschema:hanging_calculator"\n\n[solver]\ntool_timeout_s = 1\n',
    )
    text = config.read_text().replace(
        'implementation = "last_number"', 'implementation = "benchschema:adapter_hangs_on_7"\ntimeout_s = 1'
    )
    config.write_text(text)
    done = ape("run", str(config), "--no-server", api=prefect_server, timeout=240)
    assert done.returncode == 1, done.stdout + done.stderr
    rows = {row["item_id"]: row["sessions"][0] for row in every_item_once(tmp_path / "out" / "results.jsonl", 5)}
    assert rows["i1"]["outcome"] == "ERROR"
    assert "the adapter did not return within 1 s" in rows["i1"]["error"]["message"]
    assert rows["i2"]["check"]["status"] == "ERROR"
    assert "the checker did not return within 1 s" in rows["i2"]["check"]["error"]["message"]
    assert rows["i3"]["outcome"] == "ERROR"
    assert "tool 'calculator' did not return within 1 s" in rows["i3"]["error"]["message"]
    assert rows["i0"]["check"]["status"] == "PASSED" and rows["i4"]["check"]["status"] == "PASSED"
    assert "item i2 run 0: check error: PluginTimeout" in done.stderr
    assert "Traceback" not in done.stdout + done.stderr


def test_runs_per_data_and_timeouts_are_bounded(tmp_path, capsys):
    from ape.cli import main

    for key, value in (("runs_per_data", "1000000000"), ("solver_workers", "100000")):
        config = bench(tmp_path / key, run=f"{key} = {value}")
        assert main(["validate", str(config)]) == 2
        err = capsys.readouterr().err.strip()
        assert err.count("\n") == 0 and f"[run.{key}]" in err and "less than or equal" in err
    config = bench(tmp_path / "t", checker='implementation = "exact_match"\ntimeout_s = 0')
    assert main(["validate", str(config)]) == 2
    assert "[checker.timeout_s]" in capsys.readouterr().err


# --- 7: resume after the config changed -----------------------------------------------------------


@pytest.mark.slow
def test_resume_understands_config_changes(tmp_path, prefect_server):
    log = tmp_path / "calls.log"
    config = bench(
        tmp_path,
        n=4,
        run="runs_per_data = 2",
        model_args=f'behaviour = "arithmetic", sampling = true, call_log = "{log}"',
    )
    results = tmp_path / "out" / "results.jsonl"
    assert ape("run", str(config), "--no-server", api=prefect_server).returncode == 0
    assert len(calls(log)) == 8

    # a larger runs_per_data runs only the missing sessions
    config.write_text(config.read_text().replace("runs_per_data = 2", "runs_per_data = 3"))
    grown = ape("run", str(config), "--no-server", api=prefect_server)
    assert grown.returncode == 0, grown.stdout + grown.stderr
    assert "runs_per_data grew from 2 to 3" in grown.stderr
    assert len(calls(log)) == 8 + 4
    rows = every_item_once(results, 4)
    assert all(sorted(s["run_index"] for s in r["sessions"]) == [0, 1, 2] for r in rows)

    # a changed checker re-scores the saved generations without model calls
    text = config.read_text().replace(
        'implementation = "exact_match"', 'implementation = "benchschema:check_always_fails"'
    )
    config.write_text(text)
    rescored = ape("run", str(config), "--no-server", api=prefect_server)
    assert rescored.returncode == 0, rescored.stdout + rescored.stderr
    assert "the checker or metric changed: re-scoring 4 saved item(s)" in rescored.stderr
    assert len(calls(log)) == 12
    rows = every_item_once(results, 4)
    assert all(s["check"]["status"] == "FAILED" for r in rows for s in r["sessions"])

    # a smaller runs_per_data reports on the first k (the full file is kept)
    config.write_text(config.read_text().replace("runs_per_data = 3", "runs_per_data = 1"))
    shrunk = ape("run", str(config), "--no-server", api=prefect_server)
    assert shrunk.returncode == 0, shrunk.stdout + shrunk.stderr
    assert "runs_per_data shrank from 3 to 1" in shrunk.stderr
    assert len(calls(log)) == 12
    rows = every_item_once(results, 4)
    assert all([s["run_index"] for s in r["sessions"]] == [0] for r in rows)
    assert (tmp_path / "out" / "results.jsonl.bak").is_file()

    # a changed prompt refuses to mix results, before anything runs
    config.write_text(config.read_text().replace("What is {{ question }}?", "Compute {{ question }}."))
    refused = ape("run", str(config), "--no-server", api=prefect_server)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    line = refused.stderr.strip()
    assert line.count("\n") == 0 and "different prompt" in line
    assert "--output" in line and "--no-load-save" in line
    assert len(calls(log)) == 12
    every_item_once(results, 4)


# --- 8: plugins that exit or raise on import --------------------------------------------------------


def test_plugin_module_that_exits_or_raises_on_import_is_one_line(tmp_path, capsys):
    from ape.cli import main

    config = bench(tmp_path)
    (tmp_path / "exits.py").write_text("import sys\nsys.exit(3)\n")
    (tmp_path / "raises.py").write_text("raise RuntimeError('broken plugin')\n")
    text = config.read_text()
    config.write_text(text.replace('schema = "benchschema:Item"', 'schema = "exits:Item"'))
    assert main(["validate", str(config)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "[data] schema" in err and "'exits'" in err and "status 3" in err
    config.write_text(text.replace('implementation = "exact_match"', 'implementation = "raises:check"'))
    assert main(["run", str(config), "--no-server"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "[checker] implementation" in err and "broken plugin" in err


# --- the parts, without Prefect -------------------------------------------------------------------


def test_save_handler_quarantines_damaged_lines_anywhere_and_keeps_the_good(tmp_path, ape_log):
    from ape.schemas.results import Outcome, OutputBatch, SessionResult
    from ape.tasks.storage.save import SaveHandler, read_batches

    def batch(key: str) -> OutputBatch:
        return OutputBatch(
            item_id=key,
            model_id="m",
            sessions=[SessionResult(item_id=key, run_index=0, model_id="m", outcome=Outcome.SOLVED)],
        )

    with SaveHandler(tmp_path) as saver:
        saver.save([batch("a"), batch("b"), batch("c")])
    path = tmp_path / "results.jsonl"
    good = path.read_text().splitlines()
    path.write_text("\n".join([good[0], '{"item_id": "b", "sessi', good[2], "garbage"]) + "\n" + '{"torn')
    saver = SaveHandler(tmp_path)
    saver.load()
    assert [b.item_id for b in read_batches(path)] == ["a", "c"]
    assert sorted(saver.completed) == ["a", "c"]
    assert (tmp_path / "results.jsonl.damaged").read_text().splitlines() == ['{"item_id": "b", "sessi', "garbage"]
    warned = [r.getMessage() for r in ape_log.records if "is damaged" in r.getMessage()]
    assert len(warned) == 2 and "results.jsonl:2 is damaged" in warned[0] and "results.jsonl:4" in warned[1]


def test_output_lock_is_exclusive_across_processes_and_reentrant_within_one(tmp_path):
    from ape.schemas.errors import ApeError
    from ape.tasks.storage.outdir import OutputLock

    other = (
        "import sys\nfrom ape.tasks.storage.outdir import OutputLock\nfrom ape.schemas.errors import ApeError\n"
        "try:\n    OutputLock(sys.argv[1]).acquire()\nexcept ApeError as e:\n    print(e); sys.exit(2)\n"
    )
    with OutputLock(tmp_path), OutputLock(tmp_path):  # re-entrant in this process
        taken = subprocess.run([sys.executable, "-c", other, str(tmp_path)], capture_output=True, text=True)
        assert taken.returncode == 2 and f"pid {os.getpid()} on " in taken.stdout
    free = subprocess.run([sys.executable, "-c", other, str(tmp_path)], capture_output=True, text=True)
    assert free.returncode == 0, free.stdout + free.stderr
    with pytest.raises(ApeError, match="is a file"):
        from ape.tasks.storage.outdir import check_output_folder

        (tmp_path / "f").write_text("x")
        check_output_folder(tmp_path / "f")


def test_call_with_timeout_gives_up_on_a_hung_call():
    from ape.tasks.common.deadline import PluginTimeout, call_with_timeout

    assert call_with_timeout(lambda x: x + 1, 1, limit_s=5, label="f", key="k") == 2
    with pytest.raises(PluginTimeout, match=r"the checker did not return within 0.2 s \(raise the limit with k\)"):
        call_with_timeout(time.sleep, 3600, limit_s=0.2, label="the checker", key="k")
    with pytest.raises(ZeroDivisionError):
        call_with_timeout(lambda: 1 / 0, limit_s=5, label="f", key="k")
