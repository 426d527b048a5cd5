"""`kvcalc import-hf`: a config.json path or a Hub repo id as a registry file for review."""

from __future__ import annotations

import typer

from kvcalc.cli.app import OUTPUT_PANEL, ReportFormat, command_typer, emit_report

command_app = command_typer()

#: YAML by default: the output is a registry file (`> model_configs/models/NAME.yaml`).
ImportFormatOption = typer.Option(
    ReportFormat.yaml,
    "--format",
    "-f",
    case_sensitive=False,
    rich_help_panel=OUTPUT_PANEL,
    help="yaml: the registry file; json: the same entry; csv, table, markdown: its fields",
)


@command_app.command(name="import-hf")
def import_hf(
    config_or_id: str = typer.Argument(
        ...,
        metavar="CONFIG_OR_ID",
        help="config.json path (or its folder), or Hugging Face repo id org/name[@revision]",
    ),
    name: str = typer.Option(
        None,
        "--name",
        metavar="ID",
        help="the entry's id and file name [default: the repo name, lowercased]",
    ),
    hf_repo: str = typer.Option(
        None,
        "--hf-repo",
        metavar="ORG/NAME",
        help="the repo (org/name) of a config.json path that states no _name_or_path",
    ),
    fmt: ReportFormat = ImportFormatOption,
) -> None:
    """Write a registry entry (verification: unreviewed) for a config.json, to review and
    commit: kvcalc import-hf ORG/NAME > model_configs/models/NAME.yaml"""
    from kvcalc.registry.hf.entry import assumed_warnings, import_entry, registry_clashes
    from kvcalc.render.import_hf import import_report

    entry = import_entry(config_or_id, name, hf_repo)
    emit_report(import_report(entry, [*assumed_warnings(entry), *registry_clashes(entry)]), fmt)
