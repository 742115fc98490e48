"""A corpus read: documents streamed from files or a saved dataset (documents.py), per-document
statistics merged over documents and ranks (accumulator.py), resumable (store.py: the accumulator in
the ground floor's checkpoint), and the heads that matter tested (significance.py). read.py runs the
passes; the process group comes from the ground floor (ground/group.py)."""

from ..ground.checkpoint import CheckpointMismatch
from .documents import Corpus, CorpusError, corpus_kind, documents
from .read import CorpusInterrupted, read_corpus
from .significance import holm, significance

__all__ = [
    "CheckpointMismatch",
    "Corpus",
    "CorpusError",
    "CorpusInterrupted",
    "corpus_kind",
    "documents",
    "holm",
    "read_corpus",
    "significance",
]
