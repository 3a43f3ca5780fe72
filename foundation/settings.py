"""Pipeline settings: conf/pipeline.yaml, validated at start-up with errors naming file, key and value."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, PlainSerializer, ValidationError, field_validator

from foundation import object_store
from foundation.durations import parse_duration
from foundation.object_store import ObjectStore
from foundation.yaml_file import read_yaml
from schemas.bronze import BRONZE_TABLES

DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "conf" / "pipeline.yaml"
JOB_SECTIONS = ("validate", "alerts", "posture", "slo")


class SettingsError(ValueError):
    """Raised when a settings file or override is malformed: names the file, the key and the value."""


def spark_interval(d: dt.timedelta) -> str:
    """A duration as Spark's triggers and watermarks take it."""
    return f"{round(d / dt.timedelta(milliseconds=1))} milliseconds"


def _duration(value: Any) -> dt.timedelta:
    return value if isinstance(value, dt.timedelta) else parse_duration(value)


# Every duration setting: written as text with its unit, held as a timedelta, parsed once at load.
Duration = Annotated[dt.timedelta, BeforeValidator(_duration), PlainSerializer(spark_interval, return_type=str)]


def seconds(value: float) -> str:
    """A command line's seconds as a duration setting."""
    return f"{value} seconds"


class JobSettings(BaseModel):
    """What every streaming job (validate, alerts, posture, slo) shares; the file's `defaults` section sets them for
    every job whose own section does not."""

    model_config = ConfigDict(extra="forbid")

    trigger: Literal["live", "available-now"] = "live"
    trigger_interval: Duration = dt.timedelta(seconds=60)
    max_files_per_trigger: int = Field(default=1000, ge=1)
    maintain_every_batches: int = Field(default=600, ge=1)
    wait_for_tables: Duration = dt.timedelta(seconds=300)  # at start-up, for the tables a job reads to appear
    # A micro-batch of more rows (a catch-up) is not collected to the driver: validate checks it on the executors
    # (but for its small tables), the alerts and slo jobs evaluate it cluster by cluster there. Bounds driver memory.
    driver_max_rows: int = Field(default=500_000, ge=0)


class ValidateSettings(JobSettings):
    tables: list[str] = Field(default_factory=lambda: [td.name for td in BRONZE_TABLES])
    trigger_interval: Duration = dt.timedelta(seconds=10)
    dedup_window: Duration = dt.timedelta(minutes=10)
    counter_lookback: Duration = dt.timedelta(minutes=2)
    vacuum_retention: Duration = dt.timedelta(hours=168)
    wait_for_tables: Duration = dt.timedelta(seconds=120)

    @field_validator("tables")
    @classmethod
    def _known_tables(cls, v: list[str]) -> list[str]:
        known = [td.name for td in BRONZE_TABLES]
        unknown = [t for t in v if t not in known]
        if unknown or not v:
            raise ValueError(f"unknown bronze tables {unknown or v}; known: {', '.join(known)}")
        return v


class AlertsSettings(JobSettings):
    rules: str | None = None            # default conf/alerts.yaml
    webhooks: bool = True
    # The alert lane (jobs/alert_lane.py) evaluates the rules on silver tables over the bronze commit logs: with a live
    # validate, micro-batches back to back, an idle lane looking for new commits every `lane_trigger_interval`.
    lane_trigger_interval: Duration = dt.timedelta(milliseconds=100)


class PostureSettings(JobSettings):
    # p: probability that one broker loses its copy of a partition in the window you reason about (the
    # seed's worked example uses 2 % per server-year).
    failure_probability: float = Field(default=0.02, gt=0, lt=1)


class SloSettings(JobSettings):
    specs: str | None = None            # default conf/slos.yaml


