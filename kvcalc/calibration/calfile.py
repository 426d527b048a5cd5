"""calibration.yaml: the terms one start-up measured, and the inputs that make kvcalc reproduce
it, written by ``kvcalc calibrate --write`` and read by ``--calibration`` (``calibration:`` in a
spec file, ``calibration=`` in the API).

The file names the engine, release, model, GPU and layout it was measured with; a deployment of
another model or GPU is refused (one line), so a calibration never stands in for another
machine's. Read with the registry's strict safe loader (no tags, no aliases, no key given
twice), at most 64 KiB, every key and value checked: a hostile or hand-broken file is one line.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvcalc.errors import InputError

if TYPE_CHECKING:
    from kvcalc.calibration.compare import Comparison
    from kvcalc.engine.hardware import GpuSet
    from kvcalc.engine.serving.base import ServingEngine
    from kvcalc.engine.spec import ModelSpec

FORMAT = 1
MAX_FILE_BYTES = 64 << 10
#: The inputs a calibration may give, by what they replace.
_DEPLOYMENT_KEYS = ("tp", "pp", "kv_memory", "max_num_batched_tokens", "block_size", "kv_dtype",
                    "weight_dtype")
_ENGINE_KEYS = ("sglang_version", "vllm_version", "enable_prefix_caching", "mem_fraction_static",
                "decode_context_parallel_size", "num_speculative_tokens",
                "free_before_load", "free_after_load", "page_size", "max_total_tokens")
INPUT_KEYS = (*_DEPLOYMENT_KEYS, *_ENGINE_KEYS)
#: What a measured KV memory (or free memory after the weights) leaves nothing for.
_BUDGET_INPUTS = {
    "kv_memory": ("gpu_util", "reserve", "overhead", "gpu_memory", "weights", "weight_dtype"),
    "free_after_load": ("weights", "weight_dtype", "gpu_memory"),
}
_KEYS = {"kvcalc_calibration", "engine", "release", "rules", "model", "gpu", "tp", "pp",
         "source", "kv_cache_tokens", "exact", "terms", "inputs"}


class CalibrationError(InputError):
    """A calibration file kvcalc cannot use, or one for another deployment."""

    def __init__(self, message: str) -> None:
        super().__init__(message, field="calibration", fix="run kvcalc calibrate LOG --write "
                         "FILE on this deployment's start-up log")


@dataclass(frozen=True)
class Calibration:
    """A calibration file as read."""

    path: str
    engine: str
    release: str | None
    model: str
    gpu: str
    tp: int
    pp: int
    inputs: Mapping[str, Any]

    def check(self, model: ModelSpec, gpus: GpuSet, engine: ServingEngine,
              given: Mapping[str, Any]) -> None:
        """Refuse the calibration for a deployment it was not measured on, or one it was not
        applied to (:func:`calibrated`)."""
        from kvcalc.engine.serving import DEFAULT_ENGINE

        where = f"--calibration {self.path}"
        # Applying a calibration names its engine (calibrated): the default engine here means
        # the command read the option without applying it.
        if engine.name == DEFAULT_ENGINE or (
            "kv_memory" in self.inputs and "kv_memory" not in given
        ):
            raise CalibrationError(f"{where}: applies to batch, decode, plan and check only")
        self.check_measured_with(engine, model)
        if gpus.accelerator.id != self.gpu:
            raise CalibrationError(f"{where}: measured on {self.gpu}, not "
                                   f"{gpus.accelerator.id}; calibrate on these GPUs")


    def check_measured_with(self, engine: ServingEngine, model: ModelSpec) -> None:
        """Refuse the calibration for another engine or model than it measured."""
        where = f"--calibration {self.path}"
        if engine.name != self.engine:
            raise CalibrationError(f"{where}: measured with {self.engine}, not {engine.name}; "
                                   f"give --engine {self.engine}")
        if model.id != self.model:
            raise CalibrationError(f"{where}: measured with {self.model}, not {model.id}; "
                                   "calibrate this model's start-up")

    def planned(self, model: ModelSpec, engine: ServingEngine, accelerators: Any,
                kv_dtypes: str | None) -> dict[tuple[str, int, int, str | None], int]:
        """`plan`'s measured budgets: (accelerator, tp, pp, KV dtype) -> the KV memory, for a
        vLLM calibration of ``model`` with ``engine`` among ``accelerators``."""
        from kvcalc.engine.units import parse_bytes

        where = f"--calibration {self.path}"
        self.check_measured_with(engine, model)
        if self.gpu not in {a.id for a in accelerators}:
            raise CalibrationError(f"{where}: measured on {self.gpu}, which --gpus leaves out; "
                                   f"add {self.gpu}")
        if "kv_memory" not in self.inputs:
            raise CalibrationError(f"{where}: plan takes a measured KV memory (a vLLM "
                                   "calibration)")
        kv = self.inputs.get("kv_dtype")
        tried = [None if t == "auto" else t for t in (kv_dtypes or "auto").split(",")]
        budget = parse_bytes(str(self.inputs["kv_memory"]))
        return {(self.gpu, self.tp, self.pp, t): budget for t in tried if t == kv}


def calibration_document(comparison: Comparison, source: str) -> dict[str, Any]:
    """The file ``--write`` keeps: who measured what, the terms as logged (bytes per GPU), and
    the inputs that reproduce the logged token count."""
    terms: dict[str, Any] = {}
    for term in comparison.terms:
        if term.logged is None or term.name.startswith("kv_cache_tokens"):
            continue
        key = term.name if term.stage is None else f"{term.name}_stage{term.stage}"
        terms[key] = term.logged
    return {
        "kvcalc_calibration": FORMAT,
        "engine": comparison.engine,
        "release": comparison.release,
        "rules": comparison.rules,
        "model": comparison.model.id,
        "gpu": comparison.gpus.accelerator.id,
        "tp": comparison.tp,
        "pp": comparison.pp,
        "source": source,
        "kv_cache_tokens": comparison.kv_cache_tokens,
        "exact": comparison.exact,
        "terms": terms,
        "inputs": dict(comparison.inputs),
    }


def write_calibration(document: Mapping[str, Any], path: str | Path) -> None:
    import yaml

    head = ("# kvcalc calibration: the terms a start-up measured and the inputs that reproduce "
            "it.\n# Use it with kvcalc batch/decode --calibration FILE (or calibration: in a "
            "spec file).\n")
    text = head + yaml.safe_dump(dict(document), sort_keys=False, allow_unicode=False)
    target = Path(path)
    try:
        target.write_text(text, encoding="utf-8")
    except IsADirectoryError:  # worded as --plot words the same two cases
        raise InputError(f"--write {path}: a folder; give a file name in it such as "
                         f"{target / 'calibration.yaml'}", field="write") from None
    except FileNotFoundError:
        raise InputError(f"--write {path}: the folder {target.parent} does not exist; create it "
                         "or give a file in an existing folder", field="write") from None
    except OSError as exc:
        raise InputError(f"--write {path}: cannot write it ({exc.strerror or exc})",
                         field="write") from None


def _refuse(path: str, problem: str) -> CalibrationError:
    return CalibrationError(f"--calibration {path}: {problem}")


#: The inputs a calibration gives as true or false.
_FLAG_KEYS = ("enable_prefix_caching",)


def _scalar(path: str, key: str, value: Any) -> Any:
    if key in _FLAG_KEYS:
        if not isinstance(value, bool):
            raise _refuse(path, f"inputs: {key} must be true or false, not {value!r}")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise _refuse(path, f"inputs: {key} must be a number or a size, not {type(value).__name__}")
    if isinstance(value, str) and len(value) > 64:
        raise _refuse(path, f"inputs: {key} is longer than 64 characters")
    return value


def _text(path: str, data: Mapping[str, Any], key: str, optional: bool = False) -> Any:
    value = data.get(key)
    if value is None and optional:
        return None
    if not isinstance(value, str) or not 0 < len(value) <= 200:
        raise _refuse(path, f"{key}: give a name, e.g. {key}: h100-sxm")
    return value


def _count(path: str, data: Mapping[str, Any], key: str) -> int:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 4096:
        raise _refuse(path, f"{key}: give a whole number from 1 to 4096")
    return value


@functools.lru_cache(maxsize=16)
def _load(path: str, stamp: tuple[int, int]) -> Calibration:
    from kvcalc.engine.serving import ENGINE_NAMES
    from kvcalc.registry.load import RegistryError, read_yaml

    if stamp[0] > MAX_FILE_BYTES:
        raise _refuse(path, f"{stamp[0]:,} bytes is no calibration (at most {MAX_FILE_BYTES:,})")
    try:
        data = read_yaml(Path(path))
    except RegistryError as exc:
        raise _refuse(path, str(exc).removeprefix(f"{path}: ")) from None
    if not isinstance(data, Mapping) or data.get("kvcalc_calibration") != FORMAT:
        raise _refuse(path, f"no kvcalc calibration (kvcalc_calibration: {FORMAT} missing)")
    unknown = sorted(str(k) for k in data if k not in _KEYS)
    if unknown:
        raise _refuse(path, f"unknown key {unknown[0]!r}")
    engine = _text(path, data, "engine")
    if engine not in ENGINE_NAMES:
        raise _refuse(path, f"engine: {engine!r} is no engine kvcalc models")
    inputs = data.get("inputs")
    if not isinstance(inputs, Mapping) or not inputs:
        raise _refuse(path, "inputs: give the inputs that reproduce the start-up")
    for key in inputs:
        if key not in INPUT_KEYS:
            raise _refuse(path, f"inputs: {key!r} is no input a calibration gives")
    release = data.get("release")
    return Calibration(
        path=path, engine=engine,
        release=None if release is None else str(_scalar(path, "release", release)),
        model=_text(path, data, "model"), gpu=_text(path, data, "gpu"),
        tp=_count(path, data, "tp"), pp=_count(path, data, "pp"),
        inputs={str(k): _scalar(path, str(k), v) for k, v in inputs.items()},
    )


def load_calibration(path: str | Path) -> Calibration:
    """The calibration file at ``path``; one line for a file that is missing, unreadable or
    not a calibration."""
    text = str(path)
    try:
        stat = Path(text).stat()
    except (OSError, ValueError):
        raise _refuse(text, "no such file") from None
    if not Path(text).is_file():
        raise _refuse(text, "not a file")
    return _load(text, (stat.st_size, stat.st_mtime_ns))


def calibrated(values: Mapping[str, Any], engine: str | None = None) -> dict[str, Any]:
    """``values`` (inputs by field name) with a calibration's inputs in place of kvcalc's
    estimates, and its engine when none is given (``engine``, else ``values["engine"]``; the
    default engine is none); an input given beside the calibration that it gives, or that
    would change the budget it measured, is refused, as is another engine than its own."""
    from kvcalc.engine.serving import DEFAULT_ENGINE
    from kvcalc.values import option_name

    given = dict(values)
    path = given.get("calibration")
    if path is None:
        return given
    cal = load_calibration(path)
    where = f"--calibration {cal.path}"
    chosen = str(engine or given.get("engine") or DEFAULT_ENGINE).lower()
    if chosen not in (DEFAULT_ENGINE, cal.engine):
        raise CalibrationError(f"{where}: measured with {cal.engine}, not {chosen}; give "
                               f"--engine {cal.engine}")
    if chosen == DEFAULT_ENGINE:
        given["engine"] = cal.engine
    for key, value in cal.inputs.items():
        if key in given and str(given[key]) != str(value):
            flag = option_name(key)
            raise CalibrationError(f"{flag}: {where} gives it ({value}, as measured); drop "
                                   f"{flag} or calibrate that start-up")
        given[key] = value
    for measured, others in _BUDGET_INPUTS.items():
        if measured not in cal.inputs:
            continue
        for other in others:
            # One the calibration gives itself is already held to its value, above.
            if values.get(other) is not None and other not in cal.inputs:
                flag = option_name(other)
                raise CalibrationError(f"{flag}: {where} gives the measured budget; drop {flag} "
                                       "or calibrate that start-up")
    return given


def check_calibration(model: ModelSpec, gpus: GpuSet, engine: ServingEngine | None,
                      given: Mapping[str, Any]) -> None:
    """Refuse a deployment's calibration (``given["calibration"]``) measured on another model,
    GPU or engine (None: the default engine), or not applied to it."""
    if given.get("calibration") is None:
        return
    from kvcalc.engine.serving import DEFAULT_ENGINE, engine_named

    cal = load_calibration(given["calibration"])
    cal.check(model, gpus, engine or engine_named(DEFAULT_ENGINE), given)
