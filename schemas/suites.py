"""Each table's expectations as a real Great Expectations suite (imported only where GE is used)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from schemas.table import TableDef

if TYPE_CHECKING:
    import great_expectations as gx


def expectation_suite(td: TableDef) -> gx.ExpectationSuite:
    """A GE `ExpectationSuite` named after the table; each expectation carries its label in `meta`.

    Needs an active GE data context (`great_expectations.get_context()`), as GE 1.x requires.
    """
    import great_expectations as gx
    from great_expectations.expectations.expectation_configuration import ExpectationConfiguration

    suite = gx.ExpectationSuite(name=td.qualified_name)
    for e in td.expectations:
        config = ExpectationConfiguration(type=e.type, kwargs=e.args, meta={"label": e.label})
        suite.add_expectation(config.to_domain_obj())
    return suite
