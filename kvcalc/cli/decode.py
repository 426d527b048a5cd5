"""`kvcalc decode`: time of one decode step, split into weight reads, KV reads and compute."""

from __future__ import annotations

from typing import Any

from kvcalc.cli.app import (
    ModelArgument,
    ReportFormat,
    ReportFormatOption,
    command_typer,
    declared_options,
    emit_report,
)
from kvcalc.cli.deploy import deployment_options, engine_options
from kvcalc.cli.eviction import EvictionOptions, eviction_options
from kvcalc.command_inputs import DECODE_INPUTS
from kvcalc.deploy import DeploymentOptions, EngineChoice, EngineFlags

command_app = command_typer()


@command_app.command()
@deployment_options
@engine_options
@eviction_options
@declared_options(DECODE_INPUTS)
def decode(
    model: str = ModelArgument,
    fmt: ReportFormat = ReportFormatOption,
    *,
    given: dict[str, Any],
    deploy: DeploymentOptions,
    engine: EngineChoice,
    flags: EngineFlags,
    evict: EvictionOptions,
) -> None:
    """Decode-step time at each context (default 8k): weight-read, KV-read and compute ms, TPOT,
    tokens/s, at --batch sequences (default: the most that fit, as --engine sizes the cache);
    an eviction policy reads only the tokens it keeps (SnapKV: at --prompt + --gen); beside the
    roofline, a realistic estimate term by term (--runtime's profile; --request-rate's load)."""
    from kvcalc.api import decode as decode_of
    from kvcalc.api import given_inputs

    result = decode_of(
        model, gpus=deploy.gpus or "", engine=engine.engine, **given,
        **given_inputs(deploy, flags, evict),
    )
    emit_report(result.report(), fmt)
