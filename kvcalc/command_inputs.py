"""The commands' own inputs, each declared once (:class:`~kvcalc.engine.inputs.Input`): the
contexts, batch and what-ifs every sizing command reads, and each command's own (`plan`'s
targets, `sweep`'s plot, ...). The command line's options (:mod:`kvcalc.cli`) and the range
:mod:`kvcalc.api` holds a keyword to both come from these; the deployment's and the engines'
inputs are :mod:`kvcalc.engine.inputs`'s, the eviction's :mod:`kvcalc.options`'s.

Pure data, cheap to import: every command reads it at start-up. The two whose help names what a
registry holds (`plan`'s engines, `compare`'s rows) are made by a function, so that only their
command pays for them.
"""

from __future__ import annotations

from kvcalc.engine.inputs import DEPLOYMENT, DEPLOYMENT_INPUTS, KV_FORMAT, Input
from kvcalc.values import MAX_BATCH

MODEL = "Model"
#: The panel of a command's own options, listed first.
OPTIONS = "Options"
OUTPUT = "Output"
TOKENS = "TOKENS"

# ------------------------------------------------------------------ shared by several commands

#: --ctx and --batch mean the same in every command; each command's help states its default.
CTX = Input(
    "ctx", "contexts", "context(s) in tokens: 8192, 8k, 128k, 1m, or a list such as 8k,32k,128k",
    short="-c", metavar=TOKENS, panel=MODEL,
)
BATCH = Input(
    "batch", "count", "sequences", minimum=1, maximum=MAX_BATCH, short="-b", panel=MODEL
)
ATTENTION = Input(
    "attention", "text",
    "what-if: the model with another attention, mha, gqa:G, mqa or mla:LATENT[+ROPE] "
    "(other dimensions kept, cache re-derived)",
    option="--as", metavar="VARIANT", panel=MODEL,
)
KV_HEADS = Input(
    "kv_heads", "count", "what-if: KV heads per layer (1 = MQA)", minimum=1, maximum=4096,
    panel=MODEL,
)
HEAD_DIM = Input("head_dim", "count", "what-if: head dim", minimum=1, maximum=65536, panel=MODEL)
LAYERS = Input("layers", "count", "what-if: layer count", minimum=1, maximum=100_000, panel=MODEL)
#: The what-ifs on the model's shape.
WHAT_IFS = (KV_HEADS, HEAD_DIM, LAYERS)
MBU = Input(
    "mbu", "fraction", "memory-bandwidth utilisation; 1.0 = the roofline bound", default=1.0,
    panel=OPTIONS,
)
#: The prefill efficiency of the TTFT estimate, shared by `decode` and `plan`.
MFU = Input(
    "mfu", "fraction",
    "share of the dense peak prefill matmuls reach [default: the GPU's measured matmul "
    "ceiling (stas00 MAMF), else 0.5]",
    panel=OPTIONS,
)

#: The single-user runtime whose decode profile times the step, in place of the engine's.
RUNTIME = Input(
    "runtime", "text",
    "time decode as this single-user runtime runs it: llama.cpp, ollama or pytorch (eager) "
    "[default: --engine's profile]; the cache is the budget formula's",
    metavar="[llama.cpp|ollama|pytorch]", panel=DEPLOYMENT,
)

#: The llama.cpp build --runtime llama.cpp (or ollama's bundled llama.cpp) runs: what its logs
#: print as `build: N (commit)` and llama-bench as build_number (release tag bN).
LLAMA_CPP_BUILD = Input(
    "llama_cpp_build", "count",
    "with --runtime llama.cpp or ollama: the llama.cpp build number its log prints "
    "(`build: 2833 (d46dbc76)`; ollama: the llama.cpp it bundles); before 3916 its F16 "
    "mat-vec ran far below peak on NVIDIA HBM GPUs [default: a current build]",
    minimum=0, maximum=1_000_000, metavar="N", panel=DEPLOYMENT,
)

#: A serving workload: requests of --input-len + --output-len tokens at --request-rate.
INPUT_LEN = Input(
    "input_len", "tokens", "prompt tokens of each request [default with --request-rate: 1024]",
    panel=OPTIONS,
)
OUTPUT_LEN = Input(
    "output_len", "tokens",
    "generated tokens of each request [default with --request-rate: 128]",
    panel=OPTIONS,
)
REQUEST_RATE = Input(
    "request_rate", "text",
    "requests per second arriving (Poisson), e.g. 10: the concurrency follows (Little's law), "
    "prefill chunks mix into decode steps and the TTFT includes queueing",
    metavar="RATE", panel=OPTIONS,
)
WORKLOAD_INPUTS = (INPUT_LEN, OUTPUT_LEN, REQUEST_RATE)

