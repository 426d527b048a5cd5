"""`kvcalc offload`: what the tiers beyond HBM hold of a model's cache, and whether a cached prefix
is faster to bring back than to recompute."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from kvcalc.cli.app import (
    MODEL_HELP,
    ContextsOption,
    ReportFormat,
    ReportFormatOption,
    command_typer,
    complete_models,
    emit_report,
    fail,
    load_model,
    parse_ctx_list,
    parse_size,
)
from kvcalc.cli.deploy import DeploymentOptions, deployment_options

if TYPE_CHECKING:
    from kvcalc.engine.offload import Tier

DEFAULT_CONTEXT = "32k"

command_app = command_typer()

TierOption = typer.Option(
    None,
    "--tier",
    metavar="NAME:SIZE@RATE",
    help="NAME:SIZE@BANDWIDTH/s, e.g. cpu:512GB@64GB/s (repeatable) "
    "[default: host memory 2x the GPUs' over PCIe, one 4 TB NVMe at 7 GB/s per GPU]",
)


@command_app.command()
@deployment_options
def offload(
    model: str = typer.Argument(..., help=MODEL_HELP, autocompletion=complete_models),
    ctx: str = ContextsOption,
    tier: list[str] = TierOption,
    fmt: ReportFormat = ReportFormatOption,
    *,
    deploy: DeploymentOptions,
) -> None:
    """Tokens and sequences each tier holds at --ctx (default 32k), the time to load a cached
    prefix of that length back into HBM against recomputing its prefill at the GPUs' dense
    peak, and the prefix length from which loading wins."""
    from kvcalc.engine.capacity import capacity
    from kvcalc.engine.offload import default_tiers, tier_fit
    from kvcalc.render.offload import offload_report

    contexts = parse_ctx_list(ctx or DEFAULT_CONTEXT)
    if len(contexts) != 1:
        fail("--ctx: give one prefix length, e.g. --ctx 32k")
    context = contexts[0]
    dep = deploy.build(load_model(model, None, None, None), deploy.resolve_gpus())
    tiers = parse_tiers(tier) if tier else list(default_tiers(dep))
    fits = [tier_fit(dep, t, context) for t in tiers]
    emit_report(offload_report(capacity(dep, [context]), fits), fmt)


def parse_tiers(texts: list[str]) -> list[Tier]:
    from kvcalc.engine.units import shown

    tiers = [parse_tier(t) for t in texts]
    names = [t.name for t in tiers]
    for name in names:
        if names.count(name) > 1:
            fail(f"--tier: {shown(name)} is given twice; name each tier once")
    return tiers


def parse_tier(text: str) -> Tier:
    """``cpu:512GB@64GB/s`` -> a tier of 512 GB read at 64 GB/s."""
    from kvcalc.engine.offload import Tier
    from kvcalc.engine.units import shown

    example = "e.g. cpu:512GB@64GB/s"
    given = f"--tier {shown(text)}"
    name, colon, rest = text.partition(":")
    if not colon or not name.strip():
        fail(f"{given}: name the tier and its size, {example}")
    size, at, rate = rest.partition("@")
    if not at or not rate.strip():
        fail(f"{given}: give the bandwidth it is read back at, {example}")
    rate = rate.strip()
    if not rate.lower().endswith("/s"):
        fail(f"{given}: give the bandwidth per second, {example}")
    return Tier(
        name.strip().lower(),
        parse_size(size, given),
        parse_size(rate[:-2], given),
    )
