"""show/: terminal tables, matplotlib figures and the self-contained HTML report."""
