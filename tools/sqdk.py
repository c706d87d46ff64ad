#!/usr/bin/python3
"""The .sqdk weight file in Python: the reference writer (and a small reader). Spec: engine/FORMAT.md.

Standard library + numpy only; byte-identical to the C++ writer (sqrtdk::write_weight_file) for the same content.

As a module:
    from sqdk import write_sqdk, read_sqdk, write_from_state_dict
    write_sqdk("model.sqdk", config, [("tok_emb", array), ...])   # tensors in file order
    config, tensors = read_sqdk("model.sqdk")                      # tensors: list of (name, array)
config is a dict: arch ("gpt2" | "llama"), d_model, n_layers, n_heads, n_kv_heads, head_dim, d_ff, n_vocab,
max_seq, norm_eps, rope_theta, tied_embeddings, rope_interleaved, tokenizer ("none" | "byte_level" | "bpe"), bos_id,
eos_id (None = no token), attention_scale (absent or None = the default 1/sqrt(head_dim); else finite and > 0,
stored with flag bit 2 at header offset 108). Each tensor is (name, array) or (name, array, dtype) with dtype "f32" |
"f16" | "bf16" | "q8"; without a dtype, float16 arrays are stored as f16 and other floats as f32. For bf16, pass float
arrays (rounded to nearest even, as the C++ f32_to_bf16) or uint16 arrays holding the raw bf16 bits. For q8 (GGUF's
block_q8_0: per 32 elements along the last dimension, an f16 scale then 32 int8), pass float arrays (quantized as
ops::quantize_row_q8, see quantize_q8); read_sqdk dequantizes q8 to float32. write_sqdk(..., tokenizer=dict)
adds the tokenizer section (format version 2; see tokenizer_section).

As a command:
    sqdk.py info FILE                 print the config and tensor table (checks every CRC)
    sqdk.py from-spec SPEC.json OUT [SPEC.json OUT ...]
                                      write the synthetic test model each spec describes (tests/data/format_*.json)
    sqdk.py from-spec-with-tokenizer SPEC.json TOKENIZER.json OUT
                                      the same with a tokenizer section (TOKENIZER.json: TokenizerSpec's fields)
"""
import json
import math
import os
import struct
import sys
import tempfile
import zlib

import numpy as np

MAGIC = b"SQDK"
VERSION = 1
VERSION_TOKENIZER = 2  # files with a tokenizer section (FORMAT.md "Tokenizer section")
TOKENIZER_OFFSET = 112  # version 2: u64 offset, u32 size, u32 CRC-32 of the section
HEADER_SIZE = 128
HEADER_CRC_OFFSET = 104
ATTENTION_SCALE_OFFSET = 108
FLAG_ATTENTION_SCALE = 4  # flags bit 2: the f32 at ATTENTION_SCALE_OFFSET is the attention scale
ALIGN = 64
NO_TOKEN = 0xFFFFFFFF
ARCHS = {"gpt2": 0, "llama": 1}
TOKENIZERS = {"none": 0, "byte_level": 1, "bpe": 2}
TOKENIZER_STYLES = {"byte_level_bpe": 1, "sentencepiece_bpe": 2}
CHAT_TEMPLATES = {"none": 0, "chatml": 1, "llama2": 2, "llama3": 3, "zephyr": 4}
DTYPES = {"f32": 0, "f16": 1, "bf16": 2, "q8": 3}
DTYPE_SIZE = {"f32": 4, "f16": 2, "bf16": 2}  # q8: 34 bytes per 32 elements (Q8_BLOCK_BYTES)
Q8_BLOCK, Q8_BLOCK_BYTES = 32, 34

# Header fields after magic/version/file_size, in order: (offset, struct code, config key).
_CONFIG_FIELDS = [(20, "I", "d_model"), (24, "I", "n_layers"), (28, "I", "n_heads"), (32, "I", "n_kv_heads"),
                  (36, "I", "head_dim"), (40, "I", "d_ff"), (44, "I", "n_vocab"), (48, "I", "max_seq"),
                  (52, "f", "norm_eps"), (56, "f", "rope_theta")]


