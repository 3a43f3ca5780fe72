"""Which tables of a micro-batch over `validate.driver_max_rows` are still routed on the driver."""

from __future__ import annotations

from typing import Any

import pytest

from jobs.validate_routes import driver_share


def test_the_smallest_tables_that_fit_together_take_the_driver() -> None:
    rows = {"broker_metrics": 9_000_000, "runs": 4_508, "topic_configs": 20_000, "partition_state": 400_000}
    assert driver_share(rows, 500_000) == {"runs", "topic_configs", "partition_state"}
    assert driver_share(rows, 424_507) == {"runs", "topic_configs"}  # one row short of partition_state
    assert driver_share(rows, 24_508) == {"runs", "topic_configs"}
    assert driver_share(rows, 4_507) == set()


def test_once_a_table_does_not_fit_no_larger_one_is_taken_and_ties_go_by_name() -> None:
    assert driver_share({"a": 10, "b": 10, "c": 15}, 24) == {"a", "b"}
    assert driver_share({"b": 10, "a": 10}, 15) == {"a"}
    assert driver_share({}, 100) == set()


def test_the_validate_flag_sets_the_limit_and_a_negative_limit_is_refused_by_name() -> None:
    from foundation.settings import SettingsError
    from jobs.validate_args import build_parser, settings_from_args

    args = build_parser().parse_args(["--lakehouse", "/tmp/lake", "--driver-max-rows", "50000"])
    assert settings_from_args(args).validate_.driver_max_rows == 50_000
    with pytest.raises(SettingsError, match="driver_max_rows"):
        settings_from_args(build_parser().parse_args(["--lakehouse", "/tmp/lake", "--driver-max-rows", "-1"]))


@pytest.mark.parametrize(("key", "says"), [("ge_engine", "validate.driver_max_rows"),
                                           ("ge_pandas_max_rows", "renamed validate.driver_max_rows"),
                                           ("ge_behind", "always hand Great Expectations to a worker")])
def test_a_file_naming_a_removed_validate_setting_is_told_what_replaced_it(tmp_path: Any, key: str,
                                                                          says: str) -> None:
    from foundation.settings import SettingsError, load_settings

    path = tmp_path / "pipeline.yaml"
    path.write_text(f"validate:\n  {key}: auto\n")
    with pytest.raises(SettingsError, match=f"validate.{key}: no longer a setting.*{says}"):
        load_settings(path)
