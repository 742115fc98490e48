"""read/ground/: what the rooms of read/ share, so that no room reaches into another.

    metrics      metric(logits, batch) -> Tensor [B]: the built-ins by name (their facts: promptset.METRICS)
    prompts      prompt pairs as token ids, checked (same length, single-token answers); pair positions
    positions    the one resolver of positions: indices or a word of the text
    batches      what the model runs for a group of prompts, what a metric reads from its outputs
    text_metric  a metric on the runs of one text (knockout, swap)
    settle       the settle rule: exact measurement until the exact top holds
    stats        a mean with its 95 % interval; an estimate's agreement with exact values
    group        the process group under torchrun, one refusal on every rank, prompts dealt over ranks
    checkpoint   one identity (fingerprint), one file format, atomic writes
    ablation     head ablation measured with your metric on your prompts (heads --metric)

The rooms (corpus/, experiments/, patching/ and those after them) import this floor and read/'s
top-level modules, never one another (tests/test_floors.py).
"""

__all__: list[str] = []  # each module is imported by its own name (read/ground/settle.py, …)
