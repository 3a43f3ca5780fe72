"""Which tables of a micro-batch over `validate.ge_pandas_max_rows` are still routed on the driver."""

from __future__ import annotations

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


def test_the_validate_flag_sets_the_limit_and_a_limit_below_one_row_is_refused_by_name() -> None:
    from foundation.settings import SettingsError
    from jobs.validate_args import build_parser, settings_from_args

    args = build_parser().parse_args(["--lakehouse", "/tmp/lake", "--ge-pandas-max-rows", "50000"])
    assert settings_from_args(args).validate_.ge_pandas_max_rows == 50_000
    with pytest.raises(SettingsError, match="ge_pandas_max_rows"):
        settings_from_args(build_parser().parse_args(["--lakehouse", "/tmp/lake", "--ge-pandas-max-rows", "0"]))
