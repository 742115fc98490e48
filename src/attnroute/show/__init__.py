"""show/: terminal tables, matplotlib figures and the self-contained HTML report.

Takes data from the analysis floors (read, check, cost, learn) and runs no model. Modules:
terminal (rich tables), units (one byte formatter), figures / learn_figures / cost_figures (PNG),
report + report.html (the page), learn_section (learn cards in the page).
"""

__all__: list[str] = []
