"""The settings of the tools around reading: check, cost, serve."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..errors import InputError
from .base import ModelArg, Settings, integer, nonempty_text, number, one_of, opt, path_arg, set_field, size
from .read import DEFAULT_MODEL, DEVICE_DOC, DEVICE_MAP_DOC, DTYPE_DOC, MODEL_DOC, PROCESSOR_DOC, TOKENIZER_DOC

CONVENTIONS = ("sdpa", "mha", "additive", "hf", "causal")
MASK_FAMILIES = ("any", "causal", "bidirectional")
KV_DTYPES = ("fp32", "fp16", "bf16", "fp8", "int8")
INF = float("inf")
SERVE_TOKENS = 1024  # the explorer's longest text when max_tokens is unset (or the model's positions)


@dataclass(frozen=True)
class CheckSettings(Settings):
    """Audit an attention implementation: ``target`` is module:function, file.py:function, torch.sdpa, hf:NAME, …"""

    target: str | None = opt(None, "module:function, file.py:function, torch.sdpa, torch.mha, hf:NAME or hf:PATH")
    convention: str = opt("sdpa", "how the target takes its mask: sdpa, mha, additive, hf, causal")
    only: tuple[str, ...] | None = opt(None, "only these checks")
    skip: tuple[str, ...] | None = opt(None, "these checks marked not applicable")
    scale: float | None = opt(None, "the temperature the target means to use (T5: 1) (unset: 1/√D or the model's)")
    softcap: float | None = opt(None, "cap·tanh(s/cap) before the mask (Gemma 2: 50) (unset: the target's own)")
    strict: bool = opt(False, "hazards fail too, and so do shapes the target does not accept")
    timeout: float = opt(10.0, "seconds per call before the target counts as hung")
    mask_family: str | None = opt(None, "the masks the target can express: any, causal, bidirectional (unset: its own)")
    window: int | None = opt(None, "a decoder's sliding window of W keys (its own, in the causal convention)")
    sinks: int = opt(0, "leading keys a windowed target keeps visible to every query (StreamingLLM's sinks)")

    def __post_init__(self):
        if self.target is not None and (not isinstance(self.target, str) or not self.target.strip()):
            raise InputError("target is empty: give module:function, torch.sdpa or hf:NAME", field="target")
        one_of(self.convention, "convention", CONVENTIONS)
        if self.mask_family is not None:
            one_of(self.mask_family, "mask_family", MASK_FAMILIES)
        for name in ("only", "skip"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, str) or not value or not all(isinstance(x, str) and x for x in value)
            ):
                raise InputError(f"{name} must be check names, got {value!r}", field=name)
        if self.scale is not None and not (0 < self.scale < INF):
            raise InputError(f"scale must be a positive finite number, got {self.scale}", field="scale")
        if self.softcap is not None and not (0 < self.softcap < INF):
            raise InputError(f"softcap must be a positive finite number, got {self.softcap}", field="softcap")
        if isinstance(self.timeout, bool) or not isinstance(self.timeout, int | float) or not 0 < self.timeout < INF:
            raise InputError(f"timeout must be a positive number of seconds, got {self.timeout}", field="timeout")
        integer(self.window, "window", 1, optional=True)
        integer(self.sinks, "sinks", 0)
        if self.sinks and self.window is None:
            raise InputError(
                f"sinks {self.sinks} without a window: sinks are the leading keys a windowed decoder keeps; "
                "give --window W too",
                field="sinks",
            )


@dataclass(frozen=True)
class KVSettings(Settings):
    """What a model's KV cache costs: from ``model`` (a name, a directory, a .gguf, a config.json) or sizes."""

    model: str | None = opt(None, "smollm2, minilm, a model directory, a .gguf file or a config.json")
    layers: int | None = opt(None, "attention layers (without a model)")
    heads: int | None = opt(None, "query heads (without a model)")
    kv_heads: int | None = opt(None, "key/value heads (unset: heads (MHA); 1 = MQA)")
    head_dim: int | None = opt(None, "head dimension (without a model)")
    dtype: str = opt("fp16", f"the cache's number format: {', '.join(KV_DTYPES)}")
    context: int = opt(4096, "tokens per sequence")
    batch: int = opt(1, "sequences")
    window: int | None = opt(None, "sliding window: at most W tokens held")

    def __post_init__(self):
        given = [n for n in ("layers", "heads", "kv_heads", "head_dim") if getattr(self, n) is not None]
        if self.model and given:
            flags = ", ".join(f"`{n}`" for n in given)
            raise InputError(f"give `model` or explicit sizes, not both: {flags} would be ignored", field="model")
        if not self.model and any(getattr(self, n) is None for n in ("layers", "heads", "head_dim")):
            raise InputError("give `model` (a name, a directory or a config.json), or `layers`, `heads` and `head_dim`")
        integer(self.context, "context", 1)
        integer(self.batch, "batch", 1)
        integer(self.window, "window", 1, optional=True)

    def sizes(self) -> tuple:
        return self.layers, self.heads, self.kv_heads, self.head_dim


