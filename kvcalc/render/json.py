"""Machine-readable output. Keys are stable; values are raw numbers (bytes, tokens), never
humanised strings."""

from __future__ import annotations

import json
from typing import Any

from kvcalc.engine.kv import GroupKV, KVSize


def dumps(payload: Any) -> str:
    return json.dumps(payload, indent=2, sort_keys=False) + "\n"


def _group(group: GroupKV) -> dict[str, Any]:
    return {
        "kind": group.kind,
        "layers": group.layers,
        "bytes_per_token": group.bytes_per_token,
        "tokens_held": group.tokens_held,
        "state_bytes": group.state_bytes,
        "bytes": group.bytes,
    }


def size_payload(size: KVSize, name: str) -> dict[str, Any]:
    return {
        "model": size.model_id,
        "name": name,
        "context_tokens": size.context_tokens,
        "batch": size.batch,
        "kv_dtype": size.kv_dtype,
        "kv_bytes_per_token": size.bytes_per_token,
        "kv_bytes_per_sequence": size.bytes_per_sequence,
        "kv_bytes_total": size.bytes_total,
        "groups": [_group(g) for g in size.groups],
    }
