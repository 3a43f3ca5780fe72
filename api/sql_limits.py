"""What `POST /api/v1/query` checks before a query reaches DataFusion: its size, nesting and number of operators
(`check_limits`), and how many queries one client runs at once (`ClientSlots`).

DataFusion's parser and planner recurse: `SELECT 1 + 1 + …` with 20,000 terms overflows a thread's stack
(a segfault), and a few thousand terms take seconds to plan (planning grows with the square of the chain). The
query runs in a worker process (api/sql_pool.py), so neither can end the server, but a worker lost or busy is a
slot the other clients wait for. These limits answer such a query at once, naming the limit.

The scan is a tokenizer of DataFusion's lexical rules that matter here (comments, nested block comments,
quoted strings and identifiers, E'…' escapes, $$…$$ strings): brackets and operators inside a string or a
comment are not counted. Where it and DataFusion ever disagree, the worker process is still the boundary.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass

# One token at a time: what may hold brackets or operator characters that are not code (comments, strings,
# quoted identifiers) is consumed whole. Binary and unary operators are what DataFusion turns into nested
# expressions or left-deep plans: arithmetic, comparison, string and JSON operators, casts, boolean and set
# operators, joins.
_TOKEN = re.compile(r"""
    (?P<plain>(?:[\s,;0-9.]++|[A-Za-z_][A-Za-z0-9_$]*+(?!'))++)   # words and numbers, not a word before a quote
  | (?P<comment>--[^\n]*)
  | (?P<block>/\*)
  | (?P<escaped>[Ee]'(?:[^'\\]++|\\.|'')*+'?)
  | (?P<string>'(?:[^']++|'')*+'?)
  | (?P<quoted>"(?:[^"]++|"")*+"?|`(?:[^`]++|``)*+`?)
  | (?P<dollar>\$(?:[A-Za-z_][A-Za-z0-9_]*)?\$)
  | (?P<word>[A-Za-z_][A-Za-z0-9_$]*)
  | (?P<symbol>::|<=|>=|<>|!=|==|\|\||->>|->|@>|<@|<<|>>|[-+*/%=<>&|^#~])
  | (?P<open>[(\[{])
  | (?P<close>[)\]}])
  | (?P<other>.)
""", re.X | re.S)
_KEYWORD = re.compile(r"(?<![A-Za-z0-9_$])(?:and|or|not|is|in|like|ilike|similar|between|case|union|intersect"
                      r"|except|join)(?![A-Za-z0-9_$])", re.I)
_UNLIMITED = sys.maxsize


class QueryTooLarge(ValueError):
    """Raised when a query passes a size, nesting or operator limit (HTTP 413 for size, else 400)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class QueryLimits:
    max_bytes: int
    max_nesting: int
    max_operators: int

    def __post_init__(self) -> None:
        for name in ("max_bytes", "max_nesting", "max_operators"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")


@dataclass(frozen=True)
class QueryShape:
    """What the scan measured: the deepest bracket nesting and the number of operators."""

    nesting: int
    operators: int


def measure(sql: str) -> QueryShape:
    """Bracket depth and operator count of `sql`, outside strings, quoted identifiers and comments."""
    return _scan(sql, _UNLIMITED, _UNLIMITED)


def _scan(sql: str, nesting_max: int, operators_max: int) -> QueryShape:
    """`measure`, stopping as soon as the nesting or the operator count is over its maximum."""
    depth = deepest = operators = 0
    pos, n = 0, len(sql)
    while pos < n and deepest <= nesting_max and operators <= operators_max:
        token = _TOKEN.match(sql, pos)
        assert token is not None, "the last alternative matches any character"
        kind, pos = token.lastgroup, token.end()
        if kind == "open":
            depth += 1
            deepest = max(deepest, depth)
        elif kind == "close":
            depth = max(depth - 1, 0)
        elif kind == "symbol":
            operators += 1
        elif kind == "plain":
            operators += len(_KEYWORD.findall(token.group()))
        elif kind == "block":
            pos = _block_comment_end(sql, token.start())
        elif kind == "dollar":
            end = sql.find(token.group(), pos)
            pos = n if end < 0 else end + len(token.group())
    return QueryShape(nesting=deepest, operators=operators)


def check_limits(sql: str, limits: QueryLimits) -> QueryShape:
    """The query's shape (within the limits); QueryTooLarge naming the setting when it is over one of `limits`."""
    size = len(sql.encode())
    if size > limits.max_bytes:
        raise QueryTooLarge(f"query is {size} bytes, more than api.query_max_bytes ({limits.max_bytes})", 413)
    shape = _scan(sql, limits.max_nesting, limits.max_operators)
    # The scan stops at the first bracket or operator over a limit: the message gives the limit, not the count.
    if shape.nesting > limits.max_nesting:
        raise QueryTooLarge(f"query nests brackets more than {limits.max_nesting} deep (api.query_max_nesting)", 400)
    if shape.operators > limits.max_operators:
        raise QueryTooLarge(f"query has more than {limits.max_operators} operators (api.query_max_operators)", 400)
    return shape


def _block_comment_end(sql: str, start: int) -> int:
    """The index after a block comment opening at `start`; block comments nest, as in DataFusion."""
    depth, i = 0, start
    while i < len(sql):
        opening, closing = sql.find("/*", i), sql.find("*/", i)
        if closing < 0:
            return len(sql)
        if 0 <= opening < closing:
            depth += 1
            i = opening + 2
        else:
            depth -= 1
            i = closing + 2
            if depth == 0:
                return i
    return len(sql)


class ClientSlots:
    """How many queries each client runs at once, at most `per_client`. Used from the event loop only (no lock).

    What a client is, is the caller's choice (api/routes_query.py: its checked bearer token, else its address)."""

    def __init__(self, per_client: int) -> None:
        if per_client < 1:
            raise ValueError(f"per_client must be >= 1, got {per_client}")
        self.per_client = per_client
        self._running: dict[str, int] = {}

    def try_acquire(self, client: str) -> bool:
        running = self._running.get(client, 0)
        if running >= self.per_client:
            return False
        self._running[client] = running + 1
        return True

    def release(self, client: str) -> None:
        running = self._running.get(client, 0)
        assert running > 0, f"release without acquire for {client}"
        if running == 1:
            del self._running[client]
        else:
            self._running[client] = running - 1

    def running(self, client: str) -> int:
        return self._running.get(client, 0)
