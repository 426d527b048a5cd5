"""An SGLang start-up log read into the figures it states: the server arguments that size the
pool (``server_args=ServerArgs(...)``), each rank's free memory before and after the weights
load, and the token pool (reference sglang-kv-algorithm.md sections 1 and 3).

The lines read (every "GB" is GiB: SGLang divides by 2^30):

- ``server_args=ServerArgs(model_path='...', ..., mem_fraction_static=0.88, ..., tp_size=1, ...)``;
- ``[... TP0] Load weight begin. avail mem=78.81 GB`` (the free memory ``PRE``);
- ``[... TP0] Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=63.72 GB,
  mem usage=15.09 GB.`` (``AFTER``; ``mem usage`` from about v0.4.3);
- ``KV Cache is allocated. #tokens: 444500, K size: 27.13 GB, V size: 27.13 GB`` (``#tokens``
  from about v0.4.3);
- ``max_total_num_tokens=444500, ..., max_running_requests=2049, context_len=131072``.

Pure text in, data out.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

from kvcalc.calibration.lines import Logged, LogLine, first, number

_ARGS = re.compile(r"server_args=ServerArgs\((.*)\)")
_ARG = {
    name: re.compile(rf"\b{name}=('?)([^,')]*)\1")
    for name in ("model_path", "tp_size", "pp_size", "dp_size", "mem_fraction_static",
                 "page_size", "kv_cache_dtype", "context_length", "max_total_tokens",
                 "chunked_prefill_size", "cuda_graph_max_bs", "enable_dp_attention", "ep_size")
}
_BEFORE = re.compile(r"Load weight begin\. avail mem=(\d+(?:\.\d+)?) GB")
_AFTER = re.compile(r"Load weight end\..*?avail mem=(\d+(?:\.\d+)?) GB")
_USAGE = re.compile(r"Load weight end\..*?mem usage=(\d+(?:\.\d+)?) GB")
_POOL = re.compile(
    r"KV Cache is allocated\.(?: dtype: \S+,)? (?:#tokens: (\d+), )?K size: (\d+(?:\.\d+)?) GB, "
    r"V size: (\d+(?:\.\d+)?) GB"
)
_TOTAL = re.compile(r"max_total_num_tokens=(\d+)")
_RUNNING = re.compile(r"max_running_requests=(\d+)")
_CONTEXT = re.compile(r"\bcontext_len=(\d+)")
_RELEASE = re.compile(r"\bsglang(?:==| version:? v?| v)(\d+\.\d+\.\d+(?:\.post\d+)?)", re.I)
_MARKERS = (_TOTAL, _POOL, _BEFORE, _ARGS)


@dataclass(frozen=True)
class SGLangRank:
    """What one rank printed (None: not printed)."""

    label: str
    free_before_load: Logged | None = None
    free_after_load: Logged | None = None
    weights: Logged | None = None
    """``mem usage`` of Load weight end: the weights and the loader's buffers."""
    kv_cache_tokens: int | None = None
    k_size: Logged | None = None
    v_size: Logged | None = None


@dataclass(frozen=True)
class SGLangLog:
    """The figures an SGLang start-up log states (None: the log does not state it)."""

    release: str | None
    model: str | None
    tp: int | None
    pp: int | None
    dp: int | None
    ep: int | None
    """``ep_size``: the routed experts whole over this many ranks (None or 1: split by rows)."""
    mem_fraction_static: Fraction | None
    page_size: int | None
    kv_cache_dtype: str | None
    context_length: int | None
    """``--context-length`` as given (None: the model's)."""
    max_total_tokens: int | None
    chunked_prefill_size: int | None
    cuda_graph_max_bs: int | None
    ranks: tuple[SGLangRank, ...]
    kv_cache_tokens: int | None
    """``max_total_num_tokens=`` (else the first rank's ``#tokens``)."""
    max_running_requests: int | None
    context_len: int | None

    def first_of(self, term: str) -> Logged | None:
        return next((getattr(r, term) for r in self.ranks if getattr(r, term) is not None), None)

    def min_of(self, term: str) -> Logged | None:
        """The smallest of the ranks' figures: SGLang sizes every rank by the MIN over ranks."""
        found = [getattr(r, term) for r in self.ranks if getattr(r, term) is not None]
        return min(found, key=lambda f: f.gib, default=None)


def is_sglang_log(lines: list[LogLine]) -> bool:
    return any(p.search(line.text) for line in lines[:50_000] for p in _MARKERS)


def _arg(args: str | None, name: str) -> str | None:
    if args is None:
        return None
    found = _ARG[name].search(args)
    if found is None or found[2] in ("None", ""):
        return None
    return found[2]


def _int(text: str | None) -> int | None:
    try:
        return None if text is None else number(text)
    except ValueError:
        return None


def _ranks(lines: list[LogLine]) -> tuple[SGLangRank, ...]:
    found: dict[str, dict[str, object]] = {}
    for line in lines:
        text = line.text
        rank = found.setdefault(line.worker, {})
        if (m := _BEFORE.search(text)) is not None:
            rank["free_before_load"] = Logged(m[1])
        if (m := _AFTER.search(text)) is not None:
            rank["free_after_load"] = Logged(m[1])
        if (m := _USAGE.search(text)) is not None:
            rank["weights"] = Logged(m[1])
        if (m := _POOL.search(text)) is not None:
            if m[1] is not None:
                rank["kv_cache_tokens"] = int(m[1])
            rank["k_size"], rank["v_size"] = Logged(m[2]), Logged(m[3])
    return tuple(
        SGLangRank(label or "rank", **values)  # type: ignore[arg-type]
        for label, values in found.items()
        if values
    )


def parse_sglang_log(lines: list[LogLine]) -> SGLangLog:
    """The figures ``lines`` state (every field None that they do not)."""
    args = first(_ARGS, lines)
    ranks = _ranks(lines)
    tokens = _int(first(_TOTAL, lines))
    if tokens is None:
        tokens = next((r.kv_cache_tokens for r in ranks if r.kv_cache_tokens is not None), None)
    mfs = _arg(args, "mem_fraction_static")
    return SGLangLog(
        release=first(_RELEASE, lines),
        model=_arg(args, "model_path"),
        tp=_int(_arg(args, "tp_size")),
        pp=_int(_arg(args, "pp_size")),
        dp=_int(_arg(args, "dp_size")),
        ep=_int(_arg(args, "ep_size")),
        mem_fraction_static=None if mfs is None else Fraction(mfs),
        page_size=_int(_arg(args, "page_size")),
        kv_cache_dtype=_arg(args, "kv_cache_dtype"),
        context_length=_int(_arg(args, "context_length")),
        max_total_tokens=_int(_arg(args, "max_total_tokens")),
        chunked_prefill_size=_int(_arg(args, "chunked_prefill_size")),
        cuda_graph_max_bs=_int(_arg(args, "cuda_graph_max_bs")),
        ranks=ranks,
        kv_cache_tokens=tokens,
        max_running_requests=_int(first(_RUNNING, lines)),
        context_len=_int(first(_CONTEXT, lines)),
    )
