"""Gather a model's requests into provider batches, wait for them, and hand each answer back.

One :class:`Batcher` per model and output folder in a process (:func:`batcher_for`). The
solver workers' sessions call :meth:`Batcher.ask` and block on the answer; the batcher
collects requests until ``batch_size`` of them wait or the first has waited
``batch_wait_s``, submits them as one batch, polls it with a growing interval (the
first wait ``batch_poll_s``, each next 1.5x the last, capped at 300 s or ``batch_poll_s``)
and resolves each request's future with the provider's answer or a
:class:`BatchRequestError` carrying the provider's message.

Never paying twice: every request has a ``custom_id`` derived from its content (the
session's item, run index and the request body), and two files in the model's output
folder record what was paid for, each line appended and fsynced:

``batches.jsonl``
    ``{"event": "submitting", "tag", "provider", "custom_ids", "requests", "at", "owner"}`` before a
    batch is sent (``tag``: a random id the batch carries at the provider, see
    :meth:`~ape.tasks.models.batch.clients.BatchClient.find`; ``owner``: the submitting
    process's pid and start time; ``requests``: each ``custom_id``'s request hash,
    :func:`~ape.tasks.models.batch.trust.request_hash`); ``{"event": "submitted",
    "batch_id", "tag", "provider", "custom_ids", "requests", "at"}`` as soon as the provider has
    accepted it, before any session hears of it (``"adopted": true`` when it was found
    at the provider instead); ``{"event": "unsent", "tag"}`` when a submit is known not to
    have made a batch; ``{"event": "ended", "batch_id", "status", "counts", "at"}`` once
    its results are collected; ``{"event": "refused", "batch_id", "reason"}`` when the
    provider's description of a batch does not show this folder's requests.
``batch_results.jsonl``
    ``{"custom_id", "batch_id", "request_hash", "body"}`` for each answered request, as
    collected.

A batcher that starts in a folder with batches submitted and not ended (a run killed
while they were in flight) polls them again; a request whose ``custom_id`` is in one of
them waits for that batch instead of being submitted, and one already answered
(``batch_results.jsonl``) is answered at once. Neither file is believed on its word
(:mod:`ape.tasks.models.batch.trust`): an answer row counts only for a batch on a
``submitted`` line of the ledger, with the hash of the request asked now, and a batch from
the ledger is collected only once the provider's description of it shows this folder's requests;
a refused row or batch is one warning line, counted, and its requests are submitted again.
Failed and expired requests are not
recorded as answers: ``ape retry`` redoes their items with a new batch.

A submit whose ``submitting`` line has no ``submitted`` line after it (the process was
killed between the provider accepting the batch and the ledger's fsync, or the submit's
answer was lost to a timeout), and whose owner process is gone, is looked for at the
provider by its tag (a live owner, another Dask worker's process, records it itself):
found, the batch is adopted (recorded and collected); not found, the line is closed as
``unsent`` and its requests are submitted when a session asks again. :envvar:`APE_BATCH_KILL_AFTER_SUBMIT`
(tests only) makes the process kill itself with SIGKILL right after a submit returns,
to show exactly that window.

Each state change of a batch (status or counts) is one log line with its id, counts and
age, and every submit, poll and end goes to the model's
:class:`~ape.tasks.models.batch.status.BatchBoard` (the progress bar's batch column and
the flow run's ``<model>-batches`` artifact), so a run that waits for a batch says so
instead of showing a frozen bar.
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import logging
import os
import signal
import threading
import time
import uuid
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from ape.tasks.models.batch.clients import BatchClient, BatchState, RequestResult
from ape.tasks.models.batch.status import board_for
from ape.tasks.models.batch.trust import ProviderBatch, batch_refusal, request_hash, trusted_answers
from ape.tasks.models.limits.policy import classify_error
from ape.tasks.storage.file_modes import created_file_mode, not_own_file
from ape.tasks.storage.prefect_api import current_flow_run_id

__all__ = ["LEDGER", "BatchRequestError", "Batcher", "BatchSettings", "batcher_for", "custom_id", "open_batches"]

log = logging.getLogger("ape")

LEDGER = "batches.jsonl"
ANSWERS = "batch_results.jsonl"
MAX_POLL_S = 300.0
KILL_AFTER_SUBMIT = "APE_BATCH_KILL_AFTER_SUBMIT"  # tests: die between the provider's accept and the ledger


class BatchRequestError(RuntimeError):
    """A request of a batch failed, expired, or its batch did: the provider's message.

    Not transient for the retry policy: a retry would pay for another batch round at
    once; ``ape retry`` redoes the item instead."""


@dataclass(frozen=True)
class BatchSettings:
    """How a model's requests are batched (the ``[model] batch_*`` keys)."""

    size: int = 1000
    wait_s: float = 5.0
    poll_s: float = 10.0


