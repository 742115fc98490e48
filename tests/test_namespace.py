import attnroute


def test_public_surface_is_pinned():
    # attention-gym's test_namespaces habit: the public API changes only on purpose.
    expected = {
        "attend", "choose_impl", "IMPLS", "UnsupportedRequest",
        "Mask", "causal", "sliding_window", "window_from", "window_to", "padding", "from_hf", "document",
        "prefix_lm", "predicate", "full",
        "to_mha", "from_mha", "to_key_padding_mask", "to_hf", "from_hf_2d", "to_additive", "from_additive",
        "combine_additive",
        "project", "score", "scale_and_mask", "normalize", "aggregate", "Trace", "WeightBlock",
        "Probe", "RowStats", "KeyMass", "CallbackProbe",
        "Intervention", "ZeroHead", "ReplaceOutput", "UniformWeights", "Temperature", "SubstituteWeights",
        "sinusoidal", "sinusoidal_shift", "LearnedPositions", "SinusoidalPositions", "RoPE", "apply_rope",
        "rope_frequencies", "interleaved_to_half_split", "half_split_to_interleaved",
        "MultiHeadAttention", "FeedForward", "Block", "TinyConfig", "TinyTransformer", "KVCache",
        "probsparse_attend", "probsparse_sizes", "TOLERANCE", "assert_close_to_reference",
        "read", "read_routed", "HeadTable", "load_model", "check", "CheckReport", "learn",
    }
    assert set(attnroute.__all__) == expected
    for name in expected:
        assert getattr(attnroute, name) is not None


def test_read_is_the_function_and_import_stays_light():
    import subprocess
    import sys

    assert callable(attnroute.read) and callable(attnroute.learn)
    code = "import sys, attnroute; print('transformers' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "False"  # transformers loads only when a model is read
