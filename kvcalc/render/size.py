"""The report of `kvcalc size`: KV bytes per token, per sequence and per batch, by layer group.

JSON: one object whatever the number of contexts; what does not depend on the context (model,
dtype, batch, bytes per token, the ``eviction`` policy) at the top, and one entry per context under
``contexts`` (with ``tokens_held``, the tokens the policy keeps).
"""

from __future__ import annotations

from typing import Any

from kvcalc.engine.kv import GroupKV, KVSize
from kvcalc.engine.kvformat import format_bits
from kvcalc.render.eviction import eviction_notes, eviction_payload, eviction_title
from kvcalc.render.humanize import both_units, format_binary
from kvcalc.render.kvformat import shows_bits
from kvcalc.render.report import Column, Report, Section, gib, number, text


def group_payload(group: GroupKV) -> dict[str, Any]:
    return {
        "kind": group.kind,
        "detail": group.mixer.detail(),
        "layers": group.layers,
        "kv_bytes_per_token": group.bytes_per_token,
        "tokens_held": group.tokens_held,
        "state_bytes": group.state_bytes,
        "kv_bytes_per_sequence": group.bytes,
    }


def context_payload(size: KVSize) -> dict[str, Any]:
    payload = {
        "context_tokens": size.context_tokens,
        "tokens_held": size.eviction.tokens_held(size.context_tokens),
        "kv_bytes_per_sequence": size.bytes_per_sequence,
        "kv_bytes_total": size.bytes_total,
        "groups": [group_payload(g) for g in size.groups],
    }
    # The MTP layers, in no total: loaded only with speculative decoding.
    return payload | {"mtp": group_payload(size.mtp)} if size.mtp else payload


def size_payload(sizes: list[KVSize], name: str) -> dict[str, Any]:
    # Bytes per token do not depend on the context (windows cap tokens held, not bytes per token).
    first = sizes[0]
    return {
        "model": first.model_id,
        "model_name": name,
        "kv_dtype": first.kv_dtype,
        "kv_bits_per_value": None if first.kv_bits is None else float(first.kv_bits),
        "batch": first.batch,
        "kv_bytes_per_token": first.bytes_per_token,
        "eviction": eviction_payload(first.eviction),
        "contexts": [context_payload(s) for s in sizes],
    }


def group_record(size: KVSize, group: GroupKV) -> dict[str, Any]:
    """One CSV row: a layer group at one context (a hybrid model has several per context)."""
    return {
        "model": size.model_id,
        "kv_dtype": size.kv_dtype,
        "batch": size.batch,
        "context_tokens": size.context_tokens,
        "eviction": size.eviction.policy,
        "kind": group.kind,
        "detail": group.mixer.detail(),
        **{k: v for k, v in group_payload(group).items() if k != "kind"},
    }


def total_record(size: KVSize) -> dict[str, Any]:
    return {
        "kind": "total",
        "layers": sum(g.layers for g in size.groups),
        "kv_bytes_per_token": size.bytes_per_token,
        "state_bytes": sum(g.state_bytes for g in size.groups),
        "kv_bytes_per_sequence": size.bytes_per_sequence,
    }


def size_columns(with_state: bool) -> list[Column]:
    state = [number("state bytes", "state_bytes")] if with_state else []
    return [
        text("kind", "kind", "name"),
        text("detail", "detail"),
        number("layers", "layers", ""),
        number("bytes/token", "kv_bytes_per_token"),
        number("tokens held", "tokens_held"),
        *state,
        number("bytes/sequence", "kv_bytes_per_sequence"),
        gib("GiB", "kv_bytes_per_sequence"),
    ]


def format_lines(size: KVSize) -> list[str]:
    """The effective bits of a format with scales or a full-precision part (int4, group 32,
    fp16 scale and zero point: 5.0 bits, not 4), and what its per-token figure means."""
    fmt, bits = size.kv_format, size.kv_bits
    if fmt is None or bits is None or not shows_bits(fmt, bits):
        return []
    lines = [
        f"KV format:    {size.kv_dtype} = {format_bits(bits)} bits per value "
        f"({format_bits(fmt.nominal_bits)} + scales)"
    ]
    note = fmt.precision_note
    return [*lines, f"              {note}"] if note else lines


def kind_notes(size: KVSize) -> list[str]:
    """What the KV format means for a kind with its own layout (DeepSeek-V4's packed entry)."""
    notes = dict.fromkeys(n for g in size.groups if (n := g.mixer.format_note()))
    return [f"KV layout:    {n}" for n in notes]


def mtp_lines(size: KVSize) -> list[str]:
    """The checkpoint's MTP layers, which no figure above counts, and what they would add."""
    mtp = size.mtp
    if mtp is None:
        return []
    layers, them, they = ("layer", "it", "it") if mtp.layers == 1 else ("layers", "them", "they")
    return [
        f"MTP:          {mtp.layers} multi-token-prediction {layers} ({mtp.mixer.detail()}) "
        f"not counted: vLLM and SGLang load {them} only with speculative decoding; {they} would "
        f"add {mtp.bytes_per_token:,} B per token, {mtp.bytes:,} B per sequence here"
    ]


def size_summary(size: KVSize) -> list[str]:
    lines = [
        *format_lines(size),
        *kind_notes(size),
        *mtp_lines(size),
        f"per token:    {size.bytes_per_token:,} B ({format_binary(size.bytes_per_token)})",
        f"per sequence: {size.bytes_per_sequence:,} B = {both_units(size.bytes_per_sequence)}",
    ]
    if size.batch > 1:
        lines.append(
            f"batch of {size.batch:,}: {size.bytes_total:,} B = {both_units(size.bytes_total)}"
        )
    if size.eviction.lossy:
        held = size.eviction.tokens_held(size.context_tokens)
        lines.append(f"tokens held:  {held:,} of {size.context_tokens:,}")
    return [*lines, *eviction_notes(size.eviction)]


def size_section(size: KVSize, name: str, records: list[dict[str, Any]]) -> Section:
    title = (
        f"{name} ({size.model_id}): KV cache at {size.context_tokens:,} tokens, "
        f"batch {size.batch:,}, {size.kv_dtype}{eviction_title(size.eviction)}"
    )
    with_state = any(g.state_bytes for g in size.groups)
    totals = [total_record(size)] if len(size.groups) > 1 else []
    return Section(title, size_columns(with_state), records, totals, size_summary(size))


def size_report(sizes: list[KVSize], name: str) -> Report:
    per_context = [[group_record(s, g) for g in s.groups] for s in sizes]
    return Report(
        payload=size_payload(sizes, name),
        records=[r for records in per_context for r in records],
        sections=[size_section(s, name, r) for s, r in zip(sizes, per_context, strict=True)],
    )
