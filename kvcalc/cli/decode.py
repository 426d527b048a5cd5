"""`kvcalc decode`: time of one decode step, split into weight reads, KV reads and compute."""

from __future__ import annotations

import typer

from kvcalc.cli.app import (
    MAX_BATCH,
    ReportFormat,
    ReportFormatOption,
    command_typer,
    emit_report,
    fail,
    load_model,
    parse_ctx_list,
)
from kvcalc.cli.deploy import DeploymentOptions, deployment_options

command_app = command_typer()


@command_app.command()
@deployment_options
def decode(
    model: str = typer.Argument(..., help="registry name or config.json path"),
    ctx: str = typer.Option("8k", "--ctx", "-c", help="context(s), e.g. 8k or 8k,32k,128k"),
    batch: int = typer.Option(
        None, "--batch", "-b", min=1, max=MAX_BATCH, help="sequences [default: the max batch]"
    ),
    mbu: float = typer.Option(
        1.0, "--mbu", help="memory-bandwidth utilisation; 1.0 = the roofline bound"
    ),
    fmt: ReportFormat = ReportFormatOption,
    *,
    deploy: DeploymentOptions,
) -> None:
    """Decode-step time at each context: weight-read, KV-read and compute ms, TPOT, tokens/s."""
    from kvcalc.engine.capacity import capacity
    from kvcalc.engine.decode import MIN_MBU, decode_step_for, mbu_in_range
    from kvcalc.render.decode import decode_report

    if not mbu_in_range(mbu):
        fail(f"--mbu: {mbu:g} is not a fraction in [{MIN_MBU}, 1], e.g. 0.8")
    gpu_set = deploy.resolve_gpus()
    dep = deploy.build(load_model(model, None, None, None), gpu_set)
    contexts = parse_ctx_list(ctx)
    cap = capacity(dep, contexts)
    steps = []
    warnings = []
    reason = None
    for fit in cap.contexts:
        fits = fit.max_batch_per_replica
        if fits < 1:
            reason = cap.reason or f"no sequence of {fit.context_tokens:,} tokens fits"
            break
        n = batch if batch is not None else fits
        if n > fits:
            # A what-if beyond memory is still timed, but never silently.
            warnings.append(
                f"warning: --batch {n:,} exceeds the {fits:,} sequences of "
                f"{fit.context_tokens:,} tokens that fit in the KV budget"
            )
        steps.append(decode_step_for(dep, batch=n, context_tokens=fit.context_tokens, mbu=mbu))
    emit_report(decode_report(dep, steps, mbu, reason, warnings), fmt)