def _header_crc(header, directory, flags):
    """CRC-32 of header bytes 0..103, then the directory, then: version 1, the attention scale's 4 bytes (flag bit 2
    only); version 2, header bytes 108..127."""
    crc = zlib.crc32(bytes(directory), zlib.crc32(bytes(header[:HEADER_CRC_OFFSET])))
    if struct.unpack_from("<I", header, 4)[0] >= VERSION_TOKENIZER:
        crc = zlib.crc32(bytes(header[ATTENTION_SCALE_OFFSET:HEADER_SIZE]), crc)
    elif flags & FLAG_ATTENTION_SCALE:
        crc = zlib.crc32(bytes(header[ATTENTION_SCALE_OFFSET:ATTENTION_SCALE_OFFSET + 4]), crc)
    return crc


def _align(n):
    return (n + ALIGN - 1) // ALIGN * ALIGN


def f32_to_bf16_bits(a):
    """float32 array -> uint16 bf16 bits, round to nearest even, NaN kept quiet (same as sqrtdk::f32_to_bf16)."""
    x = np.ascontiguousarray(a, dtype="<f4").view("<u4").astype(np.uint64)
    rounded = ((x + 0x7FFF + ((x >> 16) & 1)) >> 16).astype(np.uint16)
    nan = (x & 0x7FFFFFFF) > 0x7F800000
    return np.where(nan, ((x >> 16) | 0x40).astype(np.uint16), rounded)


def quantize_q8(a):
    """float array (last dimension a multiple of 32) -> the raw q8 blocks as uint8 bytes, as ops::quantize_row_q8:
    per block d = f16(max|x| / 127) (the division in float32), q = round-half-even(x / d) with the f16-rounded d
    (float32 division), clamped to [-127, 127]; an all-zero block has d = 0 and q = 0."""
    x = np.ascontiguousarray(a, dtype=np.float32)
    if x.ndim == 0 or x.shape[-1] % Q8_BLOCK != 0:
        raise ValueError(f"q8: shape {list(x.shape)}: the last dimension must be a multiple of {Q8_BLOCK}")
    if not np.all(np.isfinite(x)):
        raise ValueError("q8: NaN or Inf in the values")
    blocks = x.reshape(-1, Q8_BLOCK)
    amax = np.max(np.abs(blocks), axis=1)
    d16 = (amax / np.float32(127)).astype(np.float32).astype("<f2")
    d = d16.astype(np.float32)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        q = np.where(d > 0, np.rint(blocks / np.where(d > 0, d, np.float32(1))), np.float32(0))
    q = np.clip(q, -127, 127).astype(np.int8)
    out = np.empty((blocks.shape[0], Q8_BLOCK_BYTES), dtype=np.uint8)
    out[:, :2] = d16.view(np.uint8).reshape(-1, 2)
    out[:, 2:] = q.view(np.uint8)
    return out.reshape(-1)


def dequantize_q8(data, shape):
    """The raw q8 blocks of a tensor of `shape` -> float32 (scale * q per block)."""
    raw = np.frombuffer(data, np.uint8).reshape(-1, Q8_BLOCK_BYTES)
    d = raw[:, :2].copy().view("<f2").astype(np.float32)
    q = raw[:, 2:].copy().view(np.int8).astype(np.float32)
    return (d * q).reshape(shape)


def _tensor_bytes(array, dtype):
    a = np.asarray(array)
    if dtype is None:
        dtype = "f16" if a.dtype == np.float16 else "f32"
    if dtype not in DTYPES:
        raise ValueError(f"unknown dtype {dtype!r} (expected f32, f16, bf16 or q8)")
    if dtype == "q8":
        return dtype, quantize_q8(a).tobytes()
    if dtype == "f32":
        data = np.ascontiguousarray(a, dtype="<f4")
    elif dtype == "f16":
        data = np.ascontiguousarray(a, dtype="<f2")
    elif a.dtype == np.uint16:
        data = np.ascontiguousarray(a, dtype="<u2")
    else:
        data = f32_to_bf16_bits(a)
    return dtype, data.tobytes()


