"""One run object per verb (Study): what every verb does before its own work, written once.

    st = Study(settings, progress, "patching")
    st.prompts(check=lambda facts, groups: ...)   # prompts and metric read, checked on the tokenizer: no weights
    with st:                                      # process group and rank, checkpoint lock, the model, the
        ...st.loaded, st.groups, st.shard, st.metric, st.say ...   # prompts tokenized and fitted, the shard
        pool = st.pool(make_run)                  # this rank's prompts in runs of bounded tokens and memory
        store = st.store("patch", key, shapes)    # per-prompt arrays, gathered over ranks, checkpointed
    # a Ctrl-C inside the block leaves as Interrupted naming the checkpoint to resume from (when there is one)

Its first half needs no `with` and opens no process group: the text verbs (heads, the experiments, why,
composition) take the model through ``st.load()`` — the one door (models.load) with the verb's progress.

The order is the contract every verb keeps: the checks that need no weights (prompts, metric, the tokenizer's
facts) before the weights load; every rank takes the checkpoint's lock before the weights, and refuses together
(ground/group.agree); the model through the door, never resolved here; then the prompts on the real tokenizer.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path

from ..errors import InputError, InputTypeError, Interrupted
from ..models import Facts, LoadedModel, ModelLoadError, facts_of, load
from ..models.door import is_loaded_or_object
from ..progress import reporter
from ..settings.base import hold
from .ground import runs
from .ground.arrays import Store
from .ground.budget import Bound, run_tokens, scaled
from .ground.checkpoint import CheckpointMismatch, exclusive
from .ground.group import Shard, agree, process_group
from .ground.metrics import resolve
from .ground.pool import RUN_TOKENS, RunPool, chunk_groups
from .ground.prompts import check_metric_kind, tokenize_pairs, usable_pairs

# what a prompt-pair verb (patch, circuit, path_patch) tells a speech model's user to give instead
CLIP_PAIR = "compare two clips instead: `audio_clean` and `audio_corrupt`"
# refuse(kind, audio, name) -> a verb's refusal of a model it cannot read, or None; audio None: not known yet
Refuse = Callable[[str, "bool | None", str], "Exception | None"]


def reads_text(instead: str) -> Refuse:
    """A text verb's refusal of a speech model, saying what to give it ``instead``."""
    said = "is a speech model: it hears clips, not text;"
    return lambda kind, audio, name: InputError(f"{name} {said} {instead}", field="model") if audio else None


def hears_audio(error: Callable[[str], Exception]) -> Refuse:
    """A clip verb's refusal (``error(name)``) of a model known to read text."""
    return lambda kind, audio, name: error(name) if audio is False else None


def causal_only(error: Callable[[str], Exception]) -> Refuse:
    """A refusal (``error(name)``) of every model but a causal LM."""
    return lambda kind, audio, name: error(name) if kind != "causal" else None


