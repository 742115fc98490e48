"""Progress of a long command on the terminal: rich bars on a terminal, one line per stage in a log."""

from __future__ import annotations

LABELS = {
    "load": "loading: ",
    "warn": "note: ",
    "stage": "stage: ",
    "checkpoint": "checkpoint: ",
    "partial": "so far: ",
}


class ReadProgress:
    """Progress of `attnroute heads` / `report` on stderr: loading, stages, text layers and the exact
    ablation (layer, heads done, ETA). On a terminal: rich bars. Otherwise (stderr redirected to a
    file or a CI log): one line per stage and one line per ablated layer, each with elapsed time and,
    for the ablation, an ETA — never a bar that turns into megabytes of carriage returns."""

    def __init__(self, console, on_partial=None):
        import time

        self.on_partial = on_partial  # called with each "partial" event (its result): the CLI writes the JSON so far
        self.wants_partial = on_partial is not None
        self.console, self.live, self.clock = console, console.is_terminal, time.perf_counter
        self.t0 = self.clock()
        self.progress, self.tasks, self._last_line = None, {}, -1e9
        if self.live:
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

            self.progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.completed}/{task.total}"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                console=console,
                transient=True,
            )

    def __enter__(self):
        if self.progress:
            self.progress.__enter__()
        return self

    def __exit__(self, *exc):
        return self.progress.__exit__(*exc) if self.progress else None

    def _line(self, text: str) -> None:
        # soft_wrap: a log line stays one line (rich would wrap at 80 columns when stderr is a file)
        self.console.print(f"[{self.clock() - self.t0:6.1f} s] {text}", highlight=False, soft_wrap=True, markup=False)

    def __call__(self, event) -> None:
        """One progress.Event: a line for load/warn/stage/rank, a bar (or a line every few seconds when
        not on a terminal) for the counters."""
        kind, text = event.stage, event.message
        if kind in ("load", "warn", "stage", "checkpoint", "rank", "partial"):
            label = LABELS.get(kind, "")
            (self.progress.console.print if self.progress else self._line)(f"{label}{text}")
            if kind == "partial" and self.on_partial is not None and event.result is not None:
                self.on_partial(event)
        elif kind == "layer":  # text statistics, one event per layer
            if self.progress:
                self._advance("text statistics (layers)", event.total, completed=event.done)
        elif kind == "corpus":  # documents of this rank
            line = f"{text}, ETA {event.eta:.0f} s"
            if self.progress:
                self._advance("corpus", event.total, key="corpus", completed=event.done)
                self.progress.update(self.tasks["corpus"], description=line)
            elif self.clock() - self._last_line >= 5 or event.done == event.total:
                self._last_line = self.clock()
                self._line(line)
        elif kind == "ablate":  # exact ablation: heads done of the sweep
            if self.progress:
                self._advance(f"exact ablation ({text})", event.total, key="ablate", completed=event.done)
            else:
                self._line(f"ablation {text}: {event.done}/{event.total} heads, ETA {event.eta:.0f} s")
        elif event.total:  # any other counter (runs recorded, components patched, routes verified): a bar or a line
            if self.progress:
                self._advance(text or kind, event.total, key=kind, completed=event.done)
            elif self.clock() - self._last_line >= 5 or event.done == event.total:
                self._last_line = self.clock()
                self._line(f"{text or kind}: {event.done}/{event.total}")

    def _advance(self, desc, total, key=None, completed=None):
        key = key or desc
        if key not in self.tasks:
            self.tasks[key] = self.progress.add_task(desc, total=total)
        if completed is None:
            self.progress.advance(self.tasks[key])
        else:
            self.progress.update(self.tasks[key], completed=completed, description=desc)


__all__ = ["LABELS", "ReadProgress"]