class ApiSettings(BaseModel):
    """`isrwatch serve`: the HTTP API and dashboards. The bearer token comes from ISRWATCH_API_TOKEN, never a
    file, so it is not committed with the configuration."""

    model_config = ConfigDict(extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=1, le=65535)
    read_auth: bool = False
    refresh: Duration = dt.timedelta(seconds=1)                # how often the API looks for new table versions
    dashboard_refresh: Duration = dt.timedelta(seconds=5)
    dashboard_prebuild: Duration = dt.timedelta(seconds=5)     # 0 seconds: figures built only when asked for
    query_max_rows: int = Field(default=10_000, ge=1)
    query_timeout: Duration = dt.timedelta(seconds=10)
    query_auth: bool = False            # POST /api/v1/query needs the token even when read_auth is off
    query_workers: int = Field(default=2, ge=1, le=64)
    query_spare_worker: bool = True     # one more started ahead, to replace a killed or crashed worker at once
    query_worker_memory_mb: int = Field(default=1024, ge=0)   # 0: no limit but DataFusion's 512 MiB pool
    query_wait: Duration = dt.timedelta(seconds=2)
    query_max_per_client: int = Field(default=1, ge=1)
    query_max_bytes: int = Field(default=65_536, ge=1, le=100_000)   # the request's own cap is 100,000
    query_max_nesting: int = Field(default=32, ge=1)
    query_max_operators: int = Field(default=500, ge=1)
    page_size_max: int = Field(default=1000, ge=1)
    token: str | None = Field(default=None, exclude=True)

    @field_validator("dashboard_refresh", "query_timeout")
    @classmethod
    def _positive(cls, v: dt.timedelta) -> dt.timedelta:
        if v <= dt.timedelta(0):
            raise ValueError("must be more than 0 seconds")
        return v

    @field_validator("token")
    @classmethod
    def _no_token_in_files(cls, v: str | None) -> str | None:
        if v is not None and len(v) < 8:
            raise ValueError("ISRWATCH_API_TOKEN must be at least 8 characters")
        return v


class StorageSettings(BaseModel):
    """An object-store lakehouse's endpoint (foundation/object_store.py). Unset keys fall back to the AWS
    SDK's variables (AWS_ENDPOINT_URL, AWS_REGION); credentials come only from the environment."""

    model_config = ConfigDict(extra="forbid")

    endpoint: str | None = None         # e.g. http://127.0.0.1:9000 (MinIO, s3proxy); unset: AWS S3
    region: str | None = None
    path_style: bool = True

    @field_validator("endpoint")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^https?://[^/\s]+/?$", v):
            raise ValueError("expected http://host:port or https://host (no path)")
        return v

    def object_store(self) -> ObjectStore:
        env = ObjectStore.from_environment()
        return ObjectStore(endpoint=self.endpoint or env.endpoint, region=self.region or env.region,
                           path_style=self.path_style)


class PipelineSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    lakehouse: str = "lakehouse"
    checkpoints: str | None = None
    storage: StorageSettings = Field(default_factory=lambda: StorageSettings.model_validate({}))
    spark: dict[str, str] = Field(default_factory=dict)
    validate_: ValidateSettings = Field(default_factory=lambda: ValidateSettings.model_validate({}), alias="validate")
    alerts: AlertsSettings = Field(default_factory=lambda: AlertsSettings.model_validate({}))
    posture: PostureSettings = Field(default_factory=lambda: PostureSettings.model_validate({}))
    slo: SloSettings = Field(default_factory=lambda: SloSettings.model_validate({}))
    api: ApiSettings = Field(default_factory=lambda: ApiSettings.model_validate({}))

    @field_validator("lakehouse", "checkpoints")
    @classmethod
    def _reachable_root(cls, v: str | None) -> str | None:
        return v if v is None else object_store.check_root(v)

    @property
    def checkpoint_root(self) -> str:
        return self.checkpoints or f"{self.lakehouse.rstrip('/')}/_checkpoints"

    def use_storage(self) -> None:
        """Make this lakehouse's store the one this process's delta-rs reads and writes take (a process works on one
        lakehouse): what a job or a server does as it starts, not what loading settings does."""
        object_store.use(self.storage.object_store())


