"""Tables the API owns: silences (Alertmanager-like), appended as versions so nothing is ever rewritten."""

from __future__ import annotations

import pyarrow as pa

from schemas.bronze import TS
from schemas.table import TableDef, columns

MATCHER = pa.struct([
    pa.field("name", pa.string(), nullable=False),
    pa.field("value", pa.string(), nullable=False),
    pa.field("is_regex", pa.bool_(), nullable=False),
    pa.field("is_equal", pa.bool_(), nullable=False),
])

_schema, _docs = columns(
    ("silence_id", pa.string(), False, "the silence's id (returned by POST /api/v1/silences)"),
    ("version", pa.int32(), False, "1 when created; each change (expiry) appends the next version"),
    ("matchers", pa.list_(MATCHER), False, "label matchers, all of which must match an alert's labels"),
    ("starts_at", TS, False, "when the silence begins to suppress delivery"),
    ("ends_at", TS, False, "when it stops (DELETE sets this to the time of the request)"),
    ("created_by", pa.string(), False, "who created it"),
    ("comment", pa.string(), False, "why"),
    ("updated_at", TS, False, "wall time this version was written"),
)
SILENCES = TableDef(
    "api", "silences", _schema, ("silence_id", "version"),
    "Alert silences: matchers and a time range. The latest version of each silence_id is its current state; "
    "an active silence suppresses webhook delivery of matching alerts (evaluation goes on).", _docs,
)
