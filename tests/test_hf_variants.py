"""Published Hugging Face variants of registry models resolve offline (no cache, no network) to
their entries, and repos of other models never do."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from report_check import usage_error
from specs import registry_model
from typer.testing import CliRunner

from kvcalc.cli.app import app
from kvcalc.engine.weights import released_format, weight_bytes
from kvcalc.registry.hub import HubError
from kvcalc.registry.load import RegistryError, registry_root, resolve_model


@pytest.fixture(autouse=True)
def fresh_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No Hugging Face cache and no downloads: what a fresh install has."""
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty-hub"))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


# Published repo ids (each is on the Hub under that organisation): the registry aliases' own
# naming for each family; Qwen/Qwen2.5-7B-Instruct (tests/fixtures/hub, its config.json);
# Qwen/Qwen2.5-72B-Instruct (its config.json as copied in public test code: 80 layers, 8 KV
# heads, max_position_embeddings 32768); deepseek-ai/DeepSeek-V3-0324 and
# deepseek-ai/DeepSeek-R1-0528 (vLLM docs and provider model lists); Qwen/Qwen3-8B-FP8,
# Qwen/Qwen3-30B-A3B-FP8 ("official Qwen/Qwen3-30B-A3B-FP8 fine-grained FP8 (fmt=e4m3,
# weight_block_size=[128,128])" in a public training repo; vLLM's fusion tests load it).
VARIANTS = [
    # (repo id, registry id, the weights' printed name, max context)
    ("Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b", "bf16", 32768),
    ("Qwen/Qwen2.5-72B-Instruct", "qwen2.5-72b", "bf16", 32768),
    ("meta-llama/Llama-3.2-1B-Instruct", None, None, None),  # not a registry model
    ("google/gemma-2-27b-it", "gemma2-27b", "bf16", None),
    ("google/gemma-3-4b-pt", "gemma3-4b", "bf16", None),
    ("meta-llama/Llama-2-70b-chat-hf", "llama2-70b", "fp16", None),
    ("deepseek-ai/DeepSeek-V2-Lite-Chat", "deepseek-v2-lite", "bf16", None),
    ("deepseek-ai/DeepSeek-V3-Base", "deepseek-v3", "fp8-block+bf16", None),
    ("deepseek-ai/DeepSeek-V3-0324", "deepseek-v3", "fp8-block+bf16", None),
    ("deepseek-ai/DeepSeek-R1-0528", "deepseek-r1", "fp8-block+bf16", None),
    ("moonshotai/Kimi-K2-Base", "kimi-k2", "fp8-block+bf16", None),
    ("mistralai/Mistral-Small-3.1-24B-Base-2503", "mistral-small-3.1-24b", "bf16", None),
    ("ibm-granite/granite-4.0-h-tiny-base", "granite-4.0-h-tiny", "bf16", None),
    ("Qwen/Qwen3-8B-FP8", "qwen3-8b", "fp8-block+bf16", None),
    ("Qwen/Qwen3-30B-A3B-FP8", "qwen3-30b-a3b", "fp8-block+bf16", None),
    ("Qwen/Qwen3-235B-A22B-Instruct-2507-FP8", "qwen3-235b-a22b-2507", "fp8-block+bf16", None),
    ("Qwen/Qwen3-Next-80B-A3B-Instruct-FP8", "qwen3-next-80b-a3b", "fp8-block+bf16", None),
    # Qwen3.5 / Qwen3.6 FP8 releases (AI-Hypercomputer/maxtext#5076 converts
    # Qwen/Qwen3.5-35B-A3B-FP8 and Qwen/Qwen3.5-397B-A17B-FP8; 0xBakeer/inference-atlas#145
    # serves Qwen3.6-35B-A3B-FP8; Qwen/Qwen3.6-27B-FP8 is the base_model of
    # inferRouter/Qwen3.6-27B-FP8-lmhead-embed-fp8).
    ("Qwen/Qwen3.5-35B-A3B-FP8", "qwen3.5-35b-a3b", "fp8-block+bf16", None),
    ("Qwen/Qwen3.5-397B-A17B-FP8", "qwen3.5-397b-a17b", "fp8-block+bf16", None),
    ("Qwen/Qwen3.6-35B-A3B-FP8", "qwen3.6-35b-a3b", "fp8-block+bf16", None),
    ("Qwen/Qwen3.6-27B-FP8", "qwen3.6-27b", "fp8-block+bf16", None),
    # Qwen's AWQ releases of its dense Qwen3 models (Qwen/Qwen3-32B-AWQ served in the vLLM 0.28
    # report below; Qwen/Qwen3-8B-AWQ and -14B-AWQ in public serving scripts).
    ("Qwen/Qwen3-32B-AWQ", "qwen3-32b", "int4-g128+bf16", None),
    ("Qwen/Qwen3-8B-AWQ", "qwen3-8b", "int4-g128+bf16", None),
]