# ------------------------------------------------------------------ each command's

SIZE_INPUTS = (CTX, BATCH, ATTENTION, *WHAT_IFS)
BATCH_INPUTS = (
    CTX, ATTENTION,
    Input(
        "max_model_len", "contexts",
        "request length(s) vLLM serves [default: each --ctx, else the model's maximum]",
        metavar=TOKENS, panel="vLLM engine",
    ),
)
DECODE_INPUTS = (CTX, ATTENTION, BATCH, MBU, MFU, RUNTIME, LLAMA_CPP_BUILD, *WORKLOAD_INPUTS)
SWEEP_CONTEXTS = "4k..128k"
SWEEP_INPUTS = (
    Input(
        "ctx", "contexts",
        "contexts: START..END (both ends and the powers of two between), START..END:N "
        "(N log-spaced points) or a list such as 8k,32k",
        default=SWEEP_CONTEXTS, short="-c", metavar=TOKENS, panel=MODEL,
    ),
    Input(
        "batch", "text",
        "sequences timed, as --ctx: 1..256, 1..256:N or 8,64 [default: the most that fit "
        "at each context]",
        short="-b", metavar="N", panel=MODEL,
    ),
    ATTENTION,
    MBU,
    Input(
        "plot", "text",
        "also draw the charts into a .png or .svg file (needs matplotlib: the plot extra)",
        metavar="FILE", panel=OUTPUT,
    ),
)
OFFLOAD_CONTEXT = "32k"
OFFLOAD_INPUTS = (
    CTX,
    Input(
        "tier", "text",
        "NAME:SIZE@BANDWIDTH/s, e.g. cpu:512GB@64GB/s (repeatable) "
        "[default: host memory 2x the GPUs' over PCIe, one 4 TB NVMe at 7 GB/s per GPU]",
        metavar="NAME:SIZE@RATE", repeatable=True, panel=OPTIONS,
    ),
)
CHECK_INPUTS = (
    Input(
        "roofline", "flag",
        "hold the time requirements to the roofline bound, not the realistic estimate",
        default=False, panel=OPTIONS,
    ),
)
#: `models --check` and `gpus --check`: the registry's own inputs.
REGISTRY_INPUTS = (
    Input("check", "flag", "validate every registry file; exit 2 if any is bad", default=False,
          panel=OPTIONS),
    Input(
        "registry", "path",
        "registry directory holding models/ and gpus/ [default: bundled]",
        panel=OPTIONS,
    ),
)


def engine_input() -> Input:
    """--engine: the serving engine that sizes the cache (its help sums up every engine)."""
    from kvcalc.engine.serving import DEFAULT_ENGINE, ENGINE_NAMES, engines

    return Input(
        "engine", "text", "; ".join(engine.summary for engine in engines()),
        default=DEFAULT_ENGINE, metavar="[" + "|".join(ENGINE_NAMES) + "]", completion="engines",
        panel=DEPLOYMENT,
    )


def compare_inputs() -> tuple[Input, ...]:
    """`compare`'s inputs (--only names every technique row)."""
    from kvcalc.techniques import technique_names

    only = Input(
        "only", "text", f"rows to show, comma-separated: {', '.join(technique_names())}",
        metavar="ROWS", panel=OPTIONS,
    )
    return (CTX, BATCH, ATTENTION, only, *WHAT_IFS)


#: `plan`'s users, at most (a plan for more is a fleet, not a layout).
MAX_USERS = 1_000_000


#: The vLLM options plan takes (refused with another engine): the release and the cap on
#: running requests, which bounds a replica's batch and the sampler profile of its pool.
PLANNED_VLLM_INPUTS = ("vllm_version", "max_num_seqs")