def tokenizer_section(t):
    """The tokenizer section's bytes (FORMAT.md) from a dict with TokenizerSpec's field names (tokenizer.h); the C++
    loader checks the content (unique pieces, merges in the vocabulary, ...)."""
    def u32(*values):
        return struct.pack(f"<{len(values)}I", *values)

    def text(s):
        raw = s.encode("utf-8")
        return u32(len(raw)) + raw

    token = lambda v: NO_TOKEN if v is None else int(v)
    flags = sum(bit for bit, key in ((1, "nfc"), (2, "add_prefix_space"), (4, "ignore_merges"), (8, "byte_fallback"),
                                     (16, "add_bos"), (32, "add_eos")) if t.get(key))
    out = bytearray(b"SQTK") + u32(1, TOKENIZER_STYLES[t["style"]], flags)
    out += u32(*(token(t.get(k)) for k in ("unk_id", "bos_id", "eos_id", "pad_id")))
    out += u32(CHAT_TEMPLATES[t.get("chat_template", "none")]) + text(t.get("split_regex", ""))
    out += u32(len(t["vocab"])) + b"".join(text(p) for p in t["vocab"])
    out += u32(len(t.get("merges", []))) + b"".join(u32(a, b) for a, b in t.get("merges", []))
    added = t.get("added", [])
    out += u32(len(added))
    for a in added:
        bits = sum(bit for bit, key in ((1, "special"), (2, "lstrip"), (4, "rstrip"), (8, "normalized"),
                                        (16, "single_word")) if a.get(key, key == "special"))
        out += u32(a["id"]) + struct.pack("<B", bits) + text(a["content"])
    eot = t.get("end_of_turn_ids", [])
    out += u32(len(eot)) + (u32(*eot) if eot else b"") + text(t.get("chat_template_jinja", ""))
    return bytes(out)


