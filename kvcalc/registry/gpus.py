"""The accelerator registry (model_configs/gpus/*.yaml): schema, lookup and GPU-set parsing.

Each file records every capacity figure a source gives (marketing label, nvidia-smi total,
CUDA/torch total, rocm-smi total) and names, in ``memory.usable``, the one kvcalc sizes with, and
why. Lookup is lazy: ``h100-sxm`` reads ``gpus/h100-sxm.yaml`` and nothing else; only an alias
(``h100``) or a miss reads the other files.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from kvcalc.engine.hardware import MAX_GPU_COUNT, Accelerator, GpuSet
from kvcalc.engine.units import shown

if TYPE_CHECKING:
    from kvcalc.registry.gpu_schema import GpuFile

from kvcalc.registry.load import (
    RegistryError,
    UnknownNameError,
    check_entries,
    find_path,
    load_entry,
    registry_root,
    require_files,
    yaml_files,
)

# ---------------------------------------------------------------- lookup


def gpus_dir(root: Path | None = None) -> Path:
    return (root or registry_root()) / "gpus"


def load_gpu_file(path: Path) -> GpuFile:
    from kvcalc.registry.gpu_schema import GpuFile

    return load_entry(path, GpuFile)


def gpu_paths(root: Path | None = None) -> list[Path]:
    directory = gpus_dir(root)
    if not directory.is_dir():
        raise RegistryError(f"{directory}: registry directory not found (set KVCALC_REGISTRY)")
    return yaml_files(directory)


def find_gpu_path(name: str, root: Path | None = None) -> Path:
    """The registry file of an accelerator id or alias (case-insensitive)."""
    return find_path("gpu", name, gpus_dir(root))


def find_gpu(name: str, root: Path | None = None) -> GpuFile:
    """Resolve an accelerator id or alias (case-insensitive) to its registry file."""
    return load_gpu_file(find_gpu_path(name, root))


def find_accelerator(name: str, root: Path | None = None) -> Accelerator:
    """The engine's view of an accelerator, through the validated-spec cache."""
    from kvcalc.registry.cache import cached_spec

    path = find_gpu_path(name, root)
    return cached_spec(
        path, lambda: load_gpu_file(path).to_accelerator(), Accelerator, kind="gpu"
    )


def all_gpus(root: Path | None = None) -> list[GpuFile]:
    return [load_gpu_file(p) for p in gpu_paths(root)]


def check_gpus(root: Path | None = None) -> list[str]:
    """Validate every accelerator file; one message per problem (empty when all are good)."""
    return check_entries(require_files(gpu_paths(root), gpus_dir(root)), load_gpu_file)


# ---------------------------------------------------------------- GPU sets


class GpuSetError(RegistryError, ValueError):
    """A GPU set that cannot be parsed (bad count or shape); one line naming the fix."""

    def __init__(self, message: str) -> None:
        super().__init__(message, field="gpus")


_SET_FORMS = (
    "use COUNTxGPU such as 8xH100 (or H100x8, h100:8, 8*h100), 4xMI300X, or a single name "
    "such as h200"
)
_SPLIT = re.compile(r"^\s*(?P<count>[^x×*\s]+)\s*[x×*]\s*(?P<gpu>\S.*?)\s*$", re.IGNORECASE)
_NUMBER = re.compile(r"^[+-]?[\d.,_eE]+$")
#: The count after the name (``H100x8``, ``h100:8``, ``h100 * 8``): read so only when the name
#: before it is a GPU, as a name may itself end in ``x`` and digits.
_COUNT_AFTER = re.compile(
    r"^\s*(?P<gpu>\S.*?)\s*[x×*:]\s*(?P<count>[+-]?[\d.,_eE]+)\s*$", re.IGNORECASE
)
_COUNT_ONLY = re.compile(r"^\s*[+-]?\d+\s*[x×*]?\s*$", re.IGNORECASE)


def parse_gpu_set(text: str, root: Path | None = None) -> GpuSet:
    """Parse ``8xH100``, ``8x h100``, ``4*mi300x``, the count last (``H100x8``, ``h100:8``) or
    a bare name (count 1) into a GpuSet."""
    if not text.strip():
        raise GpuSetError(f"empty GPU set: {_SET_FORMS}")
    match = _SPLIT.match(text)
    if match is None or not _NUMBER.match(match["count"]):
        try:
            gpu = find_accelerator(text, root)
        except UnknownNameError:
            counted_last = _count_last(text, root)
            if counted_last is not None:
                return counted_last
            if _COUNT_ONLY.match(text):
                raise GpuSetError(f"GPU set {_shown(text)} names no GPU: {_SET_FORMS}") from None
            if match is not None and _is_gpu_name(match["gpu"], root):
                raise GpuSetError(
                    f"invalid GPU count {_shown(match['count'])} in {_shown(text)}: {_SET_FORMS}"
                ) from None
            raise
        return GpuSet(gpu, 1)
    count = _parse_count(match["count"], text)
    try:
        gpu = find_accelerator(match["gpu"], root)
    except UnknownNameError:  # 4090x2: two RTX 4090s, not 4,090 of "2"
        counted_last = _count_last(text, root)
        if counted_last is None:
            raise
        return counted_last
    return GpuSet(gpu, count)


def _count_last(text: str, root: Path | None) -> GpuSet | None:
    """``text`` read with its count after a GPU name, or None when it does not read so."""
    match = _COUNT_AFTER.match(text)
    if match is None or not _is_gpu_name(match["gpu"], root):
        return None
    return GpuSet(find_accelerator(match["gpu"], root), _parse_count(match["count"], text))


def _is_gpu_name(name: str, root: Path | None) -> bool:
    try:
        find_gpu_path(name, root)
    except UnknownNameError:
        return False
    return True


def _shown(text: str) -> str:
    return repr(shown(text))


def _parse_count(raw: str, text: str) -> int:
    from kvcalc.engine.units import number_text_problem

    where = f"{_shown(raw)} in {_shown(text)}"
    if not raw.isascii():  # the number rule of every input; length is bounded below
        raise GpuSetError(f"invalid GPU count {where}: {number_text_problem(raw)}")
    if not raw.lstrip("+-").isdigit() or raw.count("-") + raw.count("+") > 1:
        raise GpuSetError(f"invalid GPU count {where}: the count is a whole number")
    digits = raw.lstrip("+-").lstrip("0")
    if raw.startswith("-") or not digits:
        raise GpuSetError(f"invalid GPU count {where}: it must be at least 1")
    # Compare lengths first: int() refuses strings of more than 4,300 digits.
    if len(digits) > len(str(MAX_GPU_COUNT)) or int(digits) > MAX_GPU_COUNT:
        raise GpuSetError(
            f"invalid GPU count {where}: at most {MAX_GPU_COUNT:,} GPUs are accepted"
        )
    return int(digits)
