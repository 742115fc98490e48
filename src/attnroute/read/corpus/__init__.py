"""corpus/: a corpus read — head statistics over many documents, with intervals.

    documents     documents streamed from files, a directory or a saved Hugging Face dataset
    accumulator   per-document statistics merged over documents and ranks
    store         the accumulator in the ground floor's checkpoint (a read resumes)
    significance  which heads matter: a paired test per candidate, Holm's correction
    read          read_corpus(): runs the passes (the process group: ground/group.py)

A corpus read is resumable and shards its documents over torchrun's ranks.
"""

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
