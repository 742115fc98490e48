"""Terminal tables and CSV of `attnroute patch` and `attnroute routes` results (plain dicts only)."""

from __future__ import annotations

import csv
import io

from rich.table import Table

PATCH_COLUMNS = (
    "layer",
    "head",
    "site",
    "position",
    "exact",
    "normalized",
    "normalized_ci",
    "delta",
    "delta_ci",
    "estimate",
    "estimate_normalized",
)
ROUTE_COLUMNS = (
    "layer",
    "head",
    "query",
    "key",
    "query_token",
    "key_token",
    "weight",
    "norm_weight",
    "estimate",
    "exact",
)


def _f(x, fmt="{:+.3f}") -> str:
    return "—" if x is None else fmt.format(x)


def _pm(x, ci) -> str:
    return "—" if x is None else f"{x:+.3f} ± {ci:.3f}" if ci is not None else f"{x:+.3f}"


def tokens_line(tokens: list[str]) -> str:
    return " ".join(f"[{i}]{t!r}" for i, t in enumerate(tokens))


def patch_tables(result: dict, rows_per_site: int = 10) -> list[Table]:
    m = result["meta"]
    out = []
    for site in m["sites"]:
        a = result["agreement"][site]
        agree = (
            (f"estimate vs exact over {a['n']}: Spearman {a['spearman']:.2f}, R² {a['r2']:.2f}, slope {a['slope']:.2f}")
            if a["spearman"] is not None
            else f"estimate vs exact: {a['n']} measured"
        )
        t = Table(title=f"{site}: top {rows_per_site} by |normalized| ({m['direction']}, {m['metric']}) — {agree}")
        for col in ("component", "normalized", "Δ metric", "estimate (normalized)", "kv shared by"):
            t.add_column(col)
        rows = [r for r in result["rows"] if r["site"] == site and r["exact"] and r["normalized"] is not None]
        for r in sorted(rows, key=lambda r: -abs(r["normalized"]))[:rows_per_site]:
            shared = ",".join(map(str, r.get("query_heads", []))) or "—"
            t.add_row(
                component(r),
                _pm(r["normalized"], r["normalized_ci"]),
                _pm(r["delta"], r["delta_ci"]),
                _f(r["estimate_normalized"]),
                shared,
            )
        out.append(t)
    d = result.get("direct", {})
    if "rows" in d:
        t = Table(title=f"direct effect on the logit difference (adds up to {d['adds_up_max_abs_diff']:.1e})")
        for col in ("head", "clean", "corrupt", "clean − corrupt"):
            t.add_column(col)
        for r in sorted(d["rows"], key=lambda r: -abs(r["difference"] or 0))[:rows_per_site]:
            t.add_row(
                f"L{r['layer']} h{r['head']}",
                _pm(r["clean"], r["clean_ci"]),
                _pm(r["corrupt"], r["corrupt_ci"]),
                _pm(r["difference"], r["difference_ci"]),
            )
        t.add_row(
            "rest",
            _pm(d["rest"]["clean"], d["rest"]["clean_ci"]),
            _pm(d["rest"]["corrupt"], d["rest"]["corrupt_ci"]),
            "",
        )
        out.append(t)
    return out


def agreement_text(a: dict) -> str:
    return f"Spearman {a['spearman']:.2f}, R² {a['r2']:.2f}, slope {a['slope']:.2f}"


def component(r: dict) -> str:
    unit = "" if r["head"] is None else (f" kv{r['head']}" if r["site"] in ("k", "v") else f" h{r['head']}")
    where = "" if r["position"] is None else f" @{r['position']}"
    return f"L{r['layer']}{unit} {r['site']}{where}"


def routes_table(result: dict, rows: int = 20) -> Table:
    a = result["agreement"]["estimate_vs_exact"]
    title = f"top routes by |estimate| of {result['meta']['metric']} = {result['meta']['m']:.3f}"
    if a["spearman"] is not None:
        title += f" — estimate vs exact over {a['n']}: {agreement_text(a)}"
    t = Table(title=title)
    for col in ("layer", "head", "query → key", "weight", "norm-weighted", "estimate", "exact"):
        t.add_column(col)
    for r in result["routes"][:rows]:
        t.add_row(
            str(r["layer"]),
            str(r["head"]),
            f"{r['query']} {r['query_token']!r} → {r['key']} {r['key_token']!r}",
            f"{r['weight']:.3f}",
            _f(r["norm_weight"], "{:.2f}"),
            f"{r['estimate']:+.3f}",
            _f(r["exact"]),
        )
    return t


def csv_text(rows: list[dict], columns: tuple[str, ...]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    w.writeheader()
    for r in rows:
        w.writerow({c: "" if r.get(c) is None else r.get(c) for c in columns})
    return buf.getvalue()


__all__ = ["PATCH_COLUMNS", "ROUTE_COLUMNS", "csv_text", "patch_tables", "routes_table", "tokens_line"]