def custom_id(body: dict[str, Any], session: tuple[str, int] | None) -> str:
    """A stable id for one request: the same session asking the same thing gets the same id.

    The session (item id, run index) is part of it, so ``runs_per_data`` sessions with one
    prompt are separate requests (separate samples), not one answer shared. 64 characters
    at most from ``[A-Za-z0-9_-]``, as both providers accept.
    """
    text = json.dumps({"session": list(session) if session else None, "body": body}, sort_keys=True, default=str)
    return "ape-" + hashlib.sha256(text.encode()).hexdigest()[:48]


def _append(path: Path, line: dict[str, Any]) -> None:
    """One fsynced line; the file is created with the run's modes (owner-only by default)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, created_file_mode())
    try:
        os.write(fd, (json.dumps(line, sort_keys=True) + "\n").encode())
        os.fsync(fd)
    finally:
        os.close(fd)


def _read(path: Path) -> list[dict[str, Any]]:
    """The file's lines; a damaged line (a write cut by a kill) is skipped with a warning."""
    if not path.exists():
        return []
    lines = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            lines.append(json.loads(line))
        except json.JSONDecodeError:
            log.warning("%s line %d is damaged; skipped", path, number)
    return lines


def open_batches(folder: Path) -> list[str]:
    """The batches of ``folder``'s ledger that a resumed run would still collect: submitted and
    not ended, or a submit whose outcome was never written (its tag). ``ape prune`` keeps a run
    folder holding any: removing the ledger would pay for those batches again."""
    rows = _read(Path(folder) / LEDGER)
    closed = {str(row.get("tag")) for row in rows if row.get("event") in {"submitted", "unsent"}}
    ended = {str(row.get("batch_id")) for row in rows if row.get("event") == "ended"}
    found = [
        str(row["batch_id"])
        for row in rows
        if row.get("event") == "submitted" and row.get("batch_id") and str(row["batch_id"]) not in ended
    ]
    found += [
        f"submit {row.get('tag')}"
        for row in rows
        if row.get("event") == "submitting" and str(row.get("tag")) not in closed
    ]
    return found


def _owner(pid: int) -> str | None:
    """``pid start-time`` of a live process (the start time tells a reused pid apart), or None
    when there is no such process (or no ``/proc`` to ask)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    return f"{pid} {fields[19]}" if len(fields) > 19 else str(pid)


def _wall(at: Any) -> float | None:
    """A ledger line's ISO time as wall-clock seconds (None when absent or unreadable)."""
    try:
        return datetime.fromisoformat(str(at)).timestamp()
    except ValueError:
        return None


Waiter = tuple[dict[str, Any], "Future[dict[str, Any]]"]  # the request body asked, and its answer


@dataclass
class _InFlight:
    batch_id: str
    custom_ids: set[str]
    submitted_at: float  # monotonic, for the log's age
    hashes: dict[str, str] = field(default_factory=dict)  # custom id -> request hash, where known
    line: dict[str, Any] | None = None  # the ledger line of a batch from an earlier run: checked first
    check_results: bool = False  # the provider shows its requests only with the results (Anthropic)
    waiters: dict[str, list[Waiter]] = field(default_factory=dict)