def write_sqdk(path, config, tensors, tokenizer=None):
    """Writes a .sqdk file: a temporary file beside `path`, fsync, rename (never a partial file under `path`).

    tokenizer: a dict as tokenizer_section takes; the file is then version 2 with the section after the tensors
    (config "tokenizer" must be "bpe" and its bos_id/eos_id the tokenizer's)."""
    c = dict(config)
    section = tokenizer_section(tokenizer) if tokenizer is not None else None
    if (section is None) != (c.get("tokenizer", "none") != "bpe"):
        raise ValueError(f"{path}: config tokenizer 'bpe' goes with a tokenizer section, and only with one")
    entries, blobs, names = [], [], set()
    for item in tensors:
        name, array = item[0], item[1]
        dtype, data = _tensor_bytes(array, item[2] if len(item) > 2 else None)
        shape = tuple(int(d) for d in np.shape(array))
        raw = name.encode("utf-8")
        if not 1 <= len(raw) <= 255 or name in names:
            raise ValueError(f"tensor name {name!r}: empty, longer than 255 bytes or duplicate")
        if not 1 <= len(shape) <= 4 or min(shape) < 1:
            raise ValueError(f"tensor {name!r}: shape {shape} (expected 1..4 dimensions, each >= 1)")
        names.add(name)
        entries.append((raw, dtype, shape, len(data), zlib.crc32(data)))
        blobs.append(data)

    # Directory with offsets: entry = name_len, name, dtype, n_dims, shape, offset, size, crc32.
    dir_size = sum(2 + len(raw) + 2 + 8 * len(shape) + 8 + 8 + 4 for raw, _, shape, _, _ in entries)
    data_offset = _align(HEADER_SIZE + dir_size)
    directory, end = bytearray(), data_offset
    for raw, dtype, shape, size, crc in entries:
        offset = _align(end)
        directory += struct.pack("<H", len(raw)) + raw + struct.pack("<BB", DTYPES[dtype], len(shape))
        directory += struct.pack(f"<{len(shape)}Q", *shape) + struct.pack("<QQI", offset, size, crc)
        end = offset + size

    tensors_end = end
    if section is not None:
        end = _align(tensors_end) + len(section)
    header = bytearray(HEADER_SIZE)
    header[0:4] = MAGIC
    struct.pack_into("<IQI", header, 4, VERSION if section is None else VERSION_TOKENIZER, end, ARCHS[c["arch"]])
    if section is not None:
        struct.pack_into("<QII", header, TOKENIZER_OFFSET, _align(tensors_end), len(section), zlib.crc32(section))
    for at, code, key in _CONFIG_FIELDS:
        default = {"norm_eps": 1e-5, "rope_theta": 10000.0 if c["arch"] == "llama" else 0.0}.get(key)
        struct.pack_into("<" + code, header, at, c.get(key, default))
    flags = (1 if c.get("tied_embeddings") else 0) | (2 if c.get("rope_interleaved") else 0)
    scale = c.get("attention_scale")
    if scale is not None:
        scale = float(scale)
        try:  # the value must survive the f32 round trip as finite and > 0 (1e-50 would store as 0)
            stored = struct.unpack("<f", struct.pack("<f", scale))[0]
        except OverflowError:
            stored = math.inf
        if not (math.isfinite(stored) and stored > 0):
            raise ValueError(f"{path}: config: attention_scale {scale!r} (expected finite and > 0 as f32, "
                             "or None for the default 1/sqrt(head_dim))")
        flags |= FLAG_ATTENTION_SCALE
        struct.pack_into("<f", header, ATTENTION_SCALE_OFFSET, scale)
    token = lambda v: NO_TOKEN if v is None else int(v)
    struct.pack_into("<IIIII", header, 60, flags, TOKENIZERS[c.get("tokenizer", "none")],
                     token(c.get("bos_id")), token(c.get("eos_id")), len(entries))
    struct.pack_into("<QQQ", header, 80, HEADER_SIZE, len(directory), data_offset)
    struct.pack_into("<I", header, HEADER_CRC_OFFSET, _header_crc(header, directory, flags))

    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=os.path.basename(path) + ".tmp-", dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(header)
            f.write(directory)
            pos = HEADER_SIZE + len(directory)
            for (_, _, _, size, _), data in zip(entries, blobs):
                f.write(b"\0" * (_align(pos) - pos))
                f.write(data)
                pos = _align(pos) + size
            if section is not None:
                f.write(b"\0" * (_align(pos) - pos))
                f.write(section)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    dfd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def read_sqdk(path, verify=True):
    """Reads a .sqdk file -> (config dict, list of (name, array)); bf16 tensors come back as float32.

    Checks the structure and (if verify) every CRC-32; the C++ loader is the strict one (FORMAT.md's full list)."""
    with open(path, "rb") as f:
        buf = f.read()
    if len(buf) < HEADER_SIZE or buf[:4] != MAGIC:
        raise ValueError(f"{path}: not a .sqdk file")
    version, file_size, arch = struct.unpack_from("<IQI", buf, 4)
    if version not in (VERSION, VERSION_TOKENIZER) or file_size != len(buf):
        raise ValueError(f"{path}: version {version} or file_size {file_size} != {len(buf)}")
    c = {"arch": {v: k for k, v in ARCHS.items()}[arch]}
    for at, code, key in _CONFIG_FIELDS:
        c[key] = struct.unpack_from("<" + code, buf, at)[0]
    flags, tok, bos, eos, n_tensors = struct.unpack_from("<IIIII", buf, 60)
    c.update(tied_embeddings=bool(flags & 1), rope_interleaved=bool(flags & 2),
             tokenizer={v: k for k, v in TOKENIZERS.items()}[tok], bos_id=None if bos == NO_TOKEN else bos,
             eos_id=None if eos == NO_TOKEN else eos)
    if flags & FLAG_ATTENTION_SCALE:
        c["attention_scale"] = struct.unpack_from("<f", buf, ATTENTION_SCALE_OFFSET)[0]
    _, dir_size, _ = struct.unpack_from("<QQQ", buf, 80)
    if verify and _header_crc(buf, buf[HEADER_SIZE:HEADER_SIZE + dir_size], flags) != \
            struct.unpack_from("<I", buf, HEADER_CRC_OFFSET)[0]:
        raise ValueError(f"{path}: header checksum mismatch")
    at, tensors = HEADER_SIZE, []
    names = {v: k for k, v in DTYPES.items()}
    for _ in range(n_tensors):
        (name_len,) = struct.unpack_from("<H", buf, at)
        name = buf[at + 2:at + 2 + name_len].decode("utf-8")
        at += 2 + name_len
        dtype, n_dims = struct.unpack_from("<BB", buf, at)
        shape = struct.unpack_from(f"<{n_dims}Q", buf, at + 2)
        offset, size, crc = struct.unpack_from("<QQI", buf, at + 2 + 8 * n_dims)
        at += 2 + 8 * n_dims + 20
        data = buf[offset:offset + size]
        if verify and zlib.crc32(data) != crc:
            raise ValueError(f"{path}: tensor {name!r}: checksum mismatch")
        kind = names[dtype]
        if kind == "q8":
            array = dequantize_q8(data, shape)
        elif kind == "bf16":
            array = (np.frombuffer(data, "<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            array = np.frombuffer(data, "<f4" if kind == "f32" else "<f2")
        tensors.append((name, array.reshape(shape)))
    return c, tensors


def write_from_state_dict(path, config, state_dict, name_map=None, dtype=None):
    """Writes PyTorch tensors (any mapping name -> torch.Tensor) without importing torch here.

    name_map: dict or callable from the state_dict key to the .sqdk name (None or a missing key = skip the tensor);
    without it the keys are used as they are. Tensors are written in the order of the state_dict. dtype: "f32",
    "f16" or "bf16" for every tensor; None keeps f16 and bf16 tensors as they are and stores the rest as f32.
    bf16 tensors are passed bit for bit (no rounding through float32)."""
    tensors = []
    for key, value in state_dict.items():
        if name_map is None:
            name = key
        elif callable(name_map):
            name = name_map(key)
        else:
            name = name_map.get(key)
        if name is None:
            continue
        t = value.detach().cpu().contiguous()
        kind = str(t.dtype)
        if kind == "torch.bfloat16" and dtype in (None, "bf16"):
            import torch  # only reached with torch tensors, so torch is importable
            tensors.append((name, t.view(torch.int16).numpy().view(np.uint16), "bf16"))
        elif kind == "torch.float16" and dtype in (None, "f16"):
            tensors.append((name, t.numpy(), "f16"))
        else:
            tensors.append((name, t.float().numpy(), dtype or "f32"))
    write_sqdk(path, config, tensors)


def spec_values(index, n):
    """The synthetic values of tensor `index` in a test spec: exact in f32, f16 and bf16."""
    i = np.arange(n, dtype=np.int64)
    return (((i * 7 + index * 3) % 17) - 8).astype(np.float32) / 16.0


def write_from_spec(spec_path, out_path, tokenizer_path=None):
    with open(spec_path) as f:
        spec = json.load(f)
    tensors = []
    for index, t in enumerate(spec["tensors"]):
        n = int(np.prod(t["shape"]))
        tensors.append((t["name"], spec_values(index, n).reshape(t["shape"]), t["dtype"]))
    config, tokenizer = spec["config"], None
    if tokenizer_path:
        with open(tokenizer_path, encoding="utf-8") as f:
            tokenizer = json.load(f)
        config = dict(config, tokenizer="bpe", bos_id=tokenizer.get("bos_id"), eos_id=tokenizer.get("eos_id"))
    write_sqdk(out_path, config, tensors, tokenizer)


def _info(path):
    config, tensors = read_sqdk(path)
    print(json.dumps(config, indent=2))
    for name, array in tensors:
        print(f"{name:32s} {str(array.dtype):8s} {list(array.shape)}")


def main(argv):
    if len(argv) >= 3 and len(argv) % 2 == 1 and argv[0] == "from-spec":
        for spec, out in zip(argv[1::2], argv[2::2]):
            write_from_spec(spec, out)
    elif len(argv) == 4 and argv[0] == "from-spec-with-tokenizer":
        write_from_spec(argv[1], argv[3], argv[2])
    elif len(argv) == 2 and argv[0] == "info":
        _info(argv[1])
    elif argv in (["-h"], ["--help"]):
        print(__doc__.split("As a command:")[1].rstrip())
    else:
        print(__doc__.split("As a command:")[1].rstrip(), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
