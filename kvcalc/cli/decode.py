"""`kvcalc decode`: time of one decode step, split into weight reads, KV reads and compute."""

from __future__ import annotations

import typer

from kvcalc.cli import deploy
from kvcalc.cli.app import (
    EXIT_DOES_NOT_FIT,
    MAX_BATCH,
    FormatOption,
    KvDtypeOption,
    OutputFormat,
    command_typer,
    emit,
    fail,
    load_model,
    parse_ctx_list,
)

command_app = command_typer()


@command_app.command()
def decode(
    model: str = typer.Argument(..., help="registry name or config.json path"),
    gpus: str = deploy.GpusOption,
    ctx: str = typer.Option("8k", "--ctx", "-c", help="context(s), e.g. 8k or 8k,32k,128k"),
    batch: int = typer.Option(
        None, "--batch", "-b", min=1, max=MAX_BATCH, help="sequences [default: the max batch]"
    ),
    mbu: float = typer.Option(
        1.0, "--mbu", help="memory-bandwidth utilisation; 1.0 = the roofline bound"
    ),
    tp: int = deploy.TpOption,
    pp: int = deploy.PpOption,
    gpu_util: float = deploy.GpuUtilOption,
    reserve: float = deploy.ReserveOption,
    overhead: str = deploy.OverheadOption,
    gpu_memory: str = deploy.GpuMemoryOption,
    weights: str = deploy.WeightsOption,
    kv_memory: str = deploy.KvMemoryOption,
    weight_dtype: str = deploy.WeightDtypeOption,
    kv_dtype: str = KvDtypeOption,
    block_size: int = deploy.BlockSizeOption,
    prefix_shared: int = deploy.PrefixOption,
    fmt: OutputFormat = FormatOption,
) -> None:
    """Decode-step time at each context: weight-read, KV-read and compute ms, TPOT, tokens/s."""
    from kvcalc.engine.decode import decode_step

    if not 0 < mbu <= 1:
        fail(f"--mbu: {mbu} is not a fraction in (0, 1], e.g. 0.8")
    gpu_set = deploy.resolve_gpus(gpus)
    spec = load_model(model, None, None, None)
    dep = deploy.deployment(spec, gpu_set, **deploy.option_values(locals(), spec))
    contexts = parse_ctx_list(ctx)
    cap = dep.capacity(contexts)
    flops = gpu_set.accelerator.dense_flops_for(deploy.compute_dtype_for(dep.precision))
    steps = []
    for i, context in enumerate(contexts):
        # Default batch: what fits at this context on one replica (as `kvcalc batch` reports).
        fits = cap.contexts[i].max_batch // cap.replicas
        n = batch if batch is not None else fits
        if fits < 1:
            reason = cap.reason or f"no sequence of {context:,} tokens fits"
            typer.echo(f"does not fit: {reason}", err=True)
            raise typer.Exit(EXIT_DOES_NOT_FIT)
        if n > fits:
            # A what-if beyond memory is still timed, but never silently.
            typer.echo(
                f"warning: --batch {n:,} exceeds the {fits:,} sequences of {context:,} tokens "
                "that fit in the KV budget",
                err=True,
            )
        steps.append(
            decode_step(
                spec,
                batch=n,
                context_tokens=context,
                kv_dtype=dep.kv_dtype,
                precision=dep.precision,
                tp=dep.tp,
                pp=dep.pp,
                bandwidth_per_gpu=gpu_set.accelerator.bandwidth_bytes_per_s,
                flops_per_gpu=flops,
                mbu=mbu,
                weights_total_bytes=dep.weights_total_override,
            )
        )
    if fmt is OutputFormat.json:
        from kvcalc.render.capacity import decode_payload
        from kvcalc.render.json import dumps

        payloads = [decode_payload(s, str(gpu_set)) for s in steps]
        emit(dumps(payloads[0] if len(payloads) == 1 else payloads))
        return
    from kvcalc.render.capacity import decode_table
    from kvcalc.render.console import console

    title = (
        f"{spec.name} ({spec.id}) decode step on {gpu_set}: tp {dep.tp}, pp {dep.pp}, "
        f"weights {deploy.weight_name(dep)}, KV {dep.kv_dtype.name}, mbu {mbu:g}"
    )
    console().print(decode_table(steps, title))
