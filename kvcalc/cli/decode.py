"""`kvcalc decode`: time of one decode step, split into weight reads, KV reads and compute."""

from __future__ import annotations

import typer

from kvcalc.cli.app import (
    MODEL_HELP,
    AttentionOption,
    BatchOption,
    ContextsOption,
    MbuOption,
    MfuOption,
    ReportFormat,
    ReportFormatOption,
    command_typer,
    complete_models,
    emit_report,
)
from kvcalc.cli.deploy import deployment_options, engine_options
from kvcalc.cli.eviction import EvictionOptions, eviction_options
from kvcalc.deploy import DeploymentOptions, EngineChoice, EngineFlags

command_app = command_typer()


@command_app.command()
@deployment_options
@engine_options
@eviction_options
def decode(
    model: str = typer.Argument(..., help=MODEL_HELP, autocompletion=complete_models),
    ctx: str = ContextsOption,
    attention: str = AttentionOption,
    batch: int = BatchOption,
    mbu: float = MbuOption,
    mfu: float = MfuOption,
    fmt: ReportFormat = ReportFormatOption,
    *,
    deploy: DeploymentOptions,
    engine: EngineChoice,
    flags: EngineFlags,
    evict: EvictionOptions,
) -> None:
    """Decode-step time at each context (default 8k): weight-read, KV-read and compute ms, TPOT,
    tokens/s, at --batch sequences (default: the most that fit, as --engine sizes the cache);
    an eviction policy reads only the tokens it keeps (SnapKV: at --prompt + --gen); beside the
    roofline, a realistic TPOT and TTFT estimate term by term."""
    from kvcalc.api import decode as decode_of
    from kvcalc.api import given_inputs

    result = decode_of(
        model,
        gpus=deploy.gpus or "",
        ctx=ctx,
        attention=attention,
        batch=batch,
        mbu=mbu,
        mfu=mfu,
        engine=engine.engine,
        **given_inputs(deploy, flags, evict),
    )
    emit_report(result.report(), fmt)