# Settings an older isrwatch had, and why they went: a file still naming one is told so, not just "extra input".
REMOVED = {
    "alerts.lane": "the alert lane always evaluates the rules on silver tables (docs/alerts.md)",
    "alerts.silver_rules_in": "the alert lane always evaluates the rules on silver tables (docs/alerts.md)",
    "validate.ge_engine": "one check runs where the rows are: validate.driver_max_rows (docs/validation.md)",
    "validate.ge_pandas_max_rows": "renamed validate.driver_max_rows (docs/validation.md)",
    "validate.ge_behind": "live batches always hand Great Expectations to a worker behind them (docs/validation.md)",
    "validate.driver_writes": "rows checked on the driver are always appended with delta-rs (docs/validation.md)",
}
# Settings renamed when every duration became one with its unit ('120 seconds'): old key -> new key.
RENAMED = {
    **{f"{job}.wait_for_tables_seconds": f"{job}.wait_for_tables" for job in ("defaults", *JOB_SECTIONS)},
    "validate.vacuum_retention_hours": "validate.vacuum_retention",
    "api.refresh_seconds": "api.refresh",
    "api.dashboard_refresh_seconds": "api.dashboard_refresh",
    "api.dashboard_prebuild_seconds": "api.dashboard_prebuild",
    "api.query_timeout_seconds": "api.query_timeout",
    "api.query_wait_seconds": "api.query_wait",
}
REMOVED.update({old: f"renamed {new}, a duration with its unit such as '120 seconds' (docs/settings.md)"
                for old, new in RENAMED.items()})


def load_settings(path: str | Path | None = None, overrides: dict[str, Any] | None = None) -> PipelineSettings:
    """Settings from YAML (default conf/pipeline.yaml) with dotted-key overrides, e.g. {'validate.trigger': …}."""
    source = Path(path) if path is not None else DEFAULT_CONFIG
    raw = read_yaml(source, SettingsError) or {}
    if not isinstance(raw, dict):
        raise SettingsError(f"{source}: expected a mapping at the top level")
    for dotted, value in (overrides or {}).items():
        if value is None:
            continue
        node = raw
        *parents, leaf = dotted.split(".")
        for key in parents:
            # A section the file lacks, or leaves empty (`alerts:` is None), becomes a mapping in place:
            # `setdefault(...) or {}` would hand back a detached dict and drop the override.
            if not isinstance(node.get(key), dict):
                node[key] = {}
            node = node[key]
        node[leaf] = value
    defaults = raw.pop("defaults", None) or {}
    if not isinstance(defaults, dict):
        raise SettingsError(f"{source}: defaults: expected a mapping of settings every job shares")
    try:
        JobSettings.model_validate(defaults)
    except ValidationError as e:
        raise _named(source, e, "defaults") from None
    for job in JOB_SECTIONS:  # a job's own section wins over the defaults
        section = raw.get(job) or {}
        if not isinstance(section, dict):
            raise SettingsError(f"{source}: {job}: expected a mapping")
        raw[job] = {**defaults, **section}
    try:
        settings = PipelineSettings.model_validate(raw)
    except ValidationError as e:
        raise _named(source, e) from None
    # Local roots become absolute: Delta reads a bare relative location as a table name.
    settings.lakehouse = _absolute(settings.lakehouse)
    if settings.checkpoints is not None:
        settings.checkpoints = _absolute(settings.checkpoints)
    return settings


def parse_spark_conf(items: list[str]) -> dict[str, str]:
    """`--conf KEY=VALUE` arguments as a dict; a malformed one is a SettingsError naming it."""
    conf: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SettingsError(f"--conf: expected KEY=VALUE, got {item!r}")
        conf[key] = value
    return conf


def _named(source: Path, e: ValidationError, section: str | None = None) -> SettingsError:
    """The first problem, naming the file, the key and the value (and why a key an older isrwatch had went)."""
    err = e.errors()[0]
    key = ".".join(str(p) for p in ([section] if section else []) + list(err["loc"]))
    if key in REMOVED:
        return SettingsError(f"{source}: {key}: no longer a setting (delete it): {REMOVED[key]}")
    return SettingsError(f"{source}: {key}: {err.get('input')!r}: {err['msg']}")


def _absolute(root: str) -> str:
    return root if "://" in root else str(Path(root).resolve())
