"""`kvcalc decode`: time of one decode step, split into weight reads, KV reads and compute."""

from __future__ import annotations

from typing import TYPE_CHECKING

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
    check_mbu,
    check_mfu,
    command_typer,
    complete_models,
    emit_report,
    load_model,
    parse_ctx_list,
)
from kvcalc.cli.deploy import (
    DeploymentOptions,
    EngineChoice,
    EngineFlags,
    deployment_options,
    engine_options,
    engine_pool,
)
from kvcalc.cli.eviction import EvictionOptions, eviction_options

if TYPE_CHECKING:
    from kvcalc.engine.deployment import Deployment
    from kvcalc.render.decode import TimedStep

DEFAULT_CONTEXT = "8k"

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
    from kvcalc.render.decode import decode_report

    check_mbu(mbu)
    check_mfu(mfu)
    chosen = engine.checked(deploy, flags)
    evict.check_applies(chosen)
    gpu_set = deploy.resolve_gpus()
    spec = load_model(model, None, None, None, attention)
    contexts = evict.contexts(ctx, lambda: parse_ctx_list(DEFAULT_CONTEXT))
    policy, notes = evict.checked(spec, contexts)
    dep = deploy.build(spec, gpu_set, chosen, policy)
    max_batches, why = engine_pool(dep, chosen, flags).max_batches(contexts)
    steps = []
    warnings = list(notes)
    reason = None
    for context, fits in zip(contexts, max_batches, strict=True):
        if fits < 1:
            reason = why or f"no sequence of {context:,} tokens fits"
            break
        n = batch if batch is not None else fits
        if n > fits:
            # A what-if beyond memory is still timed, but never silently.
            warnings.append(
                f"--batch {n:,} exceeds the {fits:,} sequences of "
                f"{context:,} tokens that fit in the KV budget"
            )
        steps.append(timed_step(dep, n, context, mbu, mfu))
    emit_report(decode_report(dep, steps, mbu, reason, warnings, chosen), fmt)


def timed_step(
    dep: Deployment, batch: int, context: int, mbu: float, mfu: float | None
) -> TimedStep:
    """The roofline step at ``mbu`` and, where the replica's links can be timed, the realistic
    TPOT and the TTFT of the sequence's prompt (``context`` tokens, or SnapKV's prompt)."""
    from kvcalc.engine.decode import decode_step_for
    from kvcalc.engine.latency import (
        can_time_communication,
        prefill_estimate,
        prompt_tokens_at,
        tpot_estimate,
    )
    from kvcalc.render.decode import TimedStep

    roofline = decode_step_for(dep, batch=batch, context_tokens=context, mbu=mbu)
    if not can_time_communication(dep):
        return TimedStep(roofline, None, None)
    return TimedStep(
        roofline,
        tpot_estimate(dep, batch=batch, context_tokens=context, mfu=mfu),
        prefill_estimate(dep, prompt_tokens=prompt_tokens_at(dep, context), mfu=mfu),
    )
