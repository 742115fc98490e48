"""one_gguf_parse's reader (a GGUFReader over a plain array view of its memory map, for speed) reads every
field and tensor of a GGUF file exactly as gguf's own reader does: a written file with every value type."""

import gguf
import numpy as np

from attnroute.models.caches import one_gguf_parse


def _write(path) -> None:
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_uint32("t.u32", 7)
    w.add_int64("t.i64", -3)
    w.add_float32("t.f32", 0.25)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "déjà vu")
    w.add_array("t.tokens", [f"tok{i}·" for i in range(3000)])
    w.add_array("t.scores", [float(i) / 7 for i in range(3000)])
    w.add_array("t.types", list(range(3000)))
    rng = np.random.default_rng(0)
    w.add_tensor("a.weight", rng.standard_normal((33, 17)).astype(np.float32))
    w.add_tensor("b.weight", rng.standard_normal(5).astype(np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_the_parse_shared_within_the_block_reads_what_ggufs_own_reader_reads(tmp_path):
    path = tmp_path / "m.gguf"
    _write(path)
    ref = gguf.GGUFReader(path)
    with one_gguf_parse():
        ours = gguf.GGUFReader(path)
        assert gguf.GGUFReader(str(path)) is ours  # one parse per file within the block
    assert gguf.GGUFReader is not type(ours) and isinstance(ours, type(ref))  # restored after it
    assert type(ours.data) is np.ndarray and type(ref.data) is np.memmap
    assert list(ours.fields) == list(ref.fields) and len(ref.fields["t.tokens"].data) == 3000
    for name, field in ref.fields.items():
        mine = ours.fields[name]
        assert (mine.offset, mine.data, mine.types) == (field.offset, field.data, field.types), name
        assert [p.tobytes() for p in mine.parts] == [p.tobytes() for p in field.parts], name
        assert [p.dtype for p in mine.parts] == [p.dtype for p in field.parts], name
    assert ours.fields["t.tokens"].contents()[2999] == "tok2999·" and ours.fields["t.str"].contents() == "déjà vu"
    assert [(t.name, t.tensor_type, t.shape.tolist()) for t in ours.tensors] == [
        (t.name, t.tensor_type, t.shape.tolist()) for t in ref.tensors
    ]
    for a, b in zip(ours.tensors, ref.tensors, strict=True):
        assert np.array_equal(np.asarray(a.data), np.asarray(b.data)) and a.data.dtype == b.data.dtype


def test_the_tensor_name_map_is_built_once_per_architecture_within_the_block():
    """transformers asks gguf for an architecture's name map once per module of the model (313 times for Gemma 3):
    within the block one map per (architecture, layers) answers every ask, the same names as a fresh one."""
    original = gguf.get_tensor_name_map
    arch = gguf.MODEL_ARCH.LLAMA
    fresh = original(arch, 30)
    with one_gguf_parse():
        first = gguf.get_tensor_name_map(arch, 30)
        assert gguf.get_tensor_name_map(arch, 30) is first and gguf.get_tensor_name_map(arch, 2) is not first
    assert gguf.get_tensor_name_map is original and original(arch, 30) is not fresh  # restored after it
    assert first.mapping == fresh.mapping and first.get_name("model.layers.29.self_attn.q_proj") == "blk.29.attn_q"