# Real repos of other models that a looser rule would take for a registry entry.
OTHER_MODELS = [
    "Qwen/Qwen2.5-7B-Instruct-1M",  # 1M context
    "Qwen/Qwen2.5-VL-7B-Instruct",  # a vision-language model
    "Qwen/Qwen2.5-Coder-7B-Instruct",
    "Qwen/Qwen3-30B-A3B-Instruct-2507",  # 262144 context (qwen3-30b-a3b notes)
    "Qwen/Qwen3-4B-Instruct-2507",  # 262144 context, rope_theta 5e6 (qwen3-4b notes)
    "Qwen/Qwen3-Next-80B-A3B-Thinking",  # another post-training, not a documented word
    "mistralai/Mixtral-8x22B-Instruct-v0.1",  # vocab 32768 (mixtral-8x22b notes)
    "mistralai/Mistral-7B-Instruct-v0.2",  # 32k context, no sliding window
    "moonshotai/Kimi-K2-Instruct-0905",  # 256k context
    "microsoft/Phi-3-mini-128k-instruct",  # a different config (phi3-mini notes)
    "meta-llama/Llama-3.1-405B-Instruct-FP8",  # fbgemm FP8 per row: read from the Hub
    "Qwen/Qwen2.5-7B-Instruct@main",  # a revision asks for that commit's config.json
]


@pytest.mark.parametrize(("repo", "model_id", "weights", "context"), VARIANTS)
def test_a_published_variant_resolves_offline_to_its_entry(
    repo: str, model_id: str | None, weights: str | None, context: int | None
) -> None:
    if model_id is None:
        with pytest.raises(HubError, match="not in the Hugging Face cache"):
            resolve_model(repo)
        return
    from kvcalc.engine.weight_names import weight_dtype_name

    model, entry = resolve_model(repo), registry_model(model_id)
    # A repo the entry lists as an alias is the entry itself; another is named as asked.
    assert model.id == model_id and model.name in {repo, entry.name}
    assert model.layers == entry.layers and model.vocab_size == entry.vocab_size
    assert model.max_context == (context or entry.max_context)
    assert weight_dtype_name(model, released_format(model)) == weights


def test_an_fp8_variant_weighs_as_its_fp8_release() -> None:
    from kvcalc.engine.quant import FP8_BLOCK
    from kvcalc.engine.weights import released_format

    fp8, entry = resolve_model("Qwen/Qwen3-8B-FP8"), registry_model("qwen3-8b")
    precision = released_format(fp8)
    assert precision.layers == FP8_BLOCK and precision.other == released_format(entry).other
    # A public vLLM study of Qwen/Qwen3-8B-FP8: "8.79 GiB of FP8 weights".
    assert weight_bytes(fp8, precision) / 2**30 == pytest.approx(8.79, rel=0.002)


def test_the_qwen36_fp8_release_weighs_as_its_checkpoint_less_the_mtp_layer() -> None:
    # 0xBakeer/inference-atlas#145, read from the served Qwen/Qwen3.6-35B-A3B-FP8 checkpoint:
    # "37.5 GB across 35B parameters" (8.57 bits each: decimal GB), its MTP draft layer and
    # vision tower kept. vLLM loads the MTP layer only for speculative decoding, and kvcalc
    # counts what it loads: the checkpoint less that layer, about 0.85 GB by hand from the
    # config (256 experts x 3 x 2048 x 512 in fp8 plus its attention and eh_proj), 2.3%.
    fp8 = resolve_model("Qwen/Qwen3.6-35B-A3B-FP8")
    loaded = weight_bytes(fp8, released_format(fp8)) / 1e9
    assert 0.01 < 1 - loaded / 37.5 < 0.035