def plan_inputs() -> tuple[Input, ...]:
    """`plan`'s inputs (--engine names the engines plan sizes the cache with)."""
    from kvcalc.engine.serving import DEFAULT_ENGINE
    from kvcalc.planning import DEFAULT_MAX_GPUS, DEFAULT_TOP, plan_engines

    engines = plan_engines()
    budget = next(i for i in DEPLOYMENT_INPUTS if i.name == "max_num_batched_tokens")
    return (
        Input("users", "count", "sequences served at once (or give --request-rate)",
              short="-u", panel=OPTIONS),
        *WORKLOAD_INPUTS,
        budget._replace(
            help="tokens one step carries, decode and prefill chunks together, with "
            "--request-rate [default: 8192]",
            panel=OPTIONS,
        ),
        Input(
            "disaggregated", "flag",
            "size prefill and decode pools apart (with --request-rate)", default=False,
            panel=OPTIONS,
        ),
        CTX._replace(
            help="tokens of each user's sequence, also the TTFT prompt: 8192, 8k, 128k "
            "[default: 8k]",
        ),
        Input("max_tpot", "text", "time-per-output-token target, e.g. 50ms", metavar="TIME",
              panel=OPTIONS),
        Input(
            "max_ttft", "text",
            "time-to-first-token target for one prompt of --ctx tokens, e.g. 2s",
            metavar="TIME", panel=OPTIONS,
        ),
        ATTENTION,
        Input(
            "gpus", "text",
            "accelerators to consider, e.g. H100,H200,MI300X [default: the whole registry]",
            short="-g", metavar="GPU[,GPU...]", completion="gpu_lists", panel=DEPLOYMENT,
        ),
        Input(
            "max_gpus", "count", "largest GPU count searched per accelerator",
            default=DEFAULT_MAX_GPUS, panel=DEPLOYMENT,
        ),
        Input(
            "weight_dtype", "text",
            "weight dtypes to try, e.g. bf16,fp8 [default: as the checkpoint ships]",
            metavar="DTYPE[,DTYPE...]", completion="weight_dtype_lists", panel=DEPLOYMENT,
        ),
        Input(
            "kv_dtype", "text",
            "KV cache formats to try, e.g. bf16,fp8,nvfp4,kivi2 (any --kv-dtype name) "
            "[default: the model's dtype]",
            metavar="DTYPE[,DTYPE...]", completion="kv_dtype_lists", panel=KV_FORMAT,
        ),
        Input(
            "engine", "text", "; ".join(e.summary for e in engines), default=DEFAULT_ENGINE,
            metavar="[" + "|".join(e.name for e in engines) + "]", completion="plan_engines",
            panel=DEPLOYMENT,
        ),
        # The vLLM release whose rules size the pool under --engine vllm, and its cap on the
        # requests running at once (the engine's own declarations, so that the help, the spec
        # files and the API keyword agree).
        *(i for e in engines for i in e.inputs if i.name in PLANNED_VLLM_INPUTS),
        Input(
            "price", "text",
            "price per GPU-hour, e.g. H100=2.5,H200=3.1: the tie-break (else fewest watts); "
            "without --gpus only priced GPUs are searched",
            metavar="GPU=PRICE,...", panel=OPTIONS,
        ),
        Input(
            "roofline", "flag", "hold the targets to the roofline bound, not the estimate",
            default=False, panel=OPTIONS,
        ),
        MFU,
        RUNTIME,
        LLAMA_CPP_BUILD,
        Input("top", "count", "layouts shown, best first", default=DEFAULT_TOP, panel=OPTIONS),
        *(i for i in DEPLOYMENT_INPUTS if i.name == "calibration"),
    )


#: `calibrate`'s inputs: what the log does not state, and where to keep the measured terms.
CALIBRATE_INPUTS = (
    Input("model", "text", "the model, when the log names none (or names a local path)",
          metavar="MODEL", panel=OPTIONS),
    Input("gpus", "text", "the GPUs the log ran on (vLLM logs name none), e.g. H100 or 2xH100",
          short="-g", metavar="GPU", completion="gpu_sets", panel=OPTIONS),
    Input("release", "text", "the engine's release, when the log states none, e.g. 0.5.6",
          metavar="X.Y.Z", panel=OPTIONS),
    Input("gpu_util", "fraction",
          "vLLM's --gpu-memory-utilization, when the log states none, e.g. 0.85 "
          "[default: the release's]",
          aliases=("--gpu-memory-utilization",), panel=OPTIONS),
    Input("weight_dtype", "text",
          "the checkpoint's weights, which a log does not name (NVFP4, AWQ ...), e.g. nvfp4; "
          "the calibration keeps it [default: the registry model's]",
          metavar="DTYPE", completion="weight_dtypes", panel=OPTIONS),
    Input("write", "path",
          "keep the measured terms in this calibration file (for --calibration)",
          metavar="FILE", panel=OUTPUT),
)
