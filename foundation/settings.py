"""Pipeline settings: conf/pipeline.yaml, validated at start-up with errors naming file, key and value."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from foundation import object_store
from foundation.object_store import ObjectStore
from foundation.yaml_file import read_yaml
from schemas.bronze import BRONZE_TABLES

DEFAULT_CONFIG = Path(__file__).resolve().parent.parent / "conf" / "pipeline.yaml"
_INTERVAL = re.compile(r"^\s*(\d+)\s*(millisecond|second|minute|hour)s?\s*$")
_MS = {"millisecond": 1, "second": 1000, "minute": 60_000, "hour": 3_600_000}


class SettingsError(ValueError):
    """Raised when a settings file or override is malformed: names the file, the key and the value."""


def interval_ms(text: str) -> int:
    m = _INTERVAL.match(text)
    if not m:
        raise ValueError(f"expected an interval like '1 second' or '10 minutes', got {text!r}")
    return int(m.group(1)) * _MS[m.group(2)]


class ValidateSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tables: list[str] = Field(default_factory=lambda: [td.name for td in BRONZE_TABLES])
    trigger: Literal["live", "available-now"] = "live"
    trigger_interval: str = "1 second"
    dedup_window: str = "10 minutes"
    counter_lookback: str = "2 minutes"
    driver_max_rows: int = Field(default=500_000, ge=1)  # a larger micro-batch is checked on the executors
    driver_writes: bool = True
    max_files_per_trigger: int = Field(default=1000, ge=1)
    maintain_every_batches: int = Field(default=600, ge=1)
    vacuum_retention_hours: int = Field(default=168, ge=0)
    wait_for_tables_seconds: float = Field(default=120, ge=0)

    @field_validator("tables")
    @classmethod
    def _known_tables(cls, v: list[str]) -> list[str]:
        known = [td.name for td in BRONZE_TABLES]
        unknown = [t for t in v if t not in known]
        if unknown or not v:
            raise ValueError(f"unknown bronze tables {unknown or v}; known: {', '.join(known)}")
        return v

    @field_validator("trigger_interval", "dedup_window", "counter_lookback")
    @classmethod
    def _interval(cls, v: str) -> str:
        interval_ms(v)
        return v


class GoldJobSettings(BaseModel):
    """What every gold streaming job (alerts, posture, slo) shares: trigger, batch cap, maintenance, start-up
    wait."""

    model_config = ConfigDict(extra="forbid")

    trigger: Literal["live", "available-now"] = "live"
    trigger_interval: str = "1 second"
    max_files_per_trigger: int = Field(default=1000, ge=1)
    maintain_every_batches: int = Field(default=600, ge=1)
    wait_for_tables_seconds: float = Field(default=300, ge=0)

    @field_validator("trigger_interval")
    @classmethod
    def _interval(cls, v: str) -> str:
        interval_ms(v)
        return v


class AlertsSettings(GoldJobSettings):
    rules: str | None = None            # default conf/alerts.yaml
    webhooks: bool = True
    # A micro-batch of more rows is evaluated on the executors, cluster by cluster, not collected to the driver.
    driver_max_rows: int = Field(default=500_000, ge=0)
    # The alert lane (jobs/alert_lane.py) evaluates the rules on silver tables over the bronze commit logs: with a live
    # validate, micro-batches back to back, an idle lane looking for new commits every `lane_trigger_interval`.
    lane_trigger_interval: str = "100 milliseconds"

    @field_validator("lane_trigger_interval")
    @classmethod
    def _lane_interval(cls, v: str) -> str:
        interval_ms(v)
        return v


class PostureSettings(GoldJobSettings):
    # p: probability that one broker loses its copy of a partition in the window you reason about (the
    # seed's worked example uses 2 % per server-year).
    failure_probability: float = Field(default=0.02, gt=0, lt=1)


class SloSettings(GoldJobSettings):
    specs: str | None = None            # default conf/slos.yaml
    # A micro-batch of more rows is evaluated on the executors, cluster by cluster, not collected to the driver.
    driver_max_rows: int = Field(default=500_000, ge=0)


class ApiSettings(BaseModel):
    """`isrwatch serve`: the HTTP API and dashboards. The bearer token comes from ISRWATCH_API_TOKEN, never a
    file, so it is not committed with the configuration."""

    model_config = ConfigDict(extra="forbid")

    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=1, le=65535)
    read_auth: bool = False
    refresh_seconds: float = Field(default=1.0, ge=0)
    dashboard_refresh_seconds: float = Field(default=5.0, gt=0)
    dashboard_prebuild_seconds: float = Field(default=5.0, ge=0)  # 0: figures built only when asked for
    query_max_rows: int = Field(default=10_000, ge=1)
    query_timeout_seconds: float = Field(default=10.0, gt=0)
    query_auth: bool = False            # POST /api/v1/query needs the token even when read_auth is off
    query_workers: int = Field(default=2, ge=1, le=64)
    query_spare_worker: bool = True     # one more started ahead, to replace a killed or crashed worker at once
    query_worker_memory_mb: int = Field(default=1024, ge=0)   # 0: no limit but DataFusion's 512 MiB pool
    query_wait_seconds: float = Field(default=2.0, ge=0)
    query_max_per_client: int = Field(default=1, ge=1)
    query_max_bytes: int = Field(default=65_536, ge=1, le=100_000)   # the request's own cap is 100,000
    query_max_nesting: int = Field(default=32, ge=1)
    query_max_operators: int = Field(default=500, ge=1)
    page_size_max: int = Field(default=1000, ge=1)
    token: str | None = Field(default=None, exclude=True)

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

    @property
    def checkpoint_root(self) -> str:
        return self.checkpoints or f"{self.lakehouse.rstrip('/')}/_checkpoints"


# Settings an older isrwatch had, and why they went: a file still naming one is told so, not just "extra input".
REMOVED = {
    "alerts.lane": "the alert lane always evaluates the rules on silver tables (docs/alerts.md)",
    "alerts.silver_rules_in": "the alert lane always evaluates the rules on silver tables (docs/alerts.md)",
    "validate.ge_engine": "one check runs where the rows are: validate.driver_max_rows (docs/validation.md)",
    "validate.ge_pandas_max_rows": "renamed validate.driver_max_rows (docs/validation.md)",
    "validate.ge_behind": "live batches always hand Great Expectations to a worker behind them (docs/validation.md)",
}


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
    try:
        settings = PipelineSettings.model_validate(raw)
    except ValidationError as e:
        err = e.errors()[0]
        key = ".".join(str(p) for p in err["loc"])
        if key in REMOVED:
            raise SettingsError(f"{source}: {key}: no longer a setting (delete it): {REMOVED[key]}") from None
        raise SettingsError(f"{source}: {key}: {err.get('input')!r}: {err['msg']}") from None
    # Local roots become absolute: Delta reads a bare relative location as a table name.
    settings.lakehouse = _absolute(settings.lakehouse)
    if settings.checkpoints is not None:
        settings.checkpoints = _absolute(settings.checkpoints)
    # A process works on one lakehouse: its delta-rs reads and writes take the store these settings name.
    object_store.use(settings.storage.object_store())
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


def _absolute(root: str) -> str:
    return root if "://" in root else str(Path(root).resolve())
