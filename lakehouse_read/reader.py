"""Read-only access to the lakehouse's Delta tables for the API and the dashboards, without a JVM.

Each table is opened once with delta-rs and re-checked for a new version at most every `refresh_s`
seconds, so a burst of requests costs one log read per table, not one per request. Whole-table reads
are cached per (table, version, columns): a request on an unchanged table is served from memory.
Large time series are never read whole: `scan` pushes filters down to file and row-group statistics
(lakehouse_read/cluster_state.py finds each cluster's newest snapshot from the files' statistics alone).

Only the known layers under the configured root are reachable: a name is `<layer>.<table>` with
both parts plain identifiers, so no request can point the reader at another path.
"""

from __future__ import annotations

import itertools
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.dataset as ds
from deltalake import DeltaTable
from deltalake.exceptions import TableNotFoundError

from foundation.object_store import is_object_store, storage_options
from schemas.registry import EVERY_TABLE

LAYERS = ("bronze", "silver", "quarantine", "gold", "api")
_NAME = re.compile(r"^(bronze|silver|quarantine|gold|api)\.([a-z_][a-z0-9_]*)$")


T = TypeVar("T")
_SERIALS = itertools.count()


class UnknownTable(LookupError):
    """A table name that is malformed, outside the lakehouse's layers, or not created yet."""


@dataclass
class _Cached:
    table: DeltaTable
    version: int
    checked: float
    frames: dict[tuple[str, ...] | None, pa.Table] = field(default_factory=dict)
    derived: dict[str, Any] = field(default_factory=dict)
    latest: dict[str, datetime | None] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


class LakehouseReader:
    def __init__(self, root: str | Path, *, refresh_s: float = 1.0) -> None:
        self.root = str(root).rstrip("/")
        self.refresh_s = refresh_s
        # Names this reader in caches kept beyond it (an id() could be reused by a later reader).
        self.serial = next(_SERIALS)
        self._tables: dict[str, _Cached] = {}
        self._lock = threading.Lock()

    # -- discovery --------------------------------------------------------------------------------------
    def path(self, name: str) -> str:
        m = _NAME.match(name)
        if not m:
            raise UnknownTable(f"unknown table {name!r}: expected <layer>.<table> with layer one of "
                               f"{', '.join(LAYERS)}")
        return f"{self.root}/{m.group(1)}/{m.group(2)}"

    def tables(self) -> list[str]:
        """Every Delta table present under the root, as `<layer>.<table>`, sorted."""
        if is_object_store(self.root):
            # No folders to list on an object store: every table isrwatch defines, where one exists.
            return sorted(td.qualified_name for td in EVERY_TABLE if self.exists(td.qualified_name))
        if "://" in self.root:
            return sorted(n for n in self._tables)
        base = Path(self.root)
        found = []
        for layer in LAYERS:
            d = base / layer
            if d.is_dir():
                found += [f"{layer}.{t.name}" for t in d.iterdir()
                          if (t / "_delta_log").is_dir() and _NAME.match(f"{layer}.{t.name}")]
        return sorted(found)

    def exists(self, name: str) -> bool:
        try:
            self._handle(name)
            return True
        except UnknownTable:
            return False

    # -- reads ------------------------------------------------------------------------------------------
    def version(self, name: str) -> int:
        return self._handle(name).version

    def version_or_none(self, name: str) -> int | None:
        """The table's version, None while it does not exist (a cache key that changes once it appears)."""
        try:
            return self.version(name)
        except UnknownTable:
            return None

    def delta_table(self, name: str) -> DeltaTable:
        """The current DeltaTable (for the SQL endpoint's DataFusion registration)."""
        return self._handle(name).table

    def read(self, name: str, columns: list[str] | None = None) -> pa.Table:
        """The whole table (selected columns), cached until the table's version changes."""
        c = self._handle(name)
        key = None if columns is None else tuple(columns)
        with c.lock:
            hit = c.frames.get(key)
        if hit is not None:
            return hit
        data = c.table.to_pyarrow_table(columns=columns)
        with c.lock:
            c.frames[key] = data
        return data

    def derive(self, name: str, key: str, compute: Callable[[LakehouseReader], T]) -> T:
        """`compute(self)`, remembered until `name` changes version: for views derived from a table (JSON
        rows, indexes) that many requests share."""
        c = self._handle(name)
        with c.lock:
            if key in c.derived:
                return c.derived[key]
        result = compute(self)
        with c.lock:
            c.derived[key] = result
        return result

    def scan(self, name: str, filter: ds.Expression | None = None, columns: list[str] | None = None) -> pa.Table:
        """Rows matching `filter`; files and row groups whose statistics exclude it are not read."""
        c = self._handle(name)
        return c.table.to_pyarrow_dataset().to_table(filter=filter, columns=columns)

    # -- cache ------------------------------------------------------------------------------------------
    def _handle(self, name: str) -> _Cached:
        path = self.path(name)
        now = time.monotonic()
        c = self._tables.get(name)
        if c is not None and now - c.checked < self.refresh_s:
            return c
        with self._lock:
            c = self._tables.get(name)
            if c is not None and now - c.checked < self.refresh_s:
                return c
            # A fresh handle rather than update_incremental(): reads in flight keep the old snapshot.
            try:
                table = DeltaTable(path, storage_options=storage_options(path))
            except TableNotFoundError:
                raise UnknownTable(f"table {name} does not exist yet under {self.root}") from None
            if c is not None and table.version() == c.version:
                c.checked = now
                return c
            c = _Cached(table, table.version(), now)
            self._tables[name] = c
            return c
