"""Rule expressions compiled once (pipelines/alert_expressions.py) give what `DataFrame.eval` gives, value for value:
every shipped rule's `when` and `value` on random samples with gaps, and pandas' own precedence and chaining."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pipelines.alert_config import load_alert_config
from pipelines.alert_expressions import compiled
from pipelines.alert_signals import SOURCES

BOOLEAN = {"offline", "recovering", "page", "ticket", "shut_down_cleanly", "restarting"}


def random_samples(source: str, rows: int = 400, seed: int = 7) -> pd.DataFrame:
    """Small integers (so equalities hold often), a tenth of the numbers missing, booleans where the source has them."""
    rng = np.random.default_rng(seed)
    columns: dict[str, object] = {}
    for c in SOURCES[source].columns:
        if c in BOOLEAN or c.startswith("finding_"):
            columns[c] = rng.random(rows) < 0.3
        else:
            values = rng.integers(-1, 4, rows).astype("float64")
            values[rng.random(rows) < 0.1] = np.nan
            columns[c] = values
    return pd.DataFrame(columns)


def by_pandas(frame: pd.DataFrame, text: str) -> np.ndarray:
    return np.asarray(frame.eval(text, engine="python"))


@pytest.mark.parametrize("rule", load_alert_config().rules, ids=lambda r: r.name)
def test_every_shipped_rule_compiles_and_agrees_with_pandas(rule: object) -> None:
    frame = random_samples(rule.source)  # type: ignore[attr-defined]
    for text in filter(None, (rule.when, rule.value)):  # type: ignore[attr-defined]
        c = compiled(text)
        assert c.code is not None, text
        np.testing.assert_array_equal(np.asarray(c.evaluate(frame)), by_pandas(frame, text), err_msg=text)


@pytest.mark.parametrize("text, expected", [
    # & and | bind as `and` and `or` do in pandas: below the comparisons
    ("isr_size > 1 & leader < 2", [False, False, True, False]),
    ("isr_size == 3 | leader == -1", [True, False, False, True]),
    ("1 < isr_size <= 3", [False, True, True, True]),             # chained: both links
    ("not offline and isr_size > 1", [False, True, True, True]),
    ("high_watermark / isr_size", [np.inf, 2.5, 2.5, 1.0]),      # x / 0 is inf, as pandas gives it
    ("-(isr_size - 3) ** 2 >= -1", [False, True, True, True]),
])
def test_pandas_precedence_and_arithmetic_are_kept(text: str, expected: list[object]) -> None:
    frame = pd.DataFrame({"isr_size": [0.0, 2.0, 2.0, 3.0], "leader": [-1, 3, 1, 5],
                          "offline": [True, False, False, False], "high_watermark": [4.0, 5.0, 5.0, 3.0]})
    c = compiled(text)
    assert c.code is not None
    np.testing.assert_array_equal(np.asarray(c.evaluate(frame)), expected)
    np.testing.assert_array_equal(by_pandas(frame, text), expected)


@pytest.mark.parametrize("text", ["abs(leader) > 1", "leader in [1, 3]", "leader > @limit", "True", "topic == 't'"])
def test_what_it_does_not_compile_is_left_to_pandas(text: str) -> None:
    frame = pd.DataFrame({"leader": [-2, 1, 3], "topic": ["t", "u", "t"]})
    c = compiled(text)
    assert c.code is None
    if "@" not in text:
        np.testing.assert_array_equal(np.asarray(c.evaluate(frame)), by_pandas(frame, text))
