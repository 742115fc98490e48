"""What a speech model (Whisper) runs: log-mel features into the encoder, the transcript into the decoder.

    ids = decoder_ids(loaded, "The capital of France is Paris.")   # [1, T]: prompt, the text's tokens, <|endoftext|>
    ids, text = transcribe(loaded, feats)                            # greedy decoding, when no text is given
    batch = speech_batch(feats, ids)                                 # input_features, decoder_input_ids, mask
    P = prompt_length(loaded, ids)                                   # the first text position

The decoder prompt is Whisper's own: ``<|startoftranscript|><|notimestamps|>`` for an English-only model,
``<|startoftranscript|><|en|><|transcribe|><|notimestamps|>`` for a multilingual one (its vocabulary holds
the language tokens: 51,865 entries and more). A transcript is scored as the model's loss scores it: row
t predicts token t + 1, over the text and the closing <|endoftext|>.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch

from ...errors import InputError
from ..stimuli import tokens_of
from .metrics import token_loss
from .prompts import Group

MULTILINGUAL_VOCAB = 51_865  # an English-only Whisper has 51,864 tokens


def prompt_ids(loaded) -> list[int]:
    """Whisper's decoder prompt, from its tokenizer's own special tokens (models/discovery.py refuses a Whisper whose
    tokenizer lacks them)."""
    tok, cfg = loaded.tokenizer, loaded.model.config
    ids = [int(cfg.decoder_start_token_id)]
    if int(cfg.vocab_size) >= MULTILINGUAL_VOCAB:
        ids += tok.convert_tokens_to_ids(["<|en|>", "<|transcribe|>"])
    return ids + [no_timestamps(loaded)]


def no_timestamps(loaded) -> int:
    return int(loaded.tokenizer.convert_tokens_to_ids("<|notimestamps|>"))


def text_ids(loaded, text: str) -> list[int]:
    """The transcript's tokens as Whisper writes them (a leading space before the first word)."""
    return loaded.tokenizer(" " + text.strip(), add_special_tokens=False).input_ids


def decoder_ids(loaded, text: str) -> torch.Tensor:
    """[1, T] teacher-forced decoder input: the prompt, the text, <|endoftext|>; refused beyond 448 positions."""
    ids = prompt_ids(loaded) + text_ids(loaded, text) + [int(loaded.model.config.eos_token_id)]
    loaded.fit(len(ids), "text", "the transcript with Whisper's prompt")
    return torch.tensor([ids])


def prompt_length(loaded, ids: torch.Tensor) -> int:
    """Where the text starts: after <|notimestamps|> (the same in every row of a batch)."""
    nots = no_timestamps(loaded)
    hits = (ids[0] == nots).nonzero()
    return int(hits[0, 0]) + 1 if len(hits) else 1


def speech_batch(features: torch.Tensor, ids: torch.Tensor) -> dict:
    """The model's inputs: features [1 or B, n_mels, 3000] repeated to the decoder ids' rows [B, T]."""
    feats = features.expand(ids.shape[0], -1, -1) if features.shape[0] == 1 else features
    return {"input_features": feats, "decoder_input_ids": ids, "decoder_attention_mask": torch.ones_like(ids)}


@dataclass(frozen=True)
class Clips:
    """Runs of a speech model as prompts are runs of a text model: features [n, n_mels, 3000] and the decoder
    ids [n, T] they are read with, row by row. ``batch_of`` turns them into the model's inputs, so every
    experiment built on prompt groups (circuits, path patching) runs on clips unchanged."""

    features: torch.Tensor
    ids: torch.Tensor

    def __getitem__(self, rows) -> Clips:
        return Clips(self.features[rows], self.ids[rows])

    @property
    def shape(self) -> torch.Size:
        return self.ids.shape

    def batch(self) -> dict:
        return speech_batch(self.features, self.ids)


@dataclass
class ClipGroup(Group):
    """One clean/corrupt pair of clips, as a group of prompts: ``length`` is the longest stream's — the
    encoder's frames, not the decoder's few tokens — because it sizes every run's batch."""

    frames: int = 0

    @property
    def length(self) -> int:
        return max(int(self.clean.shape[1]), self.frames)


class ClipPairError(InputError):
    """Two clips that cannot be compared as asked."""


def no_audio_encoder(name: str) -> ClipPairError:
    """The refusal of clips given to a model that reads text (a clip verb's Study raises it, before the load)."""
    return ClipPairError(f"{name} has no audio encoder: compare two clips on a speech model", field="model")


