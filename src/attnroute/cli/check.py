"""`attnroute check TARGET`: audit an attention implementation for mask, scale and precision bugs.
Exit 0 when every check passes, 1 when one fails, 2 when the target cannot be loaded or called."""

from __future__ import annotations

from ..settings import CONVENTIONS, MASK_FAMILIES, CheckSettings
from .common import STDOUT, emit_json, json_flag, option, outputs, settings_from, some_names

C = CheckSettings

CONVENTION_HELP = (
    "how the target takes its mask: sdpa (default; bool, True = may attend), mha (bool, True = masked), "
    "additive (float added to the scores), hf (transformers' 4-D additive mask), causal (the target is causal "
    "by nature and takes no mask: only the causal cases can be asked; a decoder that takes a mask but only a "
    "causal one is --mask-family causal in its own convention)"
)


def add(sub) -> None:
    c = sub.add_parser("check", help="audit an attention implementation for mask, scale and precision bugs")
    c.add_argument(
        "target",
        help="module:function, path/to/file.py:function, torch.sdpa, torch.mha, "
        "attnroute.{eager,blocked,sdpa,probsparse}, hf:smollm2, hf:minilm or hf:PATH",
    )
    option(c, "--convention", C, choices=CONVENTIONS, help=CONVENTION_HELP)
    option(
        c,
        "--mask-family",
        C,
        choices=MASK_FAMILIES,
        help="the masks the target can express: any (default), "
        "causal (a decoder that takes its mask in its convention but only causal ones: every check, scale and "
        "garbage included, is asked with a causal mask; padding and windows come combined with causal), "
        "bidirectional (an encoder)",
    )
    json_flag(c, "the report")
    c.add_argument("--only", help="comma-separated check names to run")
    c.add_argument("--skip", help="comma-separated check names to mark not applicable")
    option(c, "--scale", C, type=float, help="the temperature the target means to use (e.g. 1 for T5); default 1/√d")
    option(
        c,
        "--softcap",
        C,
        type=float,
        help="the target soft-caps its scaled logits, cap·tanh(s/cap), before the "
        "mask (Gemma 2: 50); the reference does the same. Default: none (an hf: model's own "
        "attn_logit_softcapping)",
    )
    _decoder_flags(c)
    option(c, "--strict", C, action="store_true")
    option(c, "--timeout", C, type=float)
    c.set_defaults(fn=run)


def _decoder_flags(c) -> None:
    """What a decoder that builds its own mask declares, so that kv_decode judges it on its window."""
    option(
        c,
        "--window",
        C,
        type=int,
        help="the target is a decoder with a sliding window of W keys (its own query included): in the causal "
        "convention it applies the window itself; kv_decode decodes through a cache with it",
    )
    option(c, "--sinks", C, type=int)


def run(args) -> int:
    spec = args.target
    source = [("model", spec[3:])] if spec.startswith("hf:") else [("target", spec.rsplit(":", 1)[0])]
    outputs(source, {"json": args.json})
    lists = {"only": ("only", check_names), "skip": ("skip", check_names)}
    settings = settings_from(C, args, convert=lists)
    from ..check.audit import audit

    result = audit(settings)
    emit_json(result.to_dict(), args.json)
    if args.json != STDOUT:
        print("\n".join(result.summaries()))
    return 0 if result.passed else 1


def check_names(text: str) -> tuple[str, ...]:
    """'a,b' -> ('a', 'b'); a list with nothing in it (',') is refused, never read as "every check"."""
    return some_names(text, "only", "check names")
