"""conf/pipeline.yaml: overrides, durations, the defaults every job shares, renamed and removed keys."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pytest

from foundation import object_store
from foundation.object_store import ObjectStore
from foundation.settings import DEFAULT_CONFIG, PipelineSettings, SettingsError, load_settings, spark_interval


@pytest.mark.parametrize("text", ["lakehouse: x\n", "lakehouse: x\nalerts:\n", "lakehouse: x\nalerts: {}\n"])
def test_overrides_apply_to_missing_or_empty_sections(tmp_path: Path, text: str) -> None:
    conf = tmp_path / "pipeline.yaml"
    conf.write_text(text)
    s = load_settings(conf, {"alerts.trigger": "available-now", "alerts.webhooks": False, "api.port": 9999,
                             "validate.trigger": None})
    assert (s.alerts.trigger, s.alerts.webhooks, s.api.port) == ("available-now", False, 9999)
    assert s.validate_.trigger == "live"          # None means "not given"


def test_an_override_with_a_bad_value_names_the_key(tmp_path: Path) -> None:
    conf = tmp_path / "pipeline.yaml"
    conf.write_text("lakehouse: x\n")
    with pytest.raises(SettingsError, match=r"api\.port: 70000"):
        load_settings(conf, {"api.port": 70000})


@pytest.mark.parametrize("key", ["lane: true", "silver_rules_in: validate"])
def test_a_removed_alerts_setting_is_named_with_why_it_went(tmp_path: Path, key: str) -> None:
    path = tmp_path / "pipeline.yaml"
    path.write_text(f"alerts:\n  {key}\n")
    name = key.split(":")[0]
    with pytest.raises(SettingsError, match=rf"pipeline\.yaml: alerts\.{name}: no longer a setting \(delete it\): "
                                            r"the alert lane always evaluates the rules on silver tables"):
        load_settings(path)


@pytest.mark.parametrize("root", ["hdfs://nn:8020/lake", "abfss://c@a.dfs.core.windows.net/lake", "gs://b/lake"])
@pytest.mark.parametrize("key", ["lakehouse", "checkpoints"])
def test_a_root_only_spark_could_reach_is_refused_naming_file_key_and_scheme(tmp_path: Path, root: str,
                                                                             key: str) -> None:
    scheme = root.split(":")[0]
    with pytest.raises(SettingsError, match=rf"pipeline\.yaml: {key}: '{re.escape(root)}': .*the {scheme}:// scheme "
                                            r"is not supported; a lakehouse is a local path \(or file:\) or an "
                                            r"S3-compatible store \(s3://, s3a://\)"):
        _load(tmp_path, f"{key}: {root}\n")
    with pytest.raises(SettingsError, match=rf"{key}: '{re.escape(root)}'"):  # given on a command line: the same
        load_settings(DEFAULT_CONFIG, {key: root})
    with pytest.raises(object_store.UnsupportedLakehouse, match=f"the {scheme}:// scheme is not supported"):
        object_store.lake_filesystem(root)


@pytest.mark.parametrize("root", ["lake", "/srv/lake", "file:///srv/lake", "s3://bucket/lake", "s3a://bucket/lake",
                                  "lake:2026", "/srv/lake:2026"])
def test_local_and_s3_roots_are_taken(tmp_path: Path, root: str) -> None:
    settings = _load(tmp_path, f"lakehouse: {root}\n")
    assert settings.lakehouse == (root if "://" in root else str(Path(root).resolve()))


def _load(tmp_path: Path, text: str) -> PipelineSettings:
    path = tmp_path / "pipeline.yaml"
    path.write_text(text)
    return load_settings(path)


@pytest.mark.parametrize(("text", "expected"), [
    ("10 seconds", dt.timedelta(seconds=10)), ("1 second", dt.timedelta(seconds=1)),
    ("100 milliseconds", dt.timedelta(milliseconds=100)), ("1.5 minutes", dt.timedelta(seconds=90)),
    ("168 hours", dt.timedelta(days=7)), ("1 day", dt.timedelta(days=1)), (" 2 minutes ", dt.timedelta(minutes=2)),
    ("30s", dt.timedelta(seconds=30)), ("500ms", dt.timedelta(milliseconds=500)), ("5m", dt.timedelta(minutes=5)),
])
def test_every_duration_is_written_with_its_unit_and_held_as_a_timedelta(tmp_path: Path, text: str,
                                                                       expected: dt.timedelta) -> None:
    s = _load(tmp_path, f"validate:\n  counter_lookback: {text}\napi:\n  query_timeout: {text}\n")
    assert s.validate_.counter_lookback == expected and s.api.query_timeout == expected
    assert spark_interval(expected) == f"{round(expected.total_seconds() * 1000)} milliseconds"


@pytest.mark.parametrize("text", ["10", "10 secs", "ten seconds", "-1 second", "'1 second later'", "5 mins"])
def test_a_duration_without_a_known_unit_is_refused_naming_file_key_and_value(tmp_path: Path, text: str) -> None:
    with pytest.raises(SettingsError, match=r"pipeline\.yaml: alerts\.lane_trigger_interval: .*expected a duration "
                                            r"such as '30s', '500ms', '5m' or '10 seconds'"):
        _load(tmp_path, f"alerts:\n  lane_trigger_interval: {text}\n")


def test_the_defaults_apply_to_every_job_whose_own_section_does_not_set_them(tmp_path: Path) -> None:
    s = _load(tmp_path, "defaults:\n  trigger_interval: 5 seconds\n  wait_for_tables: 0 seconds\n"
                        "  max_files_per_trigger: 7\n  driver_max_rows: 40\n"
                        "slo:\n  trigger_interval: 2 minutes\nalerts:\n  driver_max_rows: 0\n")
    jobs = {"validate": s.validate_, "alerts": s.alerts, "posture": s.posture, "slo": s.slo}
    assert {n: j.trigger_interval.total_seconds() for n, j in jobs.items()} == {
        "validate": 5, "alerts": 5, "posture": 5, "slo": 120}
    assert {j.wait_for_tables.total_seconds() for j in jobs.values()} == {0}
    assert {j.max_files_per_trigger for j in jobs.values()} == {7}
    assert {n: j.driver_max_rows for n, j in jobs.items()} == {"validate": 40, "alerts": 0, "posture": 40, "slo": 40}
    # Without a defaults section, each job's own default: validate's trigger is faster than the gold jobs'.
    plain = _load(tmp_path, "lakehouse: x\n")
    assert (plain.validate_.trigger_interval, plain.alerts.trigger_interval) == (dt.timedelta(seconds=10),
                                                                                 dt.timedelta(seconds=60))


@pytest.mark.parametrize(("text", "message"), [
    ("defaults:\n  trigger_interval: soon\n", r"defaults\.trigger_interval: 'soon'"),
    ("defaults:\n  tables: [runs]\n", r"defaults\.tables: \['runs'\]: Extra inputs are not permitted"),
    ("defaults: 3\n", r"defaults: expected a mapping"),
    ("defaults:\n  wait_for_tables_seconds: 1\n", r"defaults\.wait_for_tables_seconds: no longer a setting.*"
                                                   r"renamed defaults\.wait_for_tables"),
])
def test_a_bad_default_is_named_in_the_defaults_section(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(SettingsError, match=message):
        _load(tmp_path, text)


@pytest.mark.parametrize(("old", "new"), [
    ("validate.wait_for_tables_seconds", "validate.wait_for_tables"), ("posture.wait_for_tables_seconds",
                                                                       "posture.wait_for_tables"),
    ("validate.vacuum_retention_hours", "validate.vacuum_retention"), ("api.refresh_seconds", "api.refresh"),
    ("api.query_timeout_seconds", "api.query_timeout"), ("api.dashboard_prebuild_seconds", "api.dashboard_prebuild"),
])
def test_a_key_renamed_with_its_unit_is_named_with_the_new_key(tmp_path: Path, old: str, new: str) -> None:
    section, key = old.split(".")
    with pytest.raises(SettingsError, match=rf"{re.escape(old)}: no longer a setting \(delete it\): renamed "
                                            rf"{re.escape(new)}, a duration with its unit"):
        _load(tmp_path, f"{section}:\n  {key}: 1\n")


def test_the_shipped_file_holds_the_defaults_a_key_left_out_takes() -> None:
    """docs/settings.md: a key left out of the file takes the shipped file's value (but `spark`)."""
    shipped = load_settings(DEFAULT_CONFIG).model_dump(exclude={"lakehouse", "spark"})
    assert shipped == PipelineSettings().model_dump(exclude={"lakehouse", "spark"})


