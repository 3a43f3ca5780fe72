"""A fuzz pass over the OpenAPI schema with schemathesis: every operation gets generated valid and invalid
requests, with the bearer token (so mutations are fuzzed too), a wrong one, a malformed header or none, and no answer
may be a 5xx.

schemathesis' pytest plugin does not load under pytest 9 yet, so the operations are driven through its
Hypothesis strategies directly."""

from __future__ import annotations

from typing import Any

import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from api.app import create_app
from tests.api.conftest import TOKEN, api_settings

EXAMPLES_PER_OPERATION = 40
AUTHORIZATIONS = {"token": {"Authorization": f"Bearer {TOKEN}"}, "wrong token": {"Authorization": "Bearer nope"},
                  "malformed": {"Authorization": "Basic dTpw"}, "none": {}}


def test_no_operation_answers_5xx(lake_copy: str) -> None:
    schema = schemathesis.openapi.from_asgi("/openapi.json", create_app(api_settings(lake_copy)))
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 15, [op.label for op in operations]
    failures: list[str] = []
    calls = [0]
    sent_with: set[str] = set()
    for op in operations:
        @given(case=op.as_strategy(), auth=st.sampled_from(sorted(AUTHORIZATIONS)))
        @settings(max_examples=EXAMPLES_PER_OPERATION, deadline=None, suppress_health_check=list(HealthCheck),
                  database=None)
        def fuzz(case: Any, auth: str) -> None:
            response = case.call(headers=AUTHORIZATIONS[auth])
            calls[0] += 1
            sent_with.add(auth)
            if response.status_code >= 500:
                failures.append(f"{case.method} {case.formatted_path} {case.query or ''} -> "
                                f"{response.status_code}: {response.text[:200]}")

        fuzz()
    assert failures == []
    assert calls[0] >= 5 * len(operations) and sent_with == set(AUTHORIZATIONS)
