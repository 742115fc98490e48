"""read/ground/: what the rooms of read/ share, so that no room reaches into another.

    metrics      metric(logits, batch) -> Tensor [B]: the built-ins by name (their facts: promptset.METRICS)
    prompts      prompt pairs as token ids, checked (same length, single-token answers); pair positions
    positions    the one resolver of positions: indices or a word of the text
    batches      what the model runs for a group of prompts, what a metric reads from its outputs
    copies       k copies of a batch or a block's output: k interventions in one forward
    text_metric  a metric on the runs of one text (knockout, swap)
    settle       the settle rule: exact measurement until the exact top holds
    stats        a mean with its 95 % interval; an estimate's agreement with exact values
    group        the process group under torchrun, one refusal on every rank, prompts dealt over ranks
    wire         every rank's value gathered as tensors (bytes, safetensors), never pickled objects
    checkpoint   one identity (fingerprint), one file format, atomic writes
    runs         the checkpoint cache: where a long run checkpoints unasked, bounded, listed and cleared
    arrays       a verb's per-prompt arrays, gathered over ranks and kept in a checkpoint (Store)
    norms        a norm frozen at a run's own scale: the linear map it applies
    pool         prompts cut into runs of bounded tokens; recorded runs kept within a memory budget
    budget       max_memory: every batching budget scaled to a cap, the peak measured against it
    recompute    activations recomputed in the backward instead of stored, block by block
    taps         a tap on one attention layer: zero leaves on its q, k, v and head outputs
    speech       what a speech model runs: log-mel features in, the transcript into the decoder
    ablation     head ablation measured with your metric on your prompts (heads --metric)

The rooms (corpus/, experiments/, patching/ and those after them) import this floor and read/'s
top-level modules, never each other (tests/test_floors.py).
"""

__all__: list[str] = []  # each module is imported by its own name (read/ground/settle.py, …)