@dataclass(frozen=True)
class ClipPair:
    """A clean and a corrupted clip read with the same decoder text, and the two words compared after it.

    ids          [1, T] the decoder's input: Whisper's prompt and ``prefix`` (the same in both runs, so every
                 position means the same); the metric reads the last position, where the word is predicted
    answer/wrong the first token of the clean clip's word and of the corrupted clip's
    """

    clean: object  # audio.Audio
    corrupt: object
    features: tuple[torch.Tensor, torch.Tensor]  # [1, n_mels, 3000] each
    transcripts: dict  # clean, corrupt: the greedy transcripts
    prefix: str
    ids: torch.Tensor
    answer: int
    wrong: int

    def group(self, loaded) -> ClipGroup:
        """The pair as a group of one prompt pair (circuits' runs take groups)."""
        frames = int(getattr(loaded.model.config, "max_source_positions", 0) or 0)
        a, w = torch.tensor([self.answer]), torch.tensor([self.wrong])
        return ClipGroup([0], Clips(self.features[0], self.ids), Clips(self.features[1], self.ids), a, w, frames)

    def record(self, loaded) -> list[dict]:
        """What the result says of its one 'prompt': the clips, their transcripts, the text both runs read."""
        word, tokens = loaded.tokenizer.decode, tokens_of(loaded.tokenizer, self.ids[0])
        return [
            {
                "row": 1,
                "clean": tokens,  # the decoder tokens, as a prompt's record holds them: both runs read these
                "corrupt": tokens,
                "clips": {"clean": self.clean.describe(), "corrupt": self.corrupt.describe()},
                "transcripts": self.transcripts,
                "prefix": self.prefix,
                "answer": word([self.answer]),
                "wrong": word([self.wrong]),
            }
        ]


def split_at_difference(clean: str, corrupt: str) -> tuple[str, str, str]:
    """(the words both transcripts share before they differ, the clean word, the corrupted word)."""
    a, b = re.findall(r"[\w']+", clean), re.findall(r"[\w']+", corrupt)
    for i, (x, y) in enumerate(zip(a, b)):
        if x != y:
            return " ".join(a[:i]), x, y
    raise ClipPairError(
        f"the clips transcribe alike ({clean!r} / {corrupt!r}): give `text`, `answer` and `wrong`", field="corrupt"
    )


def features_of(loaded, clip) -> torch.Tensor:
    """A clip's log-mel features [1, n_mels, 3000] as the model reads them: its number of mel bins, in the dtype
    it computes in (a bf16 Whisper's first convolution refused float32 features: every speech verb crashed)."""
    return clip.features(int(loaded.model.config.num_mel_bins)).to(loaded.dtype)


def clip_pair(loaded, clean, corrupt, text: str | None = None, answer=None, wrong=None) -> ClipPair:
    """Two clips (audio.Audio) on a speech model, read with one decoder text: ``text`` with ``answer`` and
    ``wrong`` as given, or — unset — the words the greedy transcripts share before they first differ, and the
    two words there."""
    if not loaded.audio:
        raise no_audio_encoder(loaded.name)
    fa, fb = features_of(loaded, clean), features_of(loaded, corrupt)
    ta, tb = (t for _, t in transcribe_batch(loaded, torch.cat([fa, fb])))
    prefix, word_a, word_b = (text, answer, wrong) if text is not None else split_at_difference(ta, tb)
    a, w = word_token(loaded, answer or word_a, "answer"), word_token(loaded, wrong or word_b, "wrong")
    ids = torch.tensor([prompt_ids(loaded) + (text_ids(loaded, prefix) if prefix.strip() else [])])
    loaded.fit(ids.shape[1], "text", "the decoder text with Whisper's prompt")
    return ClipPair(clean, corrupt, (fa, fb), {"clean": ta, "corrupt": tb}, prefix, ids, a, w)


def clip_batch(loaded, clips) -> dict:
    """Clips (audio.Audio with a text) as one batch: features [N, n_mels, 3000] and each transcript
    teacher-forced, right-padded [N, T] with its decoder mask."""
    feats = torch.cat([features_of(loaded, c) for c in clips])
    rows = [decoder_ids(loaded, c.text)[0] for c in clips]
    ids = torch.zeros(len(rows), max(len(r) for r in rows), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, : len(r)], mask[i, : len(r)] = r, 1
    return {"input_features": feats, "decoder_input_ids": ids, "decoder_attention_mask": mask}


def word_token(loaded, word: str, field: str) -> int:
    """The first token of ``word`` as Whisper writes it mid-sentence (after a space)."""
    ids = loaded.tokenizer(" " + word.strip(), add_special_tokens=False).input_ids
    if not ids:
        raise InputError(f"`{field}` {word!r} is no token", field=field)
    return int(ids[0])


def last_logit_diff(answer: int, wrong: int | None):
    """metric(logits, batch) -> [B]: logit(answer) − logit(wrong) at the last position; log p(answer)
    without ``wrong``."""

    def fn(logits, batch=None):
        last = logits[:, -1].float()
        return torch.log_softmax(last, -1)[:, answer] if wrong is None else last[:, answer] - last[:, wrong]

    fn.last_only = True
    return fn


