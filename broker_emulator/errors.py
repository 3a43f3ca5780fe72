"""Domain errors of the emulator."""

from __future__ import annotations


class ScenarioError(ValueError):
    """Raised when a scenario file is malformed or describes an impossible cluster.

    The message always names the file, the key (as a dotted path) and the offending value.
    """

    def __init__(self, source: str, key: str, value: object, problem: str) -> None:
        self.source = source
        self.key = key
        self.value = value
        self.problem = problem
        super().__init__(f"{source}: {key}={value!r}: {problem}")


class InvalidReplicationFactor(ValueError):
    """Raised when a topic asks for more replicas than there are live brokers (INVALID_REPLICATION_FACTOR)."""


class InvariantViolation(AssertionError):
    """Raised when a replication invariant fails; the message ends with how to reproduce the run."""
