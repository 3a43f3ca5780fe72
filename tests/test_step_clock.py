"""The executor route's step line: what the job prints is what the bench reads back."""

from __future__ import annotations

from jobs.step_clock import StepClock, parse_steps


def test_the_line_of_a_clock_reads_back_as_its_steps_summed_by_name() -> None:
    clock = StepClock(started=100.0)
    clock.steps = [("source, de-duplication and cache", 12.34), ("runs silver", 0.5), ("runs silver", 0.3)]
    line = clock.line(7, 1_234_567)
    assert line.startswith("validate: batch 7, 1,234,567 rows in ")
    output = f"something else\n{line}\nvalidate: stopped"
    assert parse_steps(output) == {"source, de-duplication and cache": 12.3, "runs silver": 0.8}


def test_only_the_last_batch_line_counts_and_no_line_gives_no_steps() -> None:
    first, second = StepClock(), StepClock()
    first.lap("dq record")
    second.steps = [("tables present", 2.0)]
    assert parse_steps(f"{first.line(0, 10)}\n{second.line(1, 20)}") == {"tables present": 2.0}
    assert parse_steps("validate: one query over 2 tables") == {}
