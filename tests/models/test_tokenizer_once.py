"""A model directory's tokenizer is read once per process: the checks before the weights load (model_facts)
and the load share it (Gemma 3's takes ~5 s to read), and an edited tokenizer file is read again."""

import json
import os

from read.zoo import build  # the tiny-model zoo of tests/read

from attnroute.models import load, model_facts


def test_facts_and_load_share_one_tokenizer_until_its_files_change(tmp_path):
    path = build("llama", tmp_path)
    facts = model_facts(str(path))
    lm = load(str(path))
    assert facts is not None and lm.tokenizer is facts.tokenizer
    assert load(str(path)).tokenizer is lm.tokenizer  # a second load of the same files: the same object
    text = "qzxroute between tokens"
    ids = lm.tokenizer(text).input_ids
    # an edited tokenizer file (a new token added to the vocabulary) is read again, not served from memory
    config = path / "tokenizer.json"
    data = json.loads(config.read_text())
    data["added_tokens"].append(
        {
            "id": 30522,
            "content": "qzxroute",
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": True,
            "special": False,
        }
    )
    config.write_text(json.dumps(data))
    os.utime(config, ns=(config.stat().st_atime_ns, config.stat().st_mtime_ns + 10**9))
    fresh = load(str(path)).tokenizer
    assert fresh is not lm.tokenizer and fresh(text).input_ids != ids and 30522 in fresh(text).input_ids
