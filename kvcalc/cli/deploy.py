"""The deployment and engine options of every command that takes them (`batch`, `decode`,
...), made from the input declarations (:mod:`kvcalc.engine.inputs`); the eviction options,
which `size` takes too, are in :mod:`kvcalc.cli.eviction`.

A command opts in with :func:`deployment_options`: the options are added to its signature and
reach it as one :class:`~kvcalc.deploy.DeploymentOptions` value, so no command repeats the
option block and no command holds domain logic: resolving them is the library's
(:mod:`kvcalc.deploy`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, TypeVar

from kvcalc.cli.app import grouped_options, input_option, input_options
from kvcalc.cli.kvformat import KV_PARAMETERS
from kvcalc.command_inputs import engine_input
from kvcalc.deploy import DeploymentOptions, EngineChoice, EngineFlags
from kvcalc.engine.inputs import DEPLOYMENT_INPUTS, GPUS_HELP, engine_inputs

F = TypeVar("F", bound=Callable[..., Any])


_GPUS = DEPLOYMENT_INPUTS[0]
# The KV format's options as `kvcalc size` builds them; --gpus required.
_PARAMETERS: dict[str, tuple[Any, Any]] = {
    i.name: KV_PARAMETERS[i.name] if i.name in KV_PARAMETERS else input_option(i)
    for i in DEPLOYMENT_INPUTS
} | {"gpus": input_option(_GPUS, default=...)}


def deployment_options(command: F) -> F:
    """Add the deployment options to ``command``, which receives them as ``deploy``."""
    return grouped_options(command, "deploy", DeploymentOptions, _PARAMETERS)


def _hidden(parameter: tuple[Any, Any]) -> tuple[Any, Any]:
    kind, option = parameter
    option = copy.copy(option)
    option.hidden = True
    return kind, option


#: The deployment options of a command that applies no measured budget (offload, compare,
#: sweep): ``--calibration`` is taken, so that the library's refusal names the commands that
#: apply one, but not listed in --help, where it could only be refused.
_ESTIMATED = {**_PARAMETERS, "calibration": _hidden(_PARAMETERS["calibration"])}


def estimated_deployment_options(command: F) -> F:
    """:func:`deployment_options` with ``--calibration`` left out of the help."""
    return grouped_options(command, "deploy", DeploymentOptions, _ESTIMATED)


_OPTIONAL_GPUS = input_option(_GPUS, help=f"{GPUS_HELP} [default: no GPUs, bytes only]")[1]


def optional_deployment_options(command: F) -> F:
    """The deployment options with --gpus optional (``deploy.gpus`` is then None), and
    ``--calibration`` out of the help (`compare` applies no measured budget)."""
    parameters = {**_ESTIMATED, "gpus": (str | None, _OPTIONAL_GPUS)}
    return grouped_options(command, "deploy", DeploymentOptions, parameters)


def deployment_sets_options(command: F) -> F:
    """As :func:`deployment_options`, with ``--gpus`` repeatable: ``command`` receives
    ``deploys``, one :class:`DeploymentOptions` per GPU set, in the order given, and
    ``--calibration`` out of the help (`sweep` applies no measured budget)."""
    gpus = input_option(_GPUS, default=..., help=f"{GPUS_HELP}; repeat for one line per GPU set")
    parameters = {**_ESTIMATED, "gpus": (list[str], gpus[1])}
    return grouped_options(command, "deploys", _per_gpu_set, parameters)


def _per_gpu_set(gpus: list[str], **options: Any) -> list[DeploymentOptions]:
    return [DeploymentOptions(gpus=g, **options) for g in gpus]


# ------------------------------------------------------------------ the engines' own options


_ENGINE_INPUT_PARAMETERS: dict[str, tuple[Any, Any]] = input_options(engine_inputs())


def engine_input_options(command: F) -> F:
    """Add every engine's own options to ``command``, which receives them as ``flags``."""
    return grouped_options(command, "flags", EngineFlags, _ENGINE_INPUT_PARAMETERS)


# ------------------------------------------------------------------ the engine


_ENGINE_PARAMETERS: dict[str, tuple[Any, Any]] = input_options((engine_input(),))
assert set(_ENGINE_PARAMETERS) == set(EngineChoice._fields)


def engine_options(command: F) -> F:
    """Add ``--engine`` and the engines' own options to ``command``, which receives them as
    ``engine`` (an :class:`EngineChoice`) and ``flags``."""
    return engine_input_options(
        grouped_options(command, "engine", EngineChoice, _ENGINE_PARAMETERS)
    )
