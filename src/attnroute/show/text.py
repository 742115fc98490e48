"""Text forms that several verbs' tables share: the tokens as they ran, CSV rows."""

from __future__ import annotations

import csv
import io


def signed(x, fmt: str = "{:+.3f}") -> str:
    """A number with its sign, or an em dash where there is none (not measured)."""
    return "—" if x is None else fmt.format(x)


def plus_minus(x, ci) -> str:
    """'+0.412 ± 0.031', the interval left out where it is not defined."""
    return "—" if x is None else f"{x:+.3f} ± {ci:.3f}" if ci is not None else f"{x:+.3f}"


def agreement_text(a: dict) -> str:
    return f"Spearman {a['spearman']:.2f}, R² {a['r2']:.2f}, slope {a['slope']:.2f}"


def token_text(token: str) -> str:
    """A token as a terminal table shows it: quoted (repr), its spaces drawn as ␣ so that a table never wraps
    inside a token (' Then' wrapped at its space left a lone quote in a narrow column)."""
    return repr(token).replace(" ", "␣")


def tokens_line(tokens: list[str]) -> str:
    """'[0]'<s>' [1]'The' …': every token with its position, as positions are typed on the command line."""
    return " ".join(f"[{i}]{token_text(t)}" for i, t in enumerate(tokens))


def csv_text(rows: list[dict], columns: tuple[str, ...]) -> str:
    """One CSV row per result row, ``columns`` in order (empty where a value is None)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({c: "" if r.get(c) is None else r.get(c) for c in columns})
    return buf.getvalue()


def shortened(text: str, most: int = 48) -> str:
    """``text`` cut to ``most`` characters with an ellipsis: a figure or a card line stays readable, and is
    drawn in bounded time, whatever a result file holds (its full text stays in the JSON, and in a card's
    tooltip)."""
    text = str(text)
    return text if len(text) <= most else text[: most - 1] + "…"


__all__ = ["token_text", "agreement_text", "csv_text", "plus_minus", "shortened", "signed", "tokens_line"]
