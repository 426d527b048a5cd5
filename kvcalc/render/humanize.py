"""Human-readable quantities. Machine output never goes through here."""

from __future__ import annotations


def format_binary(n_bytes: int | float) -> str:
    """Human size in binary units (KiB, MiB, GiB, TiB)."""
    value = float(n_bytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:,.0f} B" if unit == "B" else f"{value:,.2f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def format_decimal(n_bytes: int | float) -> str:
    """Human size in decimal units (kB, MB, GB, TB)."""
    value = float(n_bytes)
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if abs(value) < 1000 or unit == "TB":
            return f"{value:,.0f} B" if unit == "B" else f"{value:,.2f} {unit}"
        value /= 1000
    raise AssertionError("unreachable")


def both_units(n_bytes: int) -> str:
    """Binary units with the decimal ones beside them: ``40.00 GiB (42.95 GB)``."""
    return f"{format_binary(n_bytes)} ({format_decimal(n_bytes)})"


def exact_and_units(n_bytes: int) -> str:
    """The exact count with both units beside it: ``42,949,672,960 B = 40.00 GiB (42.95 GB)``
    (below a KiB, the count alone)."""
    if abs(n_bytes) < 1024:
        return f"{n_bytes:,} B"
    return f"{n_bytes:,} B = {both_units(n_bytes)}"
