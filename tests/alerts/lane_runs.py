"""The alert lane run to the end of the bronze there is (available-now), as the evaluators' tests run it."""

from __future__ import annotations

from typing import Any

from foundation.settings import PipelineSettings
from jobs.alert_lane import RunningLane, start_alert_lane


def lane_to_the_end(spark: Any, settings: PipelineSettings) -> RunningLane:
    """The lane over `settings.lakehouse` without validate's checkpoint (from the first commit), its queued records
    written and its webhook lanes idle and stopped once the query ends. `validate.trigger` must be available-now."""
    assert settings.validate_.trigger == "available-now"
    lane = start_alert_lane(spark, settings, None, log=lambda _: None)
    assert lane is not None, "no rule on a silver table"
    lane.query.awaitTermination()
    assert lane.query.exception() is None, lane.query.exception()
    lane.finish()
    return lane
