"""speech/: the speech wing — every verb's variant for a speech model (Whisper): clips in, the decoder's
words out, routes across the encoder, the decoder and cross-attention. It composes the rooms (it may import
them; no room imports it) and is reached once, at the top of a verb (read/verbs.py), never by a branch
through the text path.

    clips   circuits and path patching between two clips (one pair of clips is the prompt set)
    patch   activation patching between two clips, head by head across the three modes
    routes  route attribution across streams: a decoder row's routes to the clip's frames
    why     why() on a clip: a cross head's score split into decoder × encoder components
    cross   knockout and swap across streams: a word's routes to its frames, one clip's maps in another

What a speech model runs (the features, the decoder's prompt, greedy transcription) is read/ground/speech's,
shared with the floor's text reads of a speech model (heads); its loading is models/ (ct2, whisper).
"""

from .clips import clip_circuit, clip_path_patch
from .cross import CrossError, CrossKnockoutResult, CrossSwapResult, cross_knockout, cross_swap
from .patch import SpeechPatchResult, speech_patch
from .routes import SpeechRoutesResult, speech_routes
from .why import why_speech

__all__ = [
    "CrossError",
    "CrossKnockoutResult",
    "CrossSwapResult",
    "SpeechPatchResult",
    "SpeechRoutesResult",
    "clip_circuit",
    "clip_path_patch",
    "cross_knockout",
    "cross_swap",
    "speech_patch",
    "speech_routes",
    "why_speech",
]
