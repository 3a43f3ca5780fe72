"""Lakehouses on an S3-compatible object store (`s3://` and `s3a://` roots): one description for both engines.

delta-rs (the emulator, the collector, the gold jobs, the API, `isrwatch sql`) takes it as storage options;
Spark's S3A connector (the validate job's reads and writes) as `spark.hadoop.fs.s3a.*` settings. Both accept
either scheme, so one root serves every process.

Where it comes from: the endpoint and region from `storage:` in conf/pipeline.yaml for the jobs, else from
the AWS SDK's own variables (`AWS_ENDPOINT_URL`, `AWS_REGION`), which is how the emulator and the collector
are pointed at a store; the credentials only from the environment (`AWS_ACCESS_KEY_ID`,
`AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`), never from a file that gets committed.

Commits: delta-rs writes each `_delta_log/N.json` with a conditional put (`If-None-Match: *`), so concurrent
delta-rs writers of one table are safe on any store that enforces it (AWS S3, MinIO, s3proxy 4). Spark's
S3A LogStore (`S3SingleDriverLogStore`) is not: a table Spark writes must have one Spark writer and no other.
isrwatch keeps it so: validate alone writes silver, quarantine and dq_runs; nothing else writes them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

import pyarrow.fs as pafs

SCHEMES = ("s3", "s3a")
LOCAL_SCHEMES = ("", "file")


class UnsupportedLakehouse(ValueError):
    """A lakehouse root on a file system isrwatch cannot read and write from every process."""


def is_object_store(uri: str) -> bool:
    return urlsplit(uri).scheme in SCHEMES


def check_root(uri: str) -> str:
    """`uri` itself, if isrwatch can keep a lakehouse there: a local path (or file: URI) or an S3-compatible store.
    Any other scheme is refused: the collector, the emulator, the alert lane and the API read and write bronze
    and gold with delta-rs and pyarrow, which get no credentials or file system from a Spark cluster's
    configuration, so a root only Spark could reach would leave them writing or reading nothing."""
    # A URI names its scheme before "://" (or is file:); a local folder's name may hold a colon ("lake:2026").
    scheme = urlsplit(uri).scheme if "://" in uri or uri.startswith("file:") else ""
    if scheme not in LOCAL_SCHEMES + SCHEMES:
        raise UnsupportedLakehouse(
            f"lakehouse {uri!r}: the {scheme}:// scheme is not supported; a lakehouse is a local path (or file:) or "
            f"an S3-compatible store ({', '.join(s + '://' for s in SCHEMES)}), which every isrwatch process reads "
            "and writes")
    return uri


@dataclass(frozen=True)
class ObjectStore:
    """Where an S3-compatible store answers. `endpoint` None: AWS itself (the region's endpoint)."""

    endpoint: str | None = None
    region: str = "us-east-1"
    path_style: bool = True     # bucket in the path, not the host name: what MinIO and s3proxy expect

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ) -> ObjectStore:
        return cls(endpoint=environ.get("AWS_ENDPOINT_URL") or None,
                   region=environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION") or "us-east-1")

    @property
    def plain_http(self) -> bool:
        return self.endpoint is not None and self.endpoint.startswith("http://")

    def delta_rs_options(self, environ: Mapping[str, str] = os.environ) -> dict[str, str]:
        options = {"AWS_REGION": self.region, "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": str(not self.path_style).lower(),
                   # Explicit, though delta-rs's default: each commit is a put that fails if N.json exists.
                   "aws_conditional_put": "etag"}
        if self.endpoint:
            options["AWS_ENDPOINT_URL"] = self.endpoint
        if self.plain_http:
            options["AWS_ALLOW_HTTP"] = "true"
        options.update({k: environ[k] for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN")
                        if environ.get(k)})
        return options

    def pyarrow_filesystem(self, environ: Mapping[str, str] = os.environ) -> pafs.S3FileSystem:
        """pyarrow's S3 file system on this store, with the environment's credentials."""
        endpoint = urlsplit(self.endpoint) if self.endpoint else None
        return pafs.S3FileSystem(
            access_key=environ.get("AWS_ACCESS_KEY_ID") or None,
            secret_key=environ.get("AWS_SECRET_ACCESS_KEY") or None,
            session_token=environ.get("AWS_SESSION_TOKEN") or None, region=self.region,
            endpoint_override=endpoint.netloc if endpoint else None, scheme=endpoint.scheme if endpoint else "https",
            force_virtual_addressing=not self.path_style)

    def spark_confs(self) -> dict[str, str]:
        confs = {"spark.hadoop.fs.s3a.endpoint.region": self.region,
                 "spark.hadoop.fs.s3a.path.style.access": str(self.path_style).lower(),
                 # Hadoop maps no file system to s3:// by itself: the same connector serves both schemes.
                 "spark.hadoop.fs.s3.impl": "org.apache.hadoop.fs.s3a.S3AFileSystem"}
        if self.endpoint:
            confs["spark.hadoop.fs.s3a.endpoint"] = self.endpoint
            confs["spark.hadoop.fs.s3a.connection.ssl.enabled"] = str(not self.plain_http).lower()
        # No credentials here: S3A's default chain reads AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (and
        # AWS_SESSION_TOKEN) from the environment, and a setting would put the secret on a command line.
        return confs

    @staticmethod
    def credential_confs(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
        """The environment's credentials as S3A settings, for executors on other machines, whose environment
        is their worker's. Spark sends them to executors over its RPC, not on a command line; its UI and logs
        redact them (`spark.redaction.regex` matches `secret` and `access.key`). Write them only to a file
        readable by its owner (`isrwatch submit` does)."""
        names = {"AWS_ACCESS_KEY_ID": "access.key", "AWS_SECRET_ACCESS_KEY": "secret.key",
                 "AWS_SESSION_TOKEN": "session.token"}
        return {f"spark.hadoop.fs.s3a.{key}": environ[name] for name, key in names.items() if environ.get(name)}


# The store this process's lakehouse is on. A job sets it from its settings at start-up (`use`); every other
# process reads the environment. One per process: a process works on one lakehouse.
_store: ObjectStore | None = None


def use(store: ObjectStore | None) -> None:
    global _store
    _store = store


def current() -> ObjectStore:
    return _store if _store is not None else ObjectStore.from_environment()


def lake_filesystem(uri: str, store: ObjectStore | None = None) -> tuple[pafs.FileSystem, str]:
    """pyarrow's file system for a lakehouse root (`store`, else this process's, for one on an object store) and the
    root's path on it."""
    parts = urlsplit(check_root(uri))
    if parts.scheme in SCHEMES:
        return (store or current()).pyarrow_filesystem(), f"{parts.netloc}{parts.path}".rstrip("/")
    if parts.scheme == "file":
        return pafs.LocalFileSystem(), parts.path.rstrip("/")
    return pafs.LocalFileSystem(), os.path.abspath(uri)


def storage_options(uri: str) -> dict[str, str] | None:
    """delta-rs storage options for a table or root at `uri`: None for a local one."""
    return current().delta_rs_options() if is_object_store(uri) else None