class Study:
    """One verb's run. ``what`` names the work in the Interrupted line a Ctrl-C inside the block becomes
    ("patching stopped; …"; None: the verb ends a Ctrl-C its own way). ``kind``: the checkpoint's kind of a
    verb that checkpoints by default — to ``settings.checkpoint`` when given, else to attnroute's cache
    (ground/runs.py) unless ``settings.no_checkpoint``; ``checkpoint(base, rank, world)`` is the file this rank
    writes (default: rank 0 writes the base). ``say``: a reporter a caller already made (ground/speech's
    helpers take one), instead of one made from ``progress``. ``refuse``: the verb's refusal of a model it cannot
    read (reads_text, hears_audio, causal_only), asked of a named model's facts before its weights load and of
    the loaded model after (a text prompt once reached Whisper's encoder as no features at all)."""

    def __init__(
        self,
        settings,
        progress=None,
        what: str | None = None,
        checkpoint: Callable | None = None,
        say=None,
        kind: str | None = None,
        refuse: Refuse | None = None,
    ):
        self.s, self.progress, self.what, self.kind, self.refuse = settings, progress, what, kind, refuse
        self.say = say or reporter(progress)
        self._checkpoint = checkpoint or _rank_zero_writes
        self.checkpoint: Path | None = None  # the run's checkpoint (this rank's file: self._checkpoint of it)
        self.cached = False  # True: the checkpoint is the cache's, not a file the user named
        self.loaded: LoadedModel | None = None
        self.pairs: tuple = ()
        self.groups: list = []
        self.record: list = []
        self.skipped: list[dict] | None = None  # with skip_bad: the rows left out, {row, reason}
        self.metric_name: str | None = None
        self.metric: Callable | None = None
        self.rank, self.world = 0, 1
        self.shard: Shard | None = None
        self._held: contextlib.ExitStack | None = None
        self.bound = Bound(None)  # the memory cap while the study is entered (none unless max_memory)

    def partial(self, build: Callable, done: list, pending: list, message: str, running: list | None = None) -> None:
        """Say the result so far (a site, a stage or a settle round finished): ``build()`` makes it, marked
        partial — what is done, what is ``running`` (sites between settle rounds, their rows so far in the
        result) and what is pending — and a "partial" event carries it (the CLI writes its JSON
        then). Built only for a listener that takes results: a callable of the user's, or one that says
        ``wants_partial`` (the terminal's progress lines and the notebook bar only say the line)."""
        if self.progress is None or self.progress is False or not getattr(self.progress, "wants_partial", True):
            self.say("partial", message)
            return
        result = build()
        result.partial = {"done": list(done), "pending": list(pending)}
        if running is not None:
            result.partial["running"] = list(running)
        self.say("partial", message, result=result)

    # ---------------------------------------------------------------- the first half: no weights, no ranks

    def facts(self):
        """The model's tokenizer, kind and config before its weights load (None: load() must say why)."""
        if is_loaded_or_object(self.s.model):  # in memory already: built once, and its facts read from it
            loaded = self.load()
            return Facts(loaded.tokenizer, loaded.kind, loaded.model.config)
        facts = facts_of(self.s.model, self.tokenizer())
        if facts is not None:
            self._refused(facts.kind, facts.audio, os.fspath(self.s.model))
        return facts

    def _refused(self, kind: str, audio: bool | None, name: str) -> None:
        if self.refuse is not None and (error := self.refuse(kind, audio, name)) is not None:
            raise error

    def load(self) -> LoadedModel:
        """The settings' model through the one door, once."""
        if self.loaded is None:
            if self.refuse is not None and isinstance(self.s.model, str | os.PathLike):
                self.facts()  # the refusal before the weights load, when the facts can tell
            s, say = self.s, lambda m: self.say("load", m)
            where = {"device": getattr(s, "device", None), "device_map": getattr(s, "device_map", None)}
            self.loaded = load(s.model, self.tokenizer(), say, getattr(s, "dtype", None), **where)
            self._refused(self.loaded.kind, self.loaded.audio, self.loaded.name)
        if not hold(id(self.loaded), self.loaded.reading) and self.loaded.view is not None:
            raise ModelLoadError(  # outside a verb nothing would undo the view, and without it the numbers are wrong
                "a PEFT model is read by attnroute's verbs, which apply its adapters while they run and undo "
                "them after; pass it to a verb (ar.read_heads, ar.patch, …)"
            )
        return self.loaded

    def tokenizer(self):
        """What goes beside a model object: ``tokenizer`` or ``processor`` (a speech model's), one of them."""
        tokenizer, processor = getattr(self.s, "tokenizer", None), getattr(self.s, "processor", None)
        if tokenizer is not None and processor is not None:
            raise InputTypeError("tokenizer and processor were both given: give one of them", field="processor")
        return processor if tokenizer is None else tokenizer

    def prompts(self, check: Callable | None = None) -> tuple:
        """The metric resolved and the prompt pairs read; ``check(facts, groups)`` runs on the tokenizer's
        groups before the weights load, where the model's facts can be had."""
        self.metric_name, self.metric = resolve(self.s.metric)
        facts = self.facts()
        if facts is not None:  # the metric first: on an encoder a missing answer is not the problem
            check_metric_kind(self.s.metric, facts.kind)
        self.pairs = self.s.read_pairs()
        if facts is not None:
            self.pairs = self.usable(self.pairs, facts)
            groups, _ = tokenize_pairs(facts.tokenizer, facts.kind, self.pairs, self.s.metric)
            if check is not None:
                check(facts, groups)
        return self.pairs

    def usable(self, pairs: tuple, model, gradient: bool = False) -> tuple:
        """The ``pairs`` ``model`` (the model's facts, or the model) can run. With ``skip_bad``, the rows it
        cannot (clean and corrupt of unequal lengths, an answer of several tokens, a field the metric reads
        missing) are left out, listed with their reasons in ``self.skipped`` and said once; every row skipped
        is refused. Without it, or once done, the pairs as they are."""
        if model is None or not getattr(self.s, "skip_bad", False) or self.skipped is not None:
            return pairs
        kept, self.skipped = usable_pairs(model.tokenizer, model.kind, pairs, self.s.metric, gradient)
        if self.skipped:
            rows = ", ".join(str(x["row"]) for x in self.skipped[:10]) + (" …" if len(self.skipped) > 10 else "")
            self.say("warn", f"skipped {len(self.skipped)} of {len(pairs)} prompt rows (skip_bad): rows {rows}")
        return kept

    # ---------------------------------------------------------------- the second half: ranks, lock, model

    def __enter__(self) -> Study:
        with contextlib.ExitStack() as held:  # anything below that raises unwinds what was entered before it
            self.rank, self.world = held.enter_context(process_group())
            self.checkpoint, self.cached = self._checkpoint_base()
            path = self._checkpoint(self.checkpoint, self.rank, self.world) if self.checkpoint else None
            agree(self.world, lambda: held.enter_context(exclusive(path)))  # one writer, before the weights
            loaded = self.load()
            # max_memory: every batching budget scaled to what the cap leaves beside the loaded model (budget.py)
            self.bound = held.enter_context(Bound(getattr(self.s, "max_memory", None), self.say, loaded.model))
            if self.pairs:
                self.pairs = self.usable(self.pairs, loaded)
                self.groups, self.record = tokenize_pairs(loaded.tokenizer, loaded.kind, self.pairs, self.s.metric)
                for g in self.groups:
                    loaded.fit(g.length, "prompts", f"prompt row {self.pairs[g.rows[0]].row}")
                self.shard = Shard(len(self.pairs), self.rank, self.world)
            self._held = held.pop_all()
        return self

    def __exit__(self, kind, error, tb) -> bool:
        held, self._held = self._held, None
        if held is not None:
            held.__exit__(kind, error, tb)
        ck = self.checkpoint
        if kind is KeyboardInterrupt and ck is not None and self.what is not None:
            where = f"attnroute's cache ({ck})" if self.cached else str(ck)
            raise Interrupted(
                f"{self.what} stopped; what was measured is saved in {where}: rerun the same command to resume",
                resume=str(ck),
            ) from None
        return False

    def _checkpoint_base(self) -> tuple[Path | None, bool]:
        """(the run's checkpoint, whether it is the cache's): the file the user named, else the cache's for a
        verb that checkpoints by default (none for a Python metric, which no file can name)."""
        named = getattr(self.s, "checkpoint", None)
        if named is not None:
            return Path(named), False
        if self.kind is None or getattr(self.s, "no_checkpoint", False):
            return None, False
        path = runs.default_checkpoint(self.kind, self.s)
        if path is None:
            return None, False
        path.parent.mkdir(parents=True, exist_ok=True)  # every rank: each takes its own file's lock there
        if self.rank == 0:
            runs.prune(keep=path)
            runs.describe(path, self.kind, self.s)
        return path, True

    def pool(self, make: Callable, groups: list | None = None, per_token: int | None = None):
        """This rank's prompts (or ``groups``) cut into runs of at most RUN_TOKENS tokens, each made by
        ``make(chunk)`` when first needed and kept while the bytes the kept runs hold fit the budget (pool.py).
        ``per_token``: what a run's work holds per token — the runs are cut to what the batches' share holds
        (budget.run_tokens: the default share, or what a memory cap leaves), or a cap is refused here, before any
        run, with the one that would do."""
        groups = self.mine() if groups is None else groups
        longest = max((g.length for g in groups), default=1)
        tokens = run_tokens(scaled(RUN_TOKENS), per_token, longest, self.bound.cap)
        return RunPool(make, chunk_groups(groups, tokens))

    def store(self, kind: str, key: str | None, shapes: dict[str, tuple]) -> Store:
        """The per-prompt arrays of the run, gathered over ranks, resumed from and saved to the checkpoint
        (a cached one written by another run is started over, said in one line)."""
        path = self.checkpoint if key is not None else None
        try:
            store = Store(kind, key, path, shapes, self.shard)
        except CheckpointMismatch as e:
            if not self.cached:
                raise
            self.say("checkpoint", f"starting over: the cached checkpoint cannot be resumed ({e})")
            store = Store(kind, key, None, shapes, self.shard)
            store.path = path
        if store.resumed is not None:
            n = store.resumed["components_measured"]
            self.say("checkpoint", f"resuming from {path}: {n} measured before" + _START_OVER * self.cached)
        return store

    def mine(self) -> list:
        """This rank's prompts as groups of one length, their rows indexing the whole prompt set."""
        picked = tuple(self.pairs[i] for i in self.shard.rows)
        groups = tokenize_pairs(self.loaded.tokenizer, self.loaded.kind, picked, self.s.metric)[0] if picked else []
        for g in groups:
            g.rows = [self.shard.rows[i] for i in g.rows]
        return groups


_START_OVER = " (`attnroute cache clear` or --no-checkpoint to start over)"


def _rank_zero_writes(base: Path, rank: int, world: int) -> Path | None:
    return base if rank == 0 else None


__all__ = ["Study"]
