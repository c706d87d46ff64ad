#!/usr/bin/python3
"""Writes the committed seed corpora in tests/fuzz/corpus/ (run once; the files are committed, CI only replays them).

fuzz_sqdk_loader: the two synthetic test models (tests/data/format_*.json) in f32/f16/bf16, and near-misses: header
only, truncated in the directory and in the data, a flipped dimension, an offset past the end, a duplicate name.
fuzz_prompt: ASCII, invalid UTF-8, and call sequences (see fuzz_prompt.cpp for the op encoding)."""
import json
import os
import struct
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import sqdk  # noqa: E402


def build(spec_name, dtype=None, tokenizer_name=None):
    with open(os.path.join(ROOT, "tests", "data", spec_name)) as f:
        spec = json.load(f)
    config, tokenizer = spec["config"], None
    if tokenizer_name:  # format version 2: the tokenizer section after the tensors
        with open(os.path.join(ROOT, "tests", "data", tokenizer_name), encoding="utf-8") as f:
            tokenizer = json.load(f)
        config = dict(config, tokenizer="bpe", bos_id=tokenizer.get("bos_id"), eos_id=tokenizer.get("eos_id"))
    tensors = []
    for index, t in enumerate(spec["tensors"]):
        n = 1
        for d in t["shape"]:
            n *= d
        tensors.append((t["name"], sqdk.spec_values(index, n).reshape(t["shape"]), dtype or t["dtype"]))
    with tempfile.TemporaryDirectory() as d:
        p = os.path.join(d, "m.sqdk")
        sqdk.write_sqdk(p, config, tensors, tokenizer)
        with open(p, "rb") as f:
            return f.read()


def main():
    out = os.path.join(HERE, "corpus", "fuzz_sqdk_loader")
    os.makedirs(out, exist_ok=True)
    seeds = {}
    for spec in ("format_gpt2.json", "format_llama.json"):
        base = spec[len("format_"):-len(".json")]
        for dtype in (None, "f16", "bf16"):
            seeds[f"{base}_{dtype or 'mixed'}.sqdk"] = build(spec, dtype)
    g = seeds["gpt2_f16.sqdk"]
    seeds["gpt2_header_only.sqdk"] = g[:128]
    seeds["gpt2_cut_in_directory.sqdk"] = g[:160]
    seeds["gpt2_cut_in_data.sqdk"] = g[: len(g) - 7]
    flipped = bytearray(g)
    flipped[20] ^= 0x10  # d_model
    seeds["gpt2_flipped_d_model.sqdk"] = bytes(flipped)
    # First directory entry: name_len(2) name dtype(1) n_dims(1) shape(8 n) offset(8) size(8) crc(4).
    name_len = struct.unpack_from("<H", g, 128)[0]
    n_dims = g[128 + 2 + name_len + 1]
    off_pos = 128 + 2 + name_len + 2 + 8 * n_dims
    past = bytearray(g)
    struct.pack_into("<Q", past, off_pos, len(g) + 64)
    seeds["gpt2_offset_past_end.sqdk"] = bytes(past)
    dup = bytearray(g)
    # Rename the second tensor to the first one's name when the lengths allow it ("pos_emb" vs "tok_emb").
    second = off_pos + 20
    if struct.unpack_from("<H", g, second)[0] == name_len:
        dup[second + 2: second + 2 + name_len] = g[130: 130 + name_len]
    seeds["gpt2_duplicate_name.sqdk"] = bytes(dup)
    t = build("format_llama.json", "f16", "format_tokenizer.json")
    seeds["llama_f16_tokenizer.sqdk"] = t
    section = struct.unpack_from("<Q", t, 112)[0]
    cut = bytearray(t)
    struct.pack_into("<I", cut, section + 36, 0xFFFF)  # the regex length: past the end of the section
    seeds["llama_tokenizer_bad_length.sqdk"] = bytes(cut)
    seeds["empty.sqdk"] = b""
    seeds["magic_only.sqdk"] = b"SQDK"
    for name, blob in seeds.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(blob)

    out = os.path.join(HERE, "corpus", "fuzz_prompt")
    os.makedirs(out, exist_ok=True)
    prompts = {
        "ascii.txt": b"\x00" + b"\x28hello world",  # op 0 with n = 8: prefill 8 bytes
        "utf8_invalid.txt": b"\x03" + b"\x4b\xff\xfe\xc3\x28\xa0\xa1\xe2\x28\xa1\xf0\x28\x8c\xbc",
        "out_of_range_ids.txt": b"\x01" + b"\x01\x02\x01" + b"\x01\xff\xff" + b"\x02" + b"\x07" + b"\x0c",
        "too_long.txt": b"\x05" + b"\x73" + bytes(range(65, 88)) + b"\x73" + bytes(range(97, 120)),
        "fill_then_decode.txt": b"\x02" + b"\x46" + bytes(range(48, 63)) + b"\x03a\x03b\x03c\x04\x03d",
        "empty_prompt.txt": b"\x01\x00\x00\x00",
    }
    for name, blob in prompts.items():
        with open(os.path.join(out, name), "wb") as f:
            f.write(blob)


if __name__ == "__main__":
    main()
