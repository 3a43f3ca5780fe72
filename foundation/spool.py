"""A durable directory of numbered entries, on the local disk or an S3-compatible store: work a job has accepted
and not finished yet, found again after a crash.

An entry is a few Arrow tables and a JSON manifest. The manifest is written last, and atomically (a rename on a
local disk, a single put on a store), so an entry is either listed whole or not at all: a process killed while
writing one leaves no entry, only files the next `put` of that number overwrites.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.ipc as ipc

from foundation import object_store

MANIFEST = "manifest.json"


def _filesystem(uri: str) -> tuple[pafs.FileSystem, str]:
    parts = urlsplit(uri)
    if parts.scheme in ("", "file"):
        return pafs.LocalFileSystem(), os.path.abspath(parts.path if parts.scheme else uri)
    if not object_store.is_object_store(uri):
        raise ValueError(f"spool at {uri!r}: only a local path or an s3:// / s3a:// URI can hold it")
    store = object_store.current()
    env = os.environ
    fs = pafs.S3FileSystem(access_key=env.get("AWS_ACCESS_KEY_ID"), secret_key=env.get("AWS_SECRET_ACCESS_KEY"),
                           session_token=env.get("AWS_SESSION_TOKEN"), region=store.region,
                           endpoint_override=store.endpoint, scheme="http" if store.plain_http else "https",
                           force_virtual_addressing=not store.path_style)
    return fs, f"{parts.netloc}{parts.path}".rstrip("/")


@dataclass
class Spool:
    uri: str

    def __post_init__(self) -> None:
        self.fs, self.root = _filesystem(self.uri)

    def _dir(self, number: int) -> str:
        return f"{self.root}/{number:012d}"

    def put(self, number: int, tables: dict[str, pa.Table], manifest: dict[str, Any]) -> None:
        where = self._dir(number)
        self.fs.create_dir(where, recursive=True)
        for name, table in tables.items():
            with self.fs.open_output_stream(f"{where}/{name}.arrow") as out, ipc.new_file(out, table.schema) as w:
                w.write_table(table)
        with self.fs.open_output_stream(f"{where}/{MANIFEST}.tmp") as out:
            out.write(json.dumps(manifest).encode())
        self.fs.move(f"{where}/{MANIFEST}.tmp", f"{where}/{MANIFEST}")

    def numbers(self) -> list[int]:
        """The complete entries, in order."""
        selector = pafs.FileSelector(self.root, allow_not_found=True, recursive=True)
        return sorted(int(info.path.rsplit("/", 2)[-2]) for info in self.fs.get_file_info(selector)
                      if info.path.endswith(f"/{MANIFEST}"))

    def get(self, number: int) -> tuple[dict[str, pa.Table], dict[str, Any]]:
        where = self._dir(number)
        with self.fs.open_input_stream(f"{where}/{MANIFEST}") as f:
            manifest = json.loads(f.read())
        tables = {}
        for info in self.fs.get_file_info(pafs.FileSelector(where)):
            if info.path.endswith(".arrow"):
                with self.fs.open_input_file(info.path) as f:
                    tables[info.base_name.removesuffix(".arrow")] = ipc.open_file(f).read_all()
        return tables, manifest

    def remove(self, number: int) -> None:
        self.fs.delete_dir(self._dir(number))
