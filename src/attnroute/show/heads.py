"""`attnroute heads` shown: the top heads of each role, weight against effect, and the notes of a read (the
routing check, the ablation statement, the tokens as they ran, a corpus read's significance)."""

from __future__ import annotations

from rich.table import Table

from ..read.roles import ROLES
from .text import token_text

ROLE_COLUMNS = {r.name: r.column for r in ROLES}  # the column that ranks heads of each role
UNITS = {  # what each ranking column's number is, said beside it
    "induction": "weight on the right key",
    "prev_token": "weight on the previous token",
    "duplicate": "weight on the earlier copy",
    "sink_mass": "weight on sinks",
    "local": "weight within 4 positions",
    "entropy_norm": "entropy / log(keys)",
    "entropy": "entropy, nats",
}


def num(x: float, fmt: str = "{:.3f}") -> str:
    """A number, or an em dash where none was measured (NaN: a mode not run, a column not computed)."""
    return "—" if x != x else fmt.format(x)


def headtable_tables(table) -> list[Table]:
    """Top heads per role, then weight versus effect."""
    tokens = getattr(table.meta, "text_tokens", None)
    t = Table(title=f"{table.model}: {table.layers} layers × {table.heads} heads, {tokens} text tokens")
    for col in ("role", "heads", "top heads (layer.head: score)", "score"):
        t.add_column(col)
    for role, col in ROLE_COLUMNS.items():
        heads = table.with_role(role)
        ranked = sorted(heads, key=lambda lh: -float(table[col][lh]))[:5]
        tops = ", ".join(f"L{l}.H{h}: {num(table[col][l, h], '{:.2f}')}" for l, h in ranked)
        t.add_row(role, str(len(heads)), tops, UNITS.get(col, col))
    out = [t]
    agreement = getattr(table.meta, "grad_vs_ablation", None)
    if agreement is not None:
        out.append(_effects_table(table, agreement))
    if getattr(table.meta, "alignment", None):
        out.append(alignment_table(table.meta.alignment))
    return out


EFFECT_COLUMNS = ("sink_mass", "norm_mass", "grad_attr", "ablation_delta", "ablation_mean", "ablation_uniform")


def _effects_table(table, a: dict) -> Table:
    """Weight versus effect: the top heads by zero-ablation Δ, each with its weights and every effect read."""
    e = Table(title="weight versus effect: top heads by zero-ablation Δ")
    for col in ("head", "role", "sink mass", "norm-weighted sink", "grad estimate", "Δ zero", "Δ mean", "Δ uniform"):
        e.add_column(col, justify="right")
    for l, h, _ in table.top("ablation_delta", 8):
        e.add_row(f"L{l}.H{h}", table.roles[l][h], *(num(table[c][l, h]) for c in EFFECT_COLUMNS))
    k = a["k"]
    e.caption = (
        f"gradient estimate vs exact zero-ablation: Spearman {a['spearman']:.2f}, "
        f"top-{k} overlap {a[f'top{k}_overlap']}/{k}"
    )
    return e


def alignment_table(found: dict) -> Table:
    """A speech model's cross-attention heads ranked by how well they follow the audio, beside the
    reference list (OpenAI's alignment heads), with the overlap in the caption."""
    ref = {tuple(r) for r in found.get("reference", [])}
    t = Table(title="cross-attention heads against the audio (best first)")
    for col in ("rank", "cross layer.head", "agreement", "monotonicity", "in the reference"):
        t.add_column(col, justify="right")
    for i, (l, h) in enumerate(found["ranking"][: max(8, len(ref))]):
        t.add_row(
            str(i + 1),
            f"C{l}.H{h}",
            f"{found['agreement'][l][h]:.2f}",
            f"{found['monotonicity'][l][h]:.2f}",
            "yes" if (l, h) in ref else "",
        )
    if "overlap" in found:
        o = found["overlap"]
        t.caption = (
            f"top {o['k']} vs the reference: {o['shared']}/{o['k']} shared; word starts from the reference "
            f"heads differ by {found['word_start_gap_s']} s on average"
        )
    return t


def read_notes(meta) -> list[str]:
    """The lines a read prints on stderr beside its tables (``meta``: a HeadTable's ReadMeta): the routing
    check (or that it was skipped), the ablation statement, a cut text, a corpus read's significance."""
    check = meta.routing_check
    if check is None:
        lines = ["note: routing check skipped (--no-verify): numbers are not verified"]
    else:
        lines = [
            f"routing check: max |Δ {check['compared']}| = {check['max_abs_diff']:.2g} against the model's own eager "
            f"attention (tolerance {check['tolerance']:.2g})"
        ]
    if getattr(meta, "audio", None):
        a = meta.audio
        lines.append(f"audio: {a['clip']}; transcript {a['transcript_source']}: {a['transcript']!r}")
    if getattr(meta, "ablation", None):
        lines.append(f"ablation: {meta.ablation['statement']}")
    if getattr(meta, "metric", None):
        lines.append(f"effect: {meta.effect_batch}")
    tokens = getattr(meta, "tokens", None)
    if tokens:
        shown = " ".join(f"[{i}]{token_text(t)}" for i, t in enumerate(tokens[:12]))
        lines.append(f"tokens ({len(tokens)}, as they ran): {shown}{' …' if len(tokens) > 12 else ''}")
    if getattr(meta, "tokens_cut", 0):
        lines.append(
            f"note: the text was cut to its first {meta.text_tokens} tokens ({meta.tokens_cut} dropped; "
            "--max-tokens or the model's context)"
        )
    imp = getattr(meta, "importance", {})
    if imp.get("note"):
        lines.append(f"importance: {imp['note']}")
    elif imp.get("n_significant") is not None:
        lines.append(
            f"importance: {imp['n_significant']} of {len(imp['candidates'])} candidate heads change the loss "
            f"significantly over {imp['documents']} documents ({imp['correction']})"
        )
    return lines


__all__ = ["ROLE_COLUMNS", "headtable_tables", "read_notes"]
