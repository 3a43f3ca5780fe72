"""The query endpoint's limits checked before parsing (api/sql_limits.py): what the scan counts, what each limit
answers, and the per-client slots."""

from __future__ import annotations

import pytest

from api.sql_limits import ClientSlots, QueryLimits, QueryShape, QueryTooLarge, check_limits, measure

DEFAULTS = QueryLimits(max_bytes=65_536, max_nesting=32, max_operators=500)


@pytest.mark.parametrize(("sql", "nesting", "operators"), [
    ("SELECT 1", 0, 0),
    ("SELECT status, count(*) AS n FROM gold.alerts WHERE rule = 'x' GROUP BY status", 1, 2),  # `*` and `=`
    ("SELECT a FROM t WHERE x >= 1 AND y <> 2 OR NOT z::int IS NULL", 0, 7),
    ("SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3", 0, 2),
    ("SELECT * FROM a JOIN b ON a.k = b.k LEFT JOIN c ON c.k = a.k", 0, 5),
    ("SELECT abs(abs((1)))", 3, 0),
    ("SELECT [[1], [2]]", 2, 0),
    # Inside strings, quoted identifiers and comments nothing counts.
    ("SELECT '(((+ AND' AS \"a((b\", `c))` -- ((( + +\n", 0, 0),
    ("SELECT 'it''s ((' , \"x\"\"((\" ", 0, 0),
    ("SELECT /* ( /* nested ( */ still comment + ( */ 1", 0, 0),
    ("SELECT e'it\\'s ((' || $$ (( $$ || $tag$ ) + $tag$", 0, 2),
    # Words that contain a keyword are not the keyword; a word before a quote is a prefix (X'41', E'…').
    ("SELECT band, orx, island, X'41' FROM t", 0, 0),
    ("SELECT " + " + ".join(["1"] * 20_000), 0, 19_999),
])
def test_measure_counts_brackets_and_operators_outside_strings_and_comments(sql: str, nesting: int,
                                                                            operators: int) -> None:
    assert measure(sql) == QueryShape(nesting=nesting, operators=operators)


@pytest.mark.parametrize(("sql", "status", "detail"), [
    ("SELECT " + " + ".join(["1"] * 20_000), 413, "query is 80004 bytes, more than api.query_max_bytes (65536)"),
    ("SELECT " + " + ".join(["1"] * 2_000), 400, "query has more than 500 operators (api.query_max_operators)"),
    (" UNION ALL ".join(["SELECT 1"] * 502), 400, "query has more than 500 operators (api.query_max_operators)"),
    ("SELECT " + "(" * 40 + "1" + ")" * 40, 400, "query nests brackets more than 32 deep (api.query_max_nesting)"),
    ("SELECT 'é" + "x" * 65_526 + "'", 413, "query is 65537 bytes, more than api.query_max_bytes (65536)"),
])
def test_a_query_over_a_limit_is_refused_naming_the_limit(sql: str, status: int, detail: str) -> None:
    with pytest.raises(QueryTooLarge) as refused:
        check_limits(sql, DEFAULTS)
    assert (refused.value.status, str(refused.value)) == (status, detail)


def test_a_query_at_the_limits_passes() -> None:
    at_limits = "SELECT " + "(" * 32 + " + ".join(["1"] * 501) + ")" * 32
    assert check_limits(at_limits, DEFAULTS) == QueryShape(nesting=32, operators=500)
    # Operators inside a string do not count, even past the limit.
    assert check_limits("SELECT '" + "+" * 10_000 + "'", DEFAULTS) == QueryShape(nesting=0, operators=0)


def test_limits_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_nesting must be >= 1, got 0"):
        QueryLimits(max_bytes=1, max_nesting=0, max_operators=1)


def test_client_slots_bound_each_client_alone() -> None:
    slots = ClientSlots(per_client=2)
    assert [slots.try_acquire("a"), slots.try_acquire("a"), slots.try_acquire("a")] == [True, True, False]
    assert slots.try_acquire("b") is True
    slots.release("a")
    assert slots.running("a") == 1 and slots.try_acquire("a") is True
    for client in ("a", "a", "b"):
        slots.release(client)
    assert (slots.running("a"), slots.running("b")) == (0, 0)
    with pytest.raises(AssertionError, match="release without acquire for b"):
        slots.release("b")
