"""The report of `--check` (`kvcalc models --check`, `kvcalc gpus --check`).

JSON: ``{"ok": bool, "files": n, "problems": ["<file>: <field>: <message>", ...]}``. The problems
also go to stderr in every format, so a CI log shows them whatever the format.
"""

from __future__ import annotations

from kvcalc.render.report import Report


def check_summary(problems: list[str], files: int, what: str) -> str:
    if problems:
        return f"{len(problems)} problem(s) in {files} {what} files"
    return f"ok: {files} {what} files are valid"


def check_report(problems: list[str], files: int, what: str, failed_exit_code: int) -> Report:
    summary = check_summary(problems, files, what)
    return Report(
        payload={"ok": not problems, "files": files, "problems": problems},
        records=[{"problem": p} for p in problems],
        fields=("problem",),
        lines=() if problems else (summary,),
        diagnostics=(*problems, summary) if problems else (),
        exit_code=failed_exit_code if problems else 0,
    )