FIT_VERBS = ("heads", "patch", "circuit", "routes", "why")
FIT_DTYPES = ("auto", "float32", "bfloat16", "float16")


@dataclass(frozen=True)
class FitSettings(Settings):
    """Will a model fit a device for a verb: predicted from its config alone (models/fit.py), nothing loaded."""

    model: str = opt(DEFAULT_MODEL, "a bundled name, a model directory, a .gguf file, a hub id or a config.json")
    dtype: str = opt("auto", "auto (the checkpoint's stored dtype, as the verbs load it), float32, bfloat16, float16")
    tokens: int | None = opt(None, "the longest sequence the verb reads (unset: the lengths measured)")
    verb: str = opt("all", f"one of {', '.join(FIT_VERBS)}, or all")
    device_memory: str | int | None = opt(None, "the memory to fit in: 80G, 24GiB, … (unset: this machine's available)")
    device: str = opt("cpu", "cpu (the runtime counts beside the weights) or cuda (the device holds weights and work)")

    def __post_init__(self):
        nonempty_text(self.model, "model")
        one_of(self.dtype, "dtype", FIT_DTYPES)
        integer(self.tokens, "tokens", 1, optional=True)
        one_of(self.verb, "verb", (*FIT_VERBS, "all"))
        one_of(self.device, "device", ("cpu", "cuda"))
        set_field(self, "device_memory", size(self.device_memory, "device_memory"))


@dataclass(frozen=True)
class SimulateSettings(Settings):
    """Serve a request stream with contiguous reservation and with paging (cost/serving.py)."""

    kv: KVSettings = field(
        default_factory=lambda: KVSettings(model=DEFAULT_MODEL),
        metadata={"doc": "whose KV bytes per token (KVSettings)"},
    )
    requests: str | None = opt(
        None, "a CSV of prompt_tokens, output_tokens[, prefix_tokens, prefix_group]; None: synthetic lengths"
    )
    dist: str = opt("chat", "synthetic lengths: chat or short")
    n: int = opt(300, "synthetic requests")
    seed: int = opt(0, "the synthetic draw")
    budget_gb: float = opt(1.0, "KV-cache memory budget in GB")
    block_size: int = opt(16, "tokens per block")
    max_len: int = opt(2048, "the longest sequence a request may reach")

    def __post_init__(self):
        path_arg(self.requests, "requests", "a CSV file's path")  # the numbers are checked where they are drawn


@dataclass(frozen=True)
class ServeSettings(Settings):
    """The live explorer: one model per process, requests serialized through one bounded queue."""

    model: ModelArg = opt(DEFAULT_MODEL, MODEL_DOC)
    tokenizer: object = opt(None, TOKENIZER_DOC)
    processor: object = opt(None, PROCESSOR_DOC)
    dtype: str = opt("auto", DTYPE_DOC)
    device: str | None = opt(None, DEVICE_DOC)
    device_map: object = opt(None, DEVICE_MAP_DOC)
    host: str = opt("127.0.0.1", "the address to listen on (anything but loopback is said loudly)")
    port: int = opt(0, "the port; 0: a free one chosen by the OS")
    max_tokens: int | None = opt(
        None, f"the longest text a request may send (unset: {SERVE_TOKENS}, or the model's positions if fewer)"
    )
    time_limit: float = opt(120.0, "seconds a request may run; past it: stopped, 504")
    queue: int = opt(8, "requests that may wait beyond the running one; past it: 503 with Retry-After")
    cache_mb: int = opt(256, "memory for cached results, in MiB (an LRU bounded in bytes)")
    grace: float = opt(10.0, "seconds requests in flight get to finish after SIGINT/SIGTERM; past it: cancelled")
    audio: tuple[str, ...] | None = opt(None, "a speech model: your .wav clips the page offers beside the bundled ones")

    def __post_init__(self):
        if self.audio is not None:
            clips = (self.audio,) if isinstance(self.audio, str) else tuple(self.audio)
            for c in clips or ("",):
                nonempty_text(c, "audio", optional=False)
            set_field(self, "audio", clips)
        if not isinstance(self.host, str) or not self.host.strip() or any(c in self.host for c in "/ ?#@"):
            raise InputError(f"host must be an address such as 127.0.0.1, got {self.host!r}", field="host")
        integer(self.port, "port", 0, 65535)
        integer(self.max_tokens, "max_tokens", 2, 1_000_000, optional=True)
        number(self.time_limit, "time_limit", 0, 86_400)
        integer(self.queue, "queue", 0, 1000)
        integer(self.cache_mb, "cache_mb", 0, 1_000_000)
        number(self.grace, "grace", 0, 3600)


__all__ = [
    "CONVENTIONS",
    "KV_DTYPES",
    "MASK_FAMILIES",
    "SERVE_TOKENS",
    "CheckSettings",
    "KVSettings",
    "ServeSettings",
    "SimulateSettings",
]