def suppressed(loaded) -> tuple[torch.Tensor, torch.Tensor]:
    """(never, not first), bool [vocab]: the tokens greedy decoding never emits (the config's suppressed
    tokens, <|notimestamps|> and every timestamp after it), and those it also never emits first."""
    cfg = loaded.model.config
    never = torch.zeros(int(cfg.vocab_size), dtype=torch.bool)
    never[list(cfg.suppress_tokens or [])] = True
    never[no_timestamps(loaded) :] = True
    first = never.clone()
    first[list(cfg.begin_suppress_tokens or [])] = True
    return never, first


def text_loss(loaded, batch: dict, logits: torch.Tensor) -> torch.Tensor:
    """Per example, the mean next-token loss over the transcript and its <|endoftext|> (the prompt excluded)."""
    ids = batch["decoder_input_ids"]
    P = prompt_length(loaded, ids)
    ce = token_loss(logits[:, P - 1 : -1], ids[:, P:])  # rows P−1 … T−2 predict tokens P … T−1
    m = batch["decoder_attention_mask"][:, P:].float()
    return (ce * m).sum(1) / m.sum(1).clamp_min(1)


@torch.no_grad()
def transcribe(loaded, features: torch.Tensor, max_new: int = 120) -> tuple[torch.Tensor, str]:
    """Greedy decoding of one clip: the decoder ids [1, T] (prompt, text, <|endoftext|>) and the text."""
    ((ids, text),) = transcribe_batch(loaded, features[:1], max_new)
    return ids[None], text


@torch.no_grad()
def transcribe_batch(
    loaded, features: torch.Tensor, max_new: int = 120, cache: bool = True, check=None, encoding=None
) -> list[tuple[torch.Tensor, str]]:
    """Greedy decoding of clips [B, n_mels, 3000] at once, as OpenAI's does it without timestamps: the
    suppressed tokens never, the begin-suppressed ones not first, timestamp tokens never; a row stops at
    <|endoftext|> (then fed <|endoftext|> until every row has stopped). Run inside ``routed(...)`` it
    decodes under that intervention: the encoder runs once, under it too. ``cache`` False: every step reruns
    the decoder on all tokens so far, so an intervention placed on decoder rows (KnockoutEdges by_row) stays
    on those positions (with the cache each step is row 0). ``check``: called between steps (cancellation).
    ``encoding``: the clips' encoder output, where the caller holds it (computed under the same routing, and
    no intervention of the encoder): the encoder is not run again. Per clip: ids [T] and text."""
    from transformers import DynamicCache, EncoderDecoderCache

    model, cfg = loaded.model, loaded.model.config
    eot, B = int(cfg.eos_token_id), features.shape[0]
    ids = torch.tensor([prompt_ids(loaded)] * B)
    enc = encoding if encoding is not None else model.model.encoder(input_features=features)
    banned, first = suppressed(loaded)
    done = torch.zeros(B, dtype=torch.bool)
    # A KV cache: the cross-attention keys and values of the 1,500 frames are projected once, not per token.
    kv = EncoderDecoderCache(DynamicCache(config=cfg), DynamicCache(config=cfg)) if cache else None
    step_ids = ids
    for step in range(min(max_new, (loaded.max_positions or 448) - ids.shape[1] - 1)):
        if check is not None:
            check()
        if cache:
            out = model(encoder_outputs=enc, decoder_input_ids=step_ids, cache=kv, use_cache=True)
        else:
            out = model(encoder_outputs=enc, decoder_input_ids=ids, use_cache=False)
        logits = out.logits[:, -1]
        nxt = logits.masked_fill(first if step == 0 else banned, float("-inf")).argmax(-1)
        nxt = torch.where(done, torch.full_like(nxt, eot), nxt)
        ids = torch.cat([ids, nxt[:, None]], 1)
        step_ids = nxt[:, None]
        done |= nxt == eot
        if bool(done.all()):
            break
    P = len(prompt_ids(loaded))
    out = []
    for row in ids:
        stop = (row[P:] == eot).nonzero()
        end = P + int(stop[0, 0]) if len(stop) else len(row)
        out.append((torch.cat([row[:end], torch.tensor([eot])]), loaded.tokenizer.decode(row[P:end]).strip()))
    return out


__all__ = [
    "ClipGroup",
    "ClipPair",
    "ClipPairError",
    "Clips",
    "clip_pair",
    "clip_batch",
    "decoder_ids",
    "features_of",
    "last_logit_diff",
    "no_audio_encoder",
    "prompt_ids",
    "prompt_length",
    "speech_batch",
    "split_at_difference",
    "suppressed",
    "text_ids",
    "text_loss",
    "transcribe",
    "transcribe_batch",
    "word_token",
]
