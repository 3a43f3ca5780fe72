"""What the three interlocked parts of the replication protocol ask of one another.

The controller, the fetch loop (`replication`) and the produce path call each other: the controller
moves the HW after an ISR change and completes waiting writes, the fetch loop asks the controller to
grow or shrink the ISR and tells the produce path the HW moved, the produce path tells the fetch loop
it appended. Each sees the others only through these protocols, so none of their modules imports
another's, and the observers below the controller (metrics, the ack ledger) read it through one too.

`Simulation` owns the concrete objects and satisfies the host protocols each component declares
beside itself (mypy checks that where it passes itself in); this module imports nothing of the
emulator, so it sits below every component.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

import numpy as np


class ControllerPort(Protocol):
    """The controller as the data plane and the observers use it."""

    @property
    def fenced(self) -> Mapping[int, bool]: ...

    @property
    def last_election(self) -> Mapping[int, tuple[int, str]]:
        """Partition -> (event seq, election kind) of its latest election."""

    def broker_eligible_for_isr(self, b: int) -> bool: ...

    def request_isr_change(self, p: int, add_slot: int | None = None,
                           remove_slots: list[int] | None = None) -> None: ...


class ReplicationPort(Protocol):
    """The fetch loop as the controller and the produce path use it."""

    def advance_hw(self, ps: np.ndarray) -> None: ...

    def data_appended(self, leader: int, ps: np.ndarray) -> None: ...


class ProducePort(Protocol):
    """The produce path's purgatory as the controller and the fetch loop use it."""

    def complete(self, p: int) -> None: ...

    def hw_advanced(self, ps: np.ndarray) -> None: ...