def test_loading_settings_leaves_the_process_store_alone_until_a_job_uses_it(tmp_path: Path) -> None:
    before = object_store.current()
    try:
        s = _load(tmp_path, "storage:\n  endpoint: http://127.0.0.1:9\n  region: r-1\n")
        assert object_store.current() == before
        s.use_storage()
        assert object_store.current() == ObjectStore("http://127.0.0.1:9", "r-1", path_style=True)
    finally:
        object_store.use(before)


def test_driver_writes_is_named_as_gone_with_why(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match=r"validate\.driver_writes: no longer a setting \(delete it\): rows checked "
                                            r"on the driver are always appended with delta-rs"):
        _load(tmp_path, "validate:\n  driver_writes: false\n")


@pytest.mark.parametrize("command", [["emulate", "--scenario", "s.yaml"], ["collect", "--bootstrap-servers", "h:9092"],
                                     ["serve"], ["dashboards", "export", "--out", "x"], ["pipeline", "run"]])
def test_a_command_given_a_root_only_spark_could_reach_stops_at_its_usage_naming_it(
        command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    from isrwatch.cli import build_parser

    with pytest.raises(SystemExit) as stopped:
        build_parser().parse_args([*command, "--lakehouse", "hdfs://nn:8020/lake"])
    assert stopped.value.code == 2
    assert ("argument --lakehouse: lakehouse 'hdfs://nn:8020/lake': the hdfs:// scheme is not supported"
            in capsys.readouterr().err)
