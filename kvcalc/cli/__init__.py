"""The command-line shell: parse options, call the registry and engine, hand results to render.

Exit codes: 0 success; 1 a valid question whose answer is "does not fit" (or a failed check);
2 bad input (unknown model or GPU, malformed option, bad registry file).
"""

from __future__ import annotations


def main() -> None:
    from kvcalc.cli.app import app

    app()
