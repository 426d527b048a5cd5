"""What every start-up log parser shares: lines cleaned of terminal colours and of the prefixes
engines and launchers put before a message, and the figures they print.

A line of a vLLM log reads ``(Worker_TP1 pid=445) INFO 04-22 01:36:26 [gpu_worker.py:436]
Available KV cache memory: 63.76 GiB``; of an SGLang log ``[2025-01-23 19:35:15 TP0] Load weight
begin. avail mem=78.81 GB``. Both may be wrapped in ANSI colours, prefixed by a container
runtime's timestamp, and interleaved across workers. Pure text in, data out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

from kvcalc.engine.units import GiB

#: ANSI escape sequences (colours, cursor moves) and carriage-return progress bars.
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-Z\\-_]")
#: vLLM's process prefix: ``(EngineCore_DP0 pid=283)``, ``(Worker_TP1 pid=445)``.
_PROCESS = re.compile(r"\((?P<label>[A-Za-z][\w\-]*) pid=(?P<pid>\d+)\)")
#: SGLang's prefix: ``[2025-01-23 19:35:15 TP0]``, ``[2026-01-31 13:50:39 DP0 TP1 EP1]``.
_SGLANG_PREFIX = re.compile(
    r"\[\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?P<rank>(?: [A-Z]{2,4}\d+)*)\]"
)
#: The most of a log read: a start-up states its figures within the first lines; a file larger
#: than this is refused rather than read whole.
MAX_LOG_BYTES = 64 << 20


@dataclass(frozen=True)
class LogLine:
    """One message of the log, its worker's label (``TP1``, ``PP0``, ``EngineCore``; empty when
    the line names none) and process id (None: not printed)."""

    text: str
    worker: str
    pid: int | None
    number: int


def clean(raw: str) -> str:
    """The line without colours, and only its last carriage-return segment (a progress bar
    rewritten in place keeps its final state)."""
    text = _ANSI.sub("", raw)
    if "\r" in text:
        text = text.rsplit("\r", 1)[-1]
    return text.strip()


def log_lines(text: str) -> list[LogLine]:
    """Every non-empty line of ``text``, cleaned, with the worker that printed it."""
    lines = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = clean(raw)
        if not line or line.startswith("#"):
            continue
        worker, pid = "", None
        process = _PROCESS.search(line[:200])
        if process is not None:
            worker, pid = process["label"], int(process["pid"])
        else:
            prefix = _SGLANG_PREFIX.search(line[:200])
            if prefix is not None:
                worker = prefix["rank"].strip()
        lines.append(LogLine(line, worker, pid, number))
    return lines


@dataclass(frozen=True)
class Logged:
    """A memory figure as a log prints it: GiB with a few decimals (``63.76``), so the true value
    is within half of its last digit."""

    text: str

    @property
    def gib(self) -> Fraction:
        return Fraction(self.text)

    @property
    def bytes(self) -> int:
        return round(self.gib * GiB)

    @property
    def half_step_bytes(self) -> int:
        """Half the last printed digit, in bytes: 0.005 GiB for two decimals (vLLM drops trailing
        zeros, ``57.5``, but rounds to two: a shorter figure has the same step)."""
        decimals = max(2, len(self.text.partition(".")[2]))
        return round(Fraction(GiB, 2 * 10**decimals))

    @property
    def low(self) -> int:
        return self.bytes - self.half_step_bytes

    @property
    def high(self) -> int:
        return self.bytes + self.half_step_bytes

    def __str__(self) -> str:
        return f"{self.text} GiB"


def number(text: str) -> int:
    """``1,044,688`` -> 1044688."""
    return int(text.replace(",", "").replace("_", ""))


def first(pattern: re.Pattern[str], lines: list[LogLine], group: int = 1) -> str | None:
    """The first match's ``group`` in any line."""
    for line in lines:
        found = pattern.search(line.text)
        if found is not None:
            return found[group]
    return None
