"""A config's result, as the run keeps it between measuring and recording."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Result:
    number: int
    config: dict[str, Any]
    status: str
    samples_ms: list[float] = field(default_factory=list)
    error: str | None = None
    counted: bool = True        # counts against the trial budget (constraint violations do not)
    # how far recording it got (a retry after a database outage goes on from there)
    stored: bool = field(default=False, repr=False, compare=False)
    told: bool = field(default=False, repr=False, compare=False)

    @property
    def median_ms(self) -> float | None:
        if self.status != "ok" or not self.samples_ms:
            return None
        return median(self.samples_ms)

    @property
    def spread(self) -> dict[str, float] | None:
        if not self.samples_ms:
            return None
        from tuner.measure import spread

        return spread(self.samples_ms)


def median(samples: list[float]) -> float:
    s = sorted(samples)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


@dataclass
class InFlight:
    """A config sent to the child (its answer not read yet), or one whose result is already known."""
    trial: Any
    config: dict[str, Any]
    result: Result | None = None
    task: Any = None                    # its compile (tuner/compile_queue.py), for one staged and not sent
    request: dict[str, Any] | None = None   # what goes to the child, for one staged (tuner/relay.py)
