"""show/: terminal tables, matplotlib figures and the self-contained HTML report.

Takes data from the analysis floors (read, check, cost, learn) and runs no model.

    heads, knockout, swap, needle, patch, routes, circuit, why, cross, learn, cost, bench
                   one module per verb: its tables, figure and title
    card           the one card builder of the report pages
    report         the routing report: one self-contained HTML page, its data as JSON, PNG charts
    sections       the report's extra cards from other commands' JSON results (--add, --learn)
    results        ar.load: any result's JSON back as its typed result, its stamp and format checked
    sizes          the bounds on what a result file may size (positions, layers, labels) before drawing
    speech         the audio report of a speech model's read of a clip
    explorer       the explorer's page, a text's grid data, the saved report
    figures        PNG versions of the report's main charts
    learn_figures  figures of the learn experiments
    plotting       the one matplotlib set-up (headless; user text drawn as it is)
    progress       progress on the terminal: rich bars, or one line per stage in a log
    jsonout        the one JSON writer and reader of attnroute's outputs
    text           text forms several tables share: tokens as they ran, CSV rows
    units          the one byte formatter
    weights        attention weights as bytes a page can carry
"""

__all__: list[str] = []