class Batcher:
    """The batches of one model in one output folder (see the module docstring)."""

    def __init__(self, model_id: str, folder: Path, client: BatchClient, settings: BatchSettings):
        self.model_id = model_id
        self.folder = folder
        self.client = client
        self.settings = settings
        self.submissions = 0  # batches this batcher submitted (resumed ones not counted)
        self.refused = 0  # answer rows and batches of the folder's files not taken as its own
        self._lock = threading.Condition()
        self._queue: list[tuple[str, dict[str, Any], Future[dict[str, Any]]]] = []
        self._first_at: float | None = None
        self._in_flight: dict[str, _InFlight] = {}  # batch id -> batch
        self._by_request: dict[str, str] = {}  # custom id -> batch id, for requests in flight
        self._answers: dict[str, tuple[str, dict[str, Any]]] = {}  # custom id -> (request hash, body)
        self.board = board_for(model_id)
        self._resume()
        _start(self._gather, name=f"ape-batch-{model_id}")

    # -- the ledger --------------------------------------------------------------------------
    def _resume(self) -> None:
        """Load answers collected before, and poll again the batches submitted and not ended
        (each checked at the provider first, :meth:`_check`)."""
        for name in (LEDGER, ANSWERS):  # another user's file (or a link) is none of this run's
            why = not_own_file(self.folder / name)
            if why is not None:
                self._refuse_count(1)
                aside = self.folder / f"{name}.refused"
                (self.folder / name).replace(aside)
                log.warning(
                    "%s of %s: refused, %s; moved aside to %s, its requests are asked again",
                    self.folder / name,
                    self.model_id,
                    why,
                    aside.name,
                )
        rows = _read(self.folder / LEDGER)
        known = {str(row["batch_id"]) for row in rows if row.get("batch_id")}
        closed = {str(row.get("tag")) for row in rows if row.get("event") in {"submitted", "unsent"}}
        for row in rows:  # submits of a killed process that never heard (or wrote) the batch id
            tag = row.get("tag")
            if row.get("event") != "submitting" or tag in closed or row.get("provider") != self.client.provider:
                continue
            if row.get("owner") and _owner(int(str(row["owner"]).split()[0])) == row["owner"]:
                continue  # a live process (another Dask worker) is submitting it: it records it itself
            self._settle(row, known)
        ledger = [row for row in _read(self.folder / LEDGER) if row.get("batch_id")]
        lines = {str(row["batch_id"]): row for row in ledger if row.get("event") == "submitted"}
        trusted = trusted_answers(_read(self.folder / ANSWERS), lines)
        self._answers = trusted.answers
        if trusted.refused:
            reasons = "; ".join(f"{n} {why}" for why, n in sorted(trusted.refused.items()))
            self._refuse_count(sum(trusted.refused.values()))
            log.warning(
                "%s of %s: %d answer row(s) refused (%s); their requests are asked again",
                self.folder / ANSWERS,
                self.model_id,
                sum(trusted.refused.values()),
                reasons,
            )
        submitted = dict(lines)
        for row in ledger:
            if row.get("event") in {"ended", "refused"}:
                submitted.pop(str(row["batch_id"]), None)
        for batch_id, row in submitted.items():
            if row.get("provider") != self.client.provider:
                continue
            ids = {str(c) for c in row.get("custom_ids", [])}
            log.info(
                "batch %s of %s: in flight from an earlier run (%d requests); collecting it",
                batch_id,
                self.model_id,
                len(ids),
            )
            self.board.submitted(batch_id, len(ids), _wall(row.get("at")))
            hashes = {str(k): str(v) for k, v in (row.get("requests") or {}).items()}
            self._track(_InFlight(batch_id, ids, time.monotonic(), hashes=hashes, line=row))

    def _refuse_count(self, n: int) -> None:
        self.refused += n
        self.board.refused(n)

    def _settle(self, intent: dict[str, Any], known: set[str]) -> str | None:
        """Find the batch a ``submitting`` line's submit made, and record it (``submitted``,
        adopted) or record that there is none (``unsent``). Returns the batch id found."""
        tag = str(intent["tag"])
        ids = [str(c) for c in intent.get("custom_ids", [])]
        since = _wall(intent.get("at")) or time.time()
        try:
            batch_id = self.client.find(tag, len(ids), since, known)
        except Exception as exc:  # cannot tell: leave the line open, look again next time
            log.warning("batch submit %s of %s: could not look for it at the provider (%s)", tag, self.model_id, exc)
            return None
        if batch_id is None:
            _append(self.folder / LEDGER, {"event": "unsent", "tag": tag, "at": datetime.now(UTC).isoformat()})
            log.info("batch submit %s of %s: no batch at the provider; its requests go again", tag, self.model_id)
            return None
        _append(
            self.folder / LEDGER,
            {
                "event": "submitted",
                "batch_id": batch_id,
                "tag": tag,
                "provider": self.client.provider,
                "model_id": self.model_id,
                "custom_ids": sorted(ids),
                "requests": intent.get("requests") or {},
                "at": intent.get("at") or datetime.now(UTC).isoformat(),
                "adopted": True,
            },
        )
        known.add(batch_id)
        log.info(
            "batch %s of %s: accepted by the provider but not recorded (the run was stopped); adopted",
            batch_id,
            self.model_id,
        )
        return batch_id

    def _track(self, batch: _InFlight) -> None:
        self._in_flight[batch.batch_id] = batch
        for cid in batch.custom_ids:
            self._by_request[cid] = batch.batch_id
        _start(self._wait_for, batch, name=f"ape-batch-{batch.batch_id}")

    # -- asking --------------------------------------------------------------------------------
    def ask(self, cid: str, body: dict[str, Any]) -> dict[str, Any]:
        """The provider's answer body to request ``body`` (id ``cid``); blocks until it comes.

        Raises :class:`BatchRequestError` for a failed or expired request, or the submit's
        own error (an HTTP error, which the retry policy may retry)."""
        future: Future[dict[str, Any]] = Future()
        digest = request_hash(body)
        self.board.asked_from(current_flow_run_id())
        with self._lock:
            answered = self._answers.get(cid)
            if answered is not None and answered[0] == digest:
                return answered[1]
            if answered is not None:  # a row for this id, but for another request: not this one's answer
                del self._answers[cid]
            batch_id = self._by_request.get(cid)
            batch = self._in_flight.get(batch_id) if batch_id is not None else None
            if batch is not None and batch.hashes.get(cid, digest) == digest:
                batch.waiters.setdefault(cid, []).append((body, future))
            else:
                if not self._queue:
                    self._first_at = time.monotonic()
                self._queue.append((cid, body, future))
                self._lock.notify_all()
        if answered is not None:  # counted outside the lock: the board may write its artifact
            self._refuse_count(1)
            log.warning(
                "%s of %s: the answer row of %s is for another request body; asked again",
                self.folder / ANSWERS,
                self.model_id,
                cid,
            )
        return future.result()

    def _gather(self) -> None:
        while True:
            with self._lock:
                while True:
                    if self._queue:
                        assert self._first_at is not None
                        left = self._first_at + self.settings.wait_s - time.monotonic()
                        if len(self._queue) >= self.settings.size or left <= 0:
                            break
                        self._lock.wait(left)
                    else:
                        self._lock.wait()
                taken, self._queue = self._queue[: self.settings.size], self._queue[self.settings.size :]
                self._first_at = time.monotonic() if self._queue else None
            self._submit(taken)

    def _submit(self, taken: list[tuple[str, dict[str, Any], Future[dict[str, Any]]]]) -> None:
        requests: dict[str, dict[str, Any]] = {}
        for cid, body, _ in taken:
            requests.setdefault(cid, body)  # the same request twice in a gathering: sent once
        tag = "ape-" + uuid.uuid4().hex
        intent = {
            "event": "submitting",
            "tag": tag,
            "provider": self.client.provider,
            "model_id": self.model_id,
            "custom_ids": sorted(requests),
            "requests": {cid: request_hash(body) for cid, body in sorted(requests.items())},
            "at": datetime.now(UTC).isoformat(),
            "owner": _owner(os.getpid()),
        }
        # recorded before the provider hears of it: a kill after its accept is found by the tag
        _append(self.folder / LEDGER, intent)
        found: str | None = None
        try:
            batch_id = self.client.submit(list(requests.items()), tag)
        except Exception as exc:  # the sessions see the HTTP error; the retry policy decides
            # an answer lost to a timeout may hide an accepted batch: look before anyone retries
            if classify_error(exc) == "transient":
                known = {str(row["batch_id"]) for row in _read(self.folder / LEDGER) if row.get("batch_id")}
                found = self._settle(intent, known)
            else:  # refused (a 400, a 401): no batch was made
                _append(self.folder / LEDGER, {"event": "unsent", "tag": tag, "at": datetime.now(UTC).isoformat()})
            if found is None:
                for _, _, future in taken:
                    future.set_exception(exc)
                return
            batch_id = found
        else:
            if os.environ.get(KILL_AFTER_SUBMIT):
                os.kill(os.getpid(), signal.SIGKILL)
            self._write_submitted(batch_id, tag, requests)
        self.submissions += 1
        log.info("batch %s of %s: submitted, %d requests", batch_id, self.model_id, len(requests))
        self.board.submitted(batch_id, len(requests))
        hashes = {cid: request_hash(body) for cid, body in requests.items()}
        batch = _InFlight(batch_id, set(requests), time.monotonic(), hashes=hashes)
        if found is not None:  # found at the provider, not told by it: checked like a ledger's batch
            batch.line = {"custom_ids": sorted(requests), "tag": tag, "requests": hashes}
        for cid, body, future in taken:
            batch.waiters.setdefault(cid, []).append((body, future))
        with self._lock:
            self._track(batch)

    def _write_submitted(self, batch_id: str, tag: str, requests: dict[str, dict[str, Any]]) -> None:
        # recorded before any session hears of the batch: a kill from here on resumes it
        _append(
            self.folder / LEDGER,
            {
                "event": "submitted",
                "batch_id": batch_id,
                "tag": tag,
                "provider": self.client.provider,
                "model_id": self.model_id,
                "custom_ids": sorted(requests),
                "requests": {cid: request_hash(body) for cid, body in sorted(requests.items())},
                "at": datetime.now(UTC).isoformat(),
            },
        )

    # -- waiting -------------------------------------------------------------------------------
    def _wait_for(self, batch: _InFlight) -> None:
        delay = self.settings.poll_s
        cap = max(MAX_POLL_S, self.settings.poll_s)
        shown: tuple[str, tuple[tuple[str, int], ...]] | None = None
        while True:
            if batch.line is not None:  # from the ledger: the provider must show it is this folder's
                try:
                    checked = self._check(batch, self.client.describe(batch.batch_id))
                except Exception as exc:
                    if classify_error(exc) == "transient":
                        log.warning(
                            "batch %s of %s: reading it at the provider failed (%s); trying again",
                            batch.batch_id,
                            self.model_id,
                            exc,
                        )
                        time.sleep(delay)
                        delay = min(delay * 1.5, cap)
                        continue
                    self._refuse(batch, f"the provider's description of it could not be read ({exc})")
                    return
                if not checked:
                    return
            time.sleep(delay)
            delay = min(delay * 1.5, cap)
            try:
                state = self.client.poll(batch.batch_id)
            except Exception as exc:
                if classify_error(exc) == "transient":
                    log.warning("batch %s of %s: polling failed (%s); trying again", batch.batch_id, self.model_id, exc)
                    continue
                self._finish(batch, None, f"polling the batch failed: {exc}")
                return
            now = (state.status, tuple(sorted(state.counts.items())))
            self.board.polled(batch.batch_id, state.status, state.counts, ended=False)
            if now != shown:
                shown = now
                counts = ", ".join(f"{k} {v}" for k, v in sorted(state.counts.items())) or "no counts"
                age = time.monotonic() - batch.submitted_at
                log.info(
                    "batch %s of %s: %s (%s), age %.0f s", batch.batch_id, self.model_id, state.status, counts, age
                )
            if state.ended:
                self._collect(batch, state)
                return

    def _collect(self, batch: _InFlight, state: BatchState) -> None:
        try:
            results = self.client.results(batch.batch_id)
        except Exception as exc:
            if classify_error(exc) == "transient":  # poll again, then ask for the results again
                log.warning(
                    "batch %s of %s: fetching results failed (%s); trying again", batch.batch_id, self.model_id, exc
                )
                _start(self._wait_for, batch, name=f"ape-batch-{batch.batch_id}")
                return
            self._finish(batch, None, f"fetching the batch's results failed: {exc}")
            return
        if batch.check_results and not self._check(
            batch, ProviderBatch(tags_shown=False, requests=dict.fromkeys(results, None))
        ):
            return
        with self._lock:
            for cid, waiting in batch.waiters.items():  # a request asked now has its hash known
                batch.hashes.setdefault(cid, request_hash(waiting[0][0]))
        for cid, result in results.items():
            if cid in batch.custom_ids and result.body is not None:
                row = {"custom_id": cid, "batch_id": batch.batch_id, "body": result.body}
                _append(self.folder / ANSWERS, {**row, "request_hash": batch.hashes.get(cid)})
        _append(
            self.folder / LEDGER,
            {
                "event": "ended",
                "batch_id": batch.batch_id,
                "status": state.status,
                "counts": state.counts,
                "at": datetime.now(UTC).isoformat(),
            },
        )
        self._finish(batch, results, state.error or f"the batch ended '{state.status}' without this request")

    def _check(self, batch: _InFlight, shown: ProviderBatch) -> bool:
        """Whether the provider's description (``shown``) shows the ledger's batch holds this folder's
        requests; a batch it does not is refused (:meth:`_refuse`). A provider that shows no
        requests yet (Anthropic, before the end) is asked again with the results."""
        assert batch.line is not None or batch.check_results
        line = batch.line or {"custom_ids": sorted(batch.custom_ids), "requests": batch.hashes}
        reason = batch_refusal(line, shown)
        if reason is not None:
            self._refuse(batch, reason)
            return False
        batch.check_results = shown.requests is None
        for cid, digest in (shown.requests or {}).items():
            if digest:
                batch.hashes.setdefault(cid, digest)
        if batch.line is not None and not batch.check_results:
            log.info("batch %s of %s: the provider shows this folder's requests", batch.batch_id, self.model_id)
        batch.line = None
        return True

    def _refuse(self, batch: _InFlight, reason: str) -> None:
        """Not this folder's batch: one warning, counted, a ``refused`` ledger line (the next
        run does not look again), and its waiting requests go to the next batch."""
        log.warning(
            "batch %s of %s (from %s): refused, %s; its requests are asked again",
            batch.batch_id,
            self.model_id,
            self.folder / LEDGER,
            reason,
        )
        self._refuse_count(1)
        refused = {"event": "refused", "batch_id": batch.batch_id, "reason": reason}
        _append(self.folder / LEDGER, {**refused, "at": datetime.now(UTC).isoformat()})
        self.board.ended(batch.batch_id, "refused")
        with self._lock:
            self._in_flight.pop(batch.batch_id, None)
            for cid in batch.custom_ids:
                if self._by_request.get(cid) == batch.batch_id:
                    self._by_request.pop(cid, None)
            for cid, waiting in batch.waiters.items():
                for body, future in waiting:
                    if not self._queue:
                        self._first_at = time.monotonic()
                    self._queue.append((cid, body, future))
            batch.waiters.clear()
            self._lock.notify_all()

    def _finish(self, batch: _InFlight, results: dict[str, RequestResult] | None, missing: str) -> None:
        """Resolve every waiter of ``batch``: answered, or failed with the provider's message."""
        self.board.ended(batch.batch_id)
        with self._lock:
            self._in_flight.pop(batch.batch_id, None)
            for cid in batch.custom_ids:
                if self._by_request.get(cid) == batch.batch_id:  # not a later batch's, asked again
                    self._by_request.pop(cid, None)
                result = (results or {}).get(cid)
                if result is not None and result.body is not None and cid in batch.hashes:
                    self._answers[cid] = (batch.hashes[cid], result.body)
            waiters = dict(batch.waiters)
        for cid, waiting in waiters.items():
            result = (results or {}).get(cid)
            for _, future in waiting:
                if result is not None and result.body is not None:
                    future.set_result(result.body)
                else:
                    reason = result.error if result is not None and result.error else missing
                    note = " (ape retry redoes it)" if result is None or result.expired else ""
                    future.set_exception(BatchRequestError(f"batch {batch.batch_id}: {reason}{note}"))


def _start(target: Any, *args: Any, name: str) -> None:
    """A daemon thread for the batcher, run in the context of the code that started it: the
    model's flow run, so the batch's lines (submitted, waiting, collected) reach that flow
    run's logs in the UI. A thread without it made Prefect print "attempted to send logs to
    the API without a flow run id" on the terminal and kept the lines from the UI."""
    threading.Thread(target=contextvars.copy_context().run, args=(target, *args), name=name, daemon=True).start()


_registry: dict[tuple[str, str], Batcher] = {}
_registry_lock = threading.Lock()


def batcher_for(model_id: str, folder: Path, make_client: Any, settings: BatchSettings) -> Batcher:
    """The process's batcher of ``model_id`` writing into ``folder`` (made on first use), so
    every solver worker's model instance feeds the same batches."""
    key = (model_id, str(folder.resolve()))
    with _registry_lock:
        batcher = _registry.get(key)
        if batcher is None:
            folder.mkdir(parents=True, exist_ok=True)
            batcher = _registry[key] = Batcher(model_id, folder, make_client(), settings)
        return batcher
