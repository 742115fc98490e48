"""The one door for the model (door.load): what a user holds becomes a LoadedModel, or is refused naming
`model`. Its rooms, one job each:

    loaded     the LoadedModel type and ModelLoadError
    door       the door itself — names, paths, LoadedModels and transformers objects
    adapters   what wraps a transformers model: PEFT read through its merged adapters; compiled, quantized refused
    offload    weights accelerate offloaded to the CPU or disk, read one module at a time
    forwards   a module's forward replaced for a block and given back exactly
    arithmetic  a bf16 or fp16 model computing in float32 for a block, with no float32 copy of it (routes)
    gradient_layout  a CPU bf16/fp16 Linear's input gradient in the layout torch's GEMM is fast in
    placement  the dtype, device or device map a model is loaded with, checked before it loads
    fit        will it fit: a verb's peak memory predicted from the config alone (cost fit's formula)
    sources    bundled names, directories, .gguf files, CTranslate2 folders and hub ids
    directory  a transformers model directory and its tokenizer
    caches     converted models kept as safetensors (GGUF, CTranslate2), one converter at a time
    safety     the refusals before anything is built (pickles, devices, partial weights, size)
    facts      what is known before the weights load (tokenizer, kind, config)
    discovery  the model's kind, its attention modules by stream, the projection after its heads
    ct2, whisper  the speech source — CTranslate2's file format read, Whisper built from it

In a Jupyter kernel without ipywidgets, tqdm.auto (imported by transformers and huggingface_hub) warns
"IProgress not found" on import. Those bars are not attnroute's, so the warning is filtered by its message.
"""

import warnings

from .caches import content_key, one_converter, write_cache
from .discovery import attention_modules, model_kind, out_projection
from .door import TAKES, from_object, load
from .facts import Facts, config_of, facts_of, load_tokenizer, model_facts
from .loaded import LoadedModel, ModelLoadError
from .sources import BUNDLED, package_dir, quiet_transformers

warnings.filterwarnings("ignore", message="IProgress not found")

__all__ = [
    "BUNDLED",
    "TAKES",
    "Facts",
    "LoadedModel",
    "ModelLoadError",
    "attention_modules",
    "config_of",
    "content_key",
    "facts_of",
    "from_object",
    "load",
    "load_tokenizer",
    "model_facts",
    "model_kind",
    "one_converter",
    "out_projection",
    "package_dir",
    "quiet_transformers",
    "write_cache",
]
