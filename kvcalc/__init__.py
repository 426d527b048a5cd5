"""kvcalc: a calculator for the KV cache of LLM inference.

The package is layered; imports only point down:

- ``kvcalc.engine``: pure formulas over typed specs (no I/O).
- ``kvcalc.registry``: YAML registry and Hugging Face ``config.json`` import, validated by pydantic.
- ``kvcalc.render``: tables and machine-readable output built from engine results.
- ``kvcalc.cli``: the typer shell.
"""

__version__ = "0.1.0"
