"""The format of a cached generation: JSON data that APE validates itself, never code.

Why: a cache record (``OUTPUT/.cache/<key>``) names the serializer its result file was
written with, and Prefect deserializes with whatever the record names. With Prefect's
default (``pickle``/``cloudpickle``) a copied output folder whose cache files were replaced
by a pickle whose ``__reduce__`` runs code ran that code once per item on resume. Even
Prefect's ``json`` serializer is no defence when the record chooses it: the record also
names the JSON library and the decoder to import (``"jsonlib": "pickle"`` is a pickle), and
Prefect imports a named ``picklelib`` just to validate the record's metadata.

So APE writes its model stages' results with :class:`RecordSerializer` (the pydantic
record as JSON, in an envelope saying which record it is), and every read of the cache,
APE's own (:mod:`ape.tasks.session.cache`) and Prefect's task engine's (through
:class:`ape.tasks.storage.prefect_internals.CacheRecords`), first reads the record's raw bytes itself
(:func:`checked_record`): a record that is not JSON, that names any serializer but exactly
APE's, or whose result file does not validate as APE's record, is refused before anything
is handed to Prefect or pickle. A refused record is a miss (the session is redone and its
record written anew), counted and warned once per run (:data:`REFUSED`).
"""

from __future__ import annotations

import json
import logging
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from prefect.serializers import Serializer
from prefect.settings import get_current_settings
from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from ape.schemas.errors import first_problem
from ape.schemas.transcript import SolveRecord, SolverState

log = logging.getLogger("ape")

SERIALIZER = "ape-record-json"
"""The only serializer name a cache record may carry to be read."""


class _SolveEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["solve-record"] = "solve-record"
    value: SolveRecord


class _StateEntry(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["solver-state"] = "solver-state"
    value: SolverState


_ENTRY: TypeAdapter[_SolveEntry | _StateEntry] = TypeAdapter(
    Annotated[_SolveEntry | _StateEntry, Field(discriminator="kind")]
)


class RecordSerializer(Serializer):
    """A model stage's result (:class:`SolveRecord` or :class:`SolverState`) as JSON.

    Prefect looks serializers up by ``type``, so defining this class registers it; it
    imports nothing a record names. A value that is not JSON (an object in a transcript
    entry's data) is written as its ``str`` rather than failing the session's write.
    """

    type: str = Field(default=SERIALIZER, frozen=True)

    def dumps(self, obj: Any) -> bytes:
        if isinstance(obj, SolveRecord):
            entry: _SolveEntry | _StateEntry = _SolveEntry(value=obj)
        elif isinstance(obj, SolverState):
            entry = _StateEntry(value=obj)
        else:
            raise TypeError(f"the cache keeps model stage records, not {type(obj).__name__}")
        return _ENTRY.dump_json(entry, fallback=str)

    def loads(self, blob: bytes) -> Any:
        return _ENTRY.validate_json(blob).value


class _Metadata(BaseModel):
    """What APE reads of a cache record (Prefect's ``ResultRecordMetadata``), strictly."""

    model_config = ConfigDict(extra="forbid")

    storage_key: str
    expiration: datetime | None = None
    serializer: dict[str, Any]
    prefect_version: str | None = None
    storage_block_id: str | None = None


class ForeignRecord(Exception):
    """A cache record APE does not read (not its JSON record): a miss, never deserialized."""


class Expired(Exception):
    """A cache record past its expiration: a plain miss."""


def checked_record(content: bytes, where: str) -> tuple[bytes, Any]:
    """(the record as Prefect should read it, the value of its result file) for the raw
    bytes of a cache record; :class:`ForeignRecord` when it is not APE's JSON record.

    The record's result path is first pointed into the folder results are read from now
    (:func:`relocated`), so a copied or moved output folder reads its own results. Nothing
    here imports or calls what the record names."""
    try:
        raw = json.loads(content)
    except ValueError:
        raise ForeignRecord(f"{where} is not JSON") from None
    if not isinstance(raw, dict):
        raise ForeignRecord(f"{where} is not a cache record")
    serializer = raw.get("serializer")
    if serializer != {"type": SERIALIZER}:
        named = serializer.get("type") if isinstance(serializer, dict) else serializer
        raise ForeignRecord(f"{where} names serializer {str(named)[:40]!r}, not APE's {SERIALIZER!r}")
    try:
        meta = _Metadata.model_validate(raw)
    except ValidationError as exc:
        raise ForeignRecord(f"{where} is not a valid cache record: {first_problem(exc)}") from None
    if meta.expiration is not None and meta.expiration.astimezone(UTC) <= datetime.now(UTC):
        raise Expired(where)
    if meta.storage_block_id is not None:
        # a result kept in a storage block the user configured: Prefect reads it, with APE's serializer
        return content, None
    record = relocated(raw)
    try:
        blob = Path(record["storage_key"]).read_bytes()
    except OSError as exc:
        raise FileNotFoundError(f"{where}: its result file is not there ({exc.strerror})") from None
    try:
        value = RecordSerializer().loads(blob)
    except ValidationError as exc:
        raise ForeignRecord(f"{where}: its result file is not APE's JSON record ({first_problem(exc)})") from None
    return (content if record is raw else json.dumps(record).encode()), value


def relocated(record: dict[str, Any]) -> dict[str, Any]:
    """A cache record whose result path points into the folder results are read from now.

    Prefect's record names its result file by its absolute path; after ``cp -r out copy``
    or ``mv`` that path is the old folder's (or gone). A record whose result path lies
    outside the current local result storage (``PREFECT_LOCAL_STORAGE_PATH``, which ``ape
    run`` points at the output folder's ``.cache/results``) names the file of the same name
    in that storage instead, when it is there. Unchanged (the same dict) otherwise."""
    key = record.get("storage_key")
    if not isinstance(key, str) or record.get("storage_block_id") is not None or not Path(key).is_absolute():
        return record
    base = Path(get_current_settings().results.local_storage_path).expanduser().resolve()
    recorded = Path(key)
    if base in recorded.parents:
        return record
    here = base / recorded.name
    if not here.is_file():
        return record  # nothing to point at: reported as it is
    return {**record, "storage_key": str(here)}


class Refusals:
    """Refused cache records, counted per cache folder: the first of a run is a warning,
    the rest only counted, so a folder of planted (or old pickle) records is one line, not
    one per session; the run's end reports the count (:meth:`take`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[str, int] = {}

    def start(self, folder: Path) -> None:
        """A run begins on ``folder``: its count starts at zero and its first refusal warns."""
        with self._lock:
            self._counts[str(folder)] = 0

    def note(self, folder: Path | str, reason: str) -> None:
        with self._lock:
            count = self._counts.get(str(folder), 0) + 1
            self._counts[str(folder)] = count
        if count == 1:
            log.warning(
                "cache: refused %s; a cache record is read only as APE's JSON record, never "
                "unpickled or imported, so its session is redone (an older APE's pickle "
                "cache, or a planted file); further refusals this run are counted",
                reason,
            )

    def take(self, folder: Path) -> int:
        """How many records of ``folder`` were refused since :meth:`start`; resets it."""
        with self._lock:
            return self._counts.pop(str(folder), 0)


REFUSED = Refusals()
"""The process's tally (a Dask worker process keeps its own and warns in its own log)."""
