"""cost/: what routing takes in memory and time — KV-cache bytes, the serving simulation, the
formulas of the long-context bill, whether a model fits a device for a verb (fit). Numbers only: the
measurements run in bench/, the figures in show/.
"""

from .fit import fit
from .footprint import kv, kv_bill, kv_card, kv_spec, read_config_json
from .kv import DTYPE_BYTES, KVSpec, spec_from_config, spec_from_sizes
from .long_context import predicted_bytes, predicted_flops
from .serving import POLICIES, ServeRequest, ServingInputError, serve, serve_stream, simulate

__all__ = [
    "DTYPE_BYTES",
    "POLICIES",
    "KVSpec",
    "ServeRequest",
    "ServingInputError",
    "fit",
    "kv",
    "kv_bill",
    "kv_card",
    "kv_spec",
    "predicted_bytes",
    "predicted_flops",
    "read_config_json",
    "serve",
    "serve_stream",
    "simulate",
    "spec_from_config",
    "spec_from_sizes",
]
