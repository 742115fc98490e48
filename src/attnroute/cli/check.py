"""`attnroute check TARGET`: audit an attention implementation for mask, scale and precision bugs.
Exit 0 when every check passes, 1 when one fails, 2 when the target cannot be loaded or called."""

from __future__ import annotations

from ..settings import CONVENTIONS, MASK_FAMILIES, CheckSettings
from .common import STDOUT, emit_json, json_flag, names, outputs

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
        help="module:function, torch.sdpa, torch.mha, attnroute.{eager,blocked,sdpa,probsparse}, "
        "hf:smollm2, hf:minilm or hf:PATH",
    )
    c.add_argument("--convention", default="sdpa", choices=CONVENTIONS, help=CONVENTION_HELP)
    c.add_argument(
        "--mask-family",
        choices=MASK_FAMILIES,
        help="the masks the target can express: any (default), causal (a decoder that takes its mask in its "
        "convention but only causal ones: every check, scale and garbage included, is asked with a causal mask; "
        "padding and windows come combined with causal), bidirectional (an encoder)",
    )
    json_flag(c, "the report")
    c.add_argument("--only", help="comma-separated check names to run")
    c.add_argument("--skip", help="comma-separated check names to mark not applicable")
    c.add_argument("--scale", type=float, help="the temperature the target means to use (e.g. 1 for T5); default 1/√d")
    c.add_argument(
        "--softcap",
        type=float,
        help="the target soft-caps its scaled logits, cap·tanh(s/cap), before the mask (Gemma 2: 50); the "
        "reference does the same. Default: none (an hf: model's own attn_logit_softcapping)",
    )
    c.add_argument(
        "--strict",
        action="store_true",
        help="hazards fail too (exit 1), and so do shapes the target does not accept (grouped heads, Tq > Tk)",
    )
    c.add_argument("--timeout", type=float, default=10.0, help="seconds per call before the target counts as hung")
    c.set_defaults(fn=run)


def run(args) -> int:
    outputs({"target": args.target[3:] if args.target.startswith("hf:") else None}, {"json": args.json})
    fields = {
        f: getattr(args, f) for f in ("target", "convention", "scale", "softcap", "strict", "timeout", "mask_family")
    }
    settings = CheckSettings(**fields, only=names(args.only), skip=names(args.skip))
    from ..check.audit import audit

    result = audit(settings)
    emit_json(result.to_dict(), args.json)
    if args.json != STDOUT:
        print("\n".join(result.summaries()))
    return 0 if result.passed else 1