def test_the_qwen3_awq_release_weighs_what_vllm_loaded() -> None:
    from kvcalc.engine.weights import max_weight_bytes_per_gpu

    # A public vLLM 0.28 validation report (replay-sim v0, 2x RTX 4090) serving
    # Qwen/Qwen3-32B-AWQ ("AWQ 4-bit (auto_awq), tensor-parallel-size 2"): "Weights 18.00 GiB
    # total, 9.01 GiB per GPU loaded".
    awq = resolve_model("Qwen/Qwen3-32B-AWQ")
    precision = released_format(awq)
    assert weight_bytes(awq, precision) / 2**30 == pytest.approx(18.00, abs=0.005)
    assert max_weight_bytes_per_gpu(awq, precision, tp=2) / 2**30 == pytest.approx(9.01, abs=0.02)


@pytest.mark.parametrize("repo", OTHER_MODELS)
def test_a_repo_of_another_model_is_not_taken_for_an_entry(repo: str) -> None:
    with pytest.raises(HubError, match="not in the Hugging Face cache"):
        resolve_model(repo)


@pytest.mark.parametrize(
    ("name", "repo", "model_id"),
    [
        ("Llama-3.1-70B-Instruct", "meta-llama/Llama-3.1-70B-Instruct", "llama3.1-70b"),
        ("Qwen2.5-7B-Instruct", "Qwen/Qwen2.5-7B-Instruct", "qwen2.5-7b"),
        ("DeepSeek-V3-0324", "deepseek-ai/DeepSeek-V3-0324", "deepseek-v3"),
        ("Qwen3-8B-FP8", "Qwen/Qwen3-8B-FP8", "qwen3-8b"),
    ],
)
def test_a_name_without_its_organisation_resolves_when_one_model_has_it(
    name: str, repo: str, model_id: str
) -> None:
    model = resolve_model(name)
    assert (model.id, model.name) == (model_id, repo)


def test_an_ambiguous_name_without_organisation_lists_the_candidates(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, runner: CliRunner
) -> None:
    # Two organisations publishing one name: a registry holding a copy of llama3-8b under
    # another organisation.
    models = tmp_path / "models"
    shutil.copytree(registry_root() / "models", models)
    entry = yaml.safe_load((models / "llama3-8b.yaml").read_text())
    entry |= {"id": "fork-8b", "hf_repo": "someorg/Meta-Llama-3-8B", "aliases": []}
    (models / "fork-8b.yaml").write_text(yaml.safe_dump(entry, sort_keys=False))
    monkeypatch.setenv("KVCALC_REGISTRY", str(tmp_path))
    with pytest.raises(RegistryError) as caught:
        resolve_model("Meta-Llama-3-8B-Instruct")
    message = str(caught.value)
    assert "meta-llama/Meta-Llama-3-8B-Instruct (llama3-8b)" in message
    assert "someorg/Meta-Llama-3-8B-Instruct (fork-8b)" in message
    usage_error(
        runner.invoke(app, ["size", "Meta-Llama-3-8B-Instruct"]), "more than one registry model"
    )
    # With its organisation it is one model again.
    assert resolve_model("someorg/Meta-Llama-3-8B-Instruct").id == "fork-8b"


def test_size_of_a_variant_works_on_a_fresh_install(runner: CliRunner) -> None:
    result = runner.invoke(app, ["size", "Qwen/Qwen2.5-7B-Instruct", "--ctx", "32k"])
    assert result.exit_code == 0, result.stderr
    assert result.stdout.startswith("Qwen/Qwen2.5-7B-Instruct (qwen2.5-7b): KV cache")
    assert "1,879,048,192" in result.stdout  # 28 layers x 4 KV heads x 128 x 2 x 2 B x 32,768


def test_import_hf_of_an_uncached_variant_says_the_other_commands_size_it(
    runner: CliRunner,
) -> None:
    line = usage_error(
        runner.invoke(app, ["import-hf", "Qwen/Qwen2.5-7B-Instruct"]), "not in the Hugging Face"
    )
    assert "offline as registry model qwen2.5-7b" in line
