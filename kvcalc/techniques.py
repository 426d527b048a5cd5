"""The rows of `kvcalc compare`: each a technique (or a combination) as a preset of the options
every other command takes, so a row is computed by the same loading and deployment factories as
`kvcalc size` / `batch` / `decode` given those options.

Adding a technique is one line: a name, its category and its overrides, keyed by option name as
the command line spells it without dashes (``kv_dtype`` for ``--kv-dtype``, ``kv_heads`` for
``--kv-heads``). A row whose ``option`` is set appears only when the user gives that option, and
takes the user's value (``--prefix-shared 4000`` adds the prefix-sharing row); the other rows
leave that option at its default so the baseline stays the model as `kvcalc size` sees it. A row
that ``requires`` options appears only when they are given (SnapKV and no cache need the
request's --prompt and --gen). An eviction override replaces the user's eviction policy.

The eviction bounds follow seed 000 (a 4,096-token window; StreamingLLM's 4 sinks and 4,096
recent tokens; pruning at half) and its long-context example (a 128K window in int8).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

#: lossless: the same outputs; lossy: an approximation at inference time; needs retraining: an
#: architecture change the checkpoint must be trained (or up-trained) for.
Category = Literal["lossless", "lossy", "needs retraining"]
CATEGORIES: tuple[Category, ...] = ("lossless", "lossy", "needs retraining")


@dataclass(frozen=True)
class Technique:
    name: str
    category: Category
    note: str
    overrides: Mapping[str, Any] = field(default_factory=dict)
    option: str | None = None
    """The user option this row takes its value from (the row exists only when it is given)."""
    cached: bool = True
    """False for the row without any cache."""
    requires: tuple[str, ...] = ()
    """Options that must be given for the row to exist."""


TECHNIQUES: tuple[Technique, ...] = (
    Technique("baseline", "lossless", "the model as configured (= kvcalc size)"),
    Technique(
        "paged", "lossless", "16-token blocks: no reduction, no fragmentation", {"block_size": 16}
    ),
    Technique("fp8", "lossy", "8-bit float KV", {"kv_dtype": "fp8"}),
    Technique("int8", "lossy", "8-bit integer KV, scales not counted", {"kv_dtype": "int8"}),
    Technique("int4", "lossy", "4-bit KV, scales not counted", {"kv_dtype": "int4"}),
    Technique(
        "int4-g32",
        "lossy",
        "4-bit KV with an fp16 scale and zero point per 32 values",
        {"kv_dtype": "int4", "kv_group": 32, "kv_scale_dtype": "fp16", "kv_zero_point": True},
    ),
    Technique(
        "kivi-2", "lossy", "KIVI 2-bit: per-channel keys, per-token values", {"kv_dtype": "kivi2"}
    ),
    Technique("as-gqa-8", "needs retraining", "8 KV heads per layer", {"kv_heads": 8}),
    Technique("as-mqa", "needs retraining", "one KV head per layer", {"kv_heads": 1}),
    Technique(
        "as-mla",
        "needs retraining",
        "a 512-value latent + 64 RoPE values per token (DeepSeek-V3's)",
        {"attention": "mla:512+64"},
    ),
    Technique(
        "fp8+as-gqa-8", "needs retraining", "8 KV heads in fp8", {"kv_dtype": "fp8", "kv_heads": 8}
    ),
    Technique("window", "lossy", "only the last 4,096 tokens kept", {"window": 4096}),
    Technique(
        "streamingllm", "lossy", "4 attention sinks + the last 4,096", {"sinks": 4, "recent": 4096}
    ),
    Technique("h2o", "lossy", "4,096 heavy-hitter and recent tokens", {"h2o_budget": 4096}),
    Technique(
        "snapkv",
        "lossy",
        "the --prompt compressed to 4,096 tokens",
        {"snapkv_budget": 4096},
        requires=("prompt", "gen"),
    ),
    Technique("keep-half", "lossy", "token pruning: half of the tokens kept", {"keep_ratio": 0.5}),
    Technique(
        "fp8+window", "lossy", "fp8 and the last 4,096 tokens", {"kv_dtype": "fp8", "window": 4096}
    ),
    Technique(
        "int8+window-128k",
        "lossy",
        "int8 and the last 131,072 tokens",
        {"kv_dtype": "int8", "window": 131072},
    ),
    Technique(
        "prefix-shared",
        "lossless",
        "--prefix-shared tokens stored once for the batch",
        option="prefix_shared",
    ),
    Technique(
        "no-cache",
        "lossless",
        "recompute every token at every step",
        cached=False,
        requires=("prompt", "gen"),
    ),
)


def technique_names() -> list[str]:
    return [t.name for t in TECHNIQUES]
