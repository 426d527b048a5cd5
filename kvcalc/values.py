"""Reading the values every command takes: contexts and token counts (``8k``, ``128k``), sizes
(``80GB``), a model by name with its what-ifs (``--as``, ``--kv-heads``), the decode efficiencies.

Shared by the Python API and the command line (which reads them from here); a value refused
raises :class:`~kvcalc.errors.InputError` naming its input as the command line spells it
(``--ctx: ...``), its ``field`` the API's keyword (``ctx``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvcalc.errors import fail

if TYPE_CHECKING:
    from kvcalc.engine.spec import ModelSpec
    from kvcalc.engine.variant import AttentionVariant

#: The most sequences a batch may hold.
MAX_BATCH = 1_000_000


#: Field -> option, where the option's name is not the field's with dashes (the inverse of
#: :func:`kvcalc.errors.keyword`; no eviction input or compare row option is among them).
_OPTION_NAMES = {"weights_total": "--weights", "attention": "--as", "model": "MODEL"}


def option_name(field: str) -> str:
    """The command-line spelling of an engine field (``kv_memory`` -> ``--kv-memory``), as
    every command's errors name the deployment, SGLang and eviction options."""
    return _OPTION_NAMES.get(field, "--" + field.replace("_", "-"))


def parse_ctx_list(text: str, option: str = "--ctx") -> list[int]:
    """Parse one context or a comma-separated list (``8k,32k,128k``) into token counts."""
    from kvcalc.engine.units import UnitError, parse_context_list

    try:
        return parse_context_list(text)
    except UnitError as exc:
        fail(f"{option}: {exc}")


def one_length(text: str, option: str, example: str = "32k") -> int:
    """A token count as --ctx spells it (1000, 32k), one only; ``example`` is shown when a
    list is given."""
    lengths = parse_ctx_list(text, option)
    if len(lengths) != 1:
        fail(f"{option}: give one length, e.g. {example}")
    return lengths[0]


def parse_size(text: str, option: str) -> int:
    from kvcalc.engine.units import BareBytesError, UnitError, parse_bytes

    try:
        return parse_bytes(text)
    except BareBytesError as exc:
        # --weights 140B is most likely the parameter count, which the model already has.
        hint = "; or leave --weights out: kvcalc sizes the weights from the model" * (
            option == "--weights"
        )
        fail(f"{option}: {exc}{hint}")
    except UnitError as exc:
        fail(f"{option}: {exc}")


def parse_attention_variant(text: str) -> AttentionVariant:
    """``--as``: ``mha``, ``gqa:G``, ``mqa`` or ``mla:LATENT[+ROPE]`` (e.g. ``mla:512+64``)."""
    from kvcalc.engine.units import number_text_problem, shown
    from kvcalc.engine.variant import AttentionVariant, VariantError

    kind, _, numbers = text.strip().lower().partition(":")
    usage = "use mha, gqa:G (e.g. gqa:8), mqa or mla:LATENT[+ROPE] (e.g. mla:512+64)"
    problem = number_text_problem(numbers)
    if problem is not None:
        fail(f"--as: {shown(text)!r}: {problem}")
    try:
        if kind in ("mha", "mqa") and not numbers:
            return AttentionVariant(kind)  # type: ignore[arg-type]
        if kind == "gqa" and numbers.isdigit():
            return AttentionVariant("gqa", kv_heads=int(numbers))
        latent, _, rope = numbers.partition("+")
        if kind == "mla" and latent.isdigit() and (rope.isdigit() or not rope):
            return AttentionVariant("mla", latent=int(latent), rope=int(rope or 0))
    except VariantError as exc:
        fail(f"--as {shown(text)}: {exc}")
    fail(f"--as: {shown(text)!r} is not an attention variant; {usage}")


def load_model(
    name: str | ModelSpec,
    kv_heads: int | None,
    head_dim: int | None,
    layers: int | None,
    attention: str | None = None,
) -> ModelSpec:
    """Resolve MODEL (registry name, Hub repo id or config.json path; a spec is taken as it is)
    and apply the what-ifs:
    ``--as`` first (another attention), then the head and layer overrides."""
    from kvcalc.registry.load import resolve_model

    model = resolve_model(name) if isinstance(name, str) else name
    if attention is not None:
        from kvcalc.engine.variant import VariantError, as_attention

        variant = parse_attention_variant(attention)
        if kv_heads is not None:
            fail(f"--kv-heads: --as {variant.label} sets the KV heads; give one of the two")
        try:
            model = as_attention(model, variant)
        except VariantError as exc:
            fail(f"--as {variant.label}: {exc}")
    problem = head_override_problem(model) if kv_heads or head_dim else None
    if problem is not None:
        option = "--kv-heads" if kv_heads else "--head-dim"
        fail(f"{option}: {problem}")
    try:
        return model.with_overrides(kv_heads=kv_heads, head_dim=head_dim, num_layers=layers)
    except ValueError as exc:
        fail(f"--kv-heads: {exc}")


def head_override_problem(model: ModelSpec) -> str | None:
    """Why ``model``'s KV heads or head size cannot be overridden (None: they can)."""
    if model.accepts_head_overrides():
        return None
    return f"{model.id} has no KV heads to change (its layers are MLA or states)"


def check_mbu(mbu: float) -> float:
    from kvcalc.engine.decode import MIN_MBU, mbu_in_range

    if not mbu_in_range(mbu):
        fail(f"--mbu: {mbu:g} is not a fraction in [{MIN_MBU}, 1], e.g. 0.8")
    return mbu


def check_mfu(mfu: float | None) -> None:
    if mfu is not None and not 0 < mfu <= 1:
        fail(f"--mfu: {mfu} is not a fraction in (0, 1], e.g. 0.5")


