#!/usr/bin/python3
"""Train sqrtdk's bundled default model: a tiny byte-level Llama on the King James Bible.

The model matches sqrtdk's `llama` family exactly (Hugging Face Llama math):
  RMSNorm  y = x * rsqrt(mean(x^2) + eps) * weight
  RoPE     rotate-half convention (Hugging Face layout), theta 10000, on q and k
  SwiGLU   down(silu(gate(x)) * up(x))
  no biases, tied embeddings (output head = tok_emb), grouped-query causal attention scaled by 1/sqrt(head_dim)
  (Config.attention_scale overrides it; the .sqdk file then records it).
Vocabulary 258: ids 0..255 are bytes, 256 = BOS, 257 = EOS. Every training/eval window is [BOS] + 255 bytes, so the
context is 256 positions (BOS at position 0).

Data: the King James Version text from Debian's `bible-kjv-text` (read with the `bible` program from `bible-kjv`:
`bible -f gen1:1-rev22:21`; public domain text, see models/README.md). Verse references are stripped, one verse per
line. The last 5 % of the bytes (the end of the New Testament) are held out for validation.

Usage (run by hand; see models/README.md):
  nice -n 19 nohup /usr/bin/python3 tools/train_tiny.py --out /work/train-out > /work/train-out/train.log 2>&1 &
  /usr/bin/python3 tools/train_tiny.py --export-only /work/train-out/final.pt   # re-run export + fixtures
  /usr/bin/python3 tools/train_tiny.py --bench                                  # steps/s for the config

Schedule: AdamW, linear warmup then cosine decay to 10 % of the peak rate. The schedule's progress is
max(step / max_steps, elapsed / time_budget), so the run ends on time even when the machine is shared (the
machine has 2 cores, other people compile on the other one); the step count reached is logged and recorded.
"""

import argparse
import json
import math
import os
import re
import subprocess
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

BOS = 256
EOS = 257
N_VOCAB = 258


# ----------------------------------------------------------------------------------------------------------------
# Model

class Config:
    def __init__(self, **kw):
        self.d_model = 256
        self.n_layers = 4
        self.n_heads = 8
        self.n_kv_heads = 4
        self.head_dim = 32
        self.d_ff = 384
        self.n_vocab = N_VOCAB
        self.max_seq = 256
        self.norm_eps = 1e-5
        self.rope_theta = 10000.0
        self.attention_scale = None  # None: 1/sqrt(head_dim); tools/scaling_training.py sets 1 or 1/head_dim
        for k, v in kw.items():
            if not hasattr(self, k):
                raise KeyError(k)
            setattr(self, k, v)

    def to_dict(self):
        return dict(self.__dict__)


class RMSNorm(nn.Module):
    def __init__(self, d, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_cos_sin(n_pos, head_dim, theta):
    # Hugging Face LlamaRotaryEmbedding: inv_freq[j] = theta^(-2j/head_dim), angles duplicated for the two halves.
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    t = torch.arange(n_pos, dtype=torch.float64)
    freqs = torch.outer(t, inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)
    return emb.cos().float(), emb.sin().float()  # [n_pos, head_dim]


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.attn_norm = RMSNorm(c.d_model, c.norm_eps)
        self.attn_q = nn.Linear(c.d_model, c.n_heads * c.head_dim, bias=False)
        self.attn_k = nn.Linear(c.d_model, c.n_kv_heads * c.head_dim, bias=False)
        self.attn_v = nn.Linear(c.d_model, c.n_kv_heads * c.head_dim, bias=False)
        self.attn_out = nn.Linear(c.n_heads * c.head_dim, c.d_model, bias=False)
        self.ffn_norm = RMSNorm(c.d_model, c.norm_eps)
        self.ffn_gate = nn.Linear(c.d_model, c.d_ff, bias=False)
        self.ffn_up = nn.Linear(c.d_model, c.d_ff, bias=False)
        self.ffn_down = nn.Linear(c.d_ff, c.d_model, bias=False)
        self.scale = 1.0 / math.sqrt(c.head_dim) if c.attention_scale is None else c.attention_scale
        self.keep_probs = False  # tools/scaling_training.py reads the attention probabilities [B, H, T, T]
        self.probs = None

    def forward(self, x, cos, sin, mask):
        c = self.c
        B, T, _ = x.shape
        h = self.attn_norm(x)
        q = self.attn_q(h).view(B, T, c.n_heads, c.head_dim).transpose(1, 2)      # [B, H, T, hd]
        k = self.attn_k(h).view(B, T, c.n_kv_heads, c.head_dim).transpose(1, 2)   # [B, KV, T, hd]
        v = self.attn_v(h).view(B, T, c.n_kv_heads, c.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = c.n_heads // c.n_kv_heads  # query head j uses kv head j // rep (Hugging Face repeat_kv)
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        scores = (q @ k.transpose(-2, -1)) * self.scale
        scores = scores.masked_fill(mask, float("-inf"))
        p = torch.softmax(scores, dim=-1)
        self.probs = p.detach() if self.keep_probs else None
        a = (p @ v).transpose(1, 2).reshape(B, T, c.n_heads * c.head_dim)
        x = x + self.attn_out(a)
        h = self.ffn_norm(x)
        return x + self.ffn_down(F.silu(self.ffn_gate(h)) * self.ffn_up(h))


class TinyLlama(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.tok_emb = nn.Embedding(c.n_vocab, c.d_model)
        self.blocks = nn.ModuleList([Block(c) for _ in range(c.n_layers)])
        self.out_norm = RMSNorm(c.d_model, c.norm_eps)
        cos, sin = rope_cos_sin(c.max_seq, c.head_dim, c.rope_theta)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.apply(self._init)
        for b in self.blocks:  # GPT-2 style: scale residual projections by depth
            nn.init.normal_(b.attn_out.weight, std=0.02 / math.sqrt(2 * c.n_layers))
            nn.init.normal_(b.ffn_down.weight, std=0.02 / math.sqrt(2 * c.n_layers))

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)

    def forward(self, ids):
        B, T = ids.shape
        assert T <= self.c.max_seq
        x = self.tok_emb(ids)
        cos, sin = self.cos[:T], self.sin[:T]
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        for b in self.blocks:
            x = b(x, cos, sin, mask)
        x = self.out_norm(x)
        return x @ self.tok_emb.weight.t()  # tied output head, logits [B, T, n_vocab]


def count_params(model):
    return sum(p.numel() for p in model.parameters())


# ----------------------------------------------------------------------------------------------------------------
# Data

def load_corpus(cache_dir):
    """The KJV text, one verse per line, references stripped. Cached as kjv.txt in cache_dir."""
    path = os.path.join(cache_dir, "kjv.txt")
    if os.path.exists(path):
        with open(path, "rb") as f:
            return f.read()
    if not os.path.exists("/usr/bin/bible"):
        sys.exit("needs Debian's bible-kjv and bible-kjv-text: apt-get install bible-kjv")
    raw = subprocess.run(["/usr/bin/bible", "-f", "gen1:1-rev22:21"], stdin=subprocess.DEVNULL,
                         capture_output=True, check=True).stdout.decode("ascii")
    lines = raw.splitlines()
    ref = re.compile(r"^[0-9]?[A-Za-z]+[0-9]+:[0-9]+ ")
    out = []
    for ln in lines:
        m = ref.match(ln)
        if not m:
            sys.exit("unexpected line from bible: %r" % ln[:80])
        out.append(ln[m.end():].strip())
    text = ("\n".join(out) + "\n").encode("ascii")
    os.makedirs(cache_dir, exist_ok=True)
    with open(path, "wb") as f:
        f.write(text)
    return text


def split_data(text, val_frac):
    data = np.frombuffer(text, dtype=np.uint8)
    n_val = int(len(data) * val_frac)
    # Cut at a line start so no verse straddles the split.
    cut = len(data) - n_val
    while data[cut - 1] != ord("\n"):
        cut += 1
    return data[:cut], data[cut:]


def line_starts(data):
    starts = np.flatnonzero(data[:-1] == ord("\n")) + 1
    return np.concatenate([[0], starts]).astype(np.int64)


def make_batch(data, starts, batch, seq, gen):
    """Windows [BOS] + seq-1 bytes starting at random verse starts; targets are the next seq bytes."""
    n = seq  # bytes needed as targets
    valid = starts[starts + n <= len(data)]
    pick = valid[torch.randint(len(valid), (batch,), generator=gen).numpy()]
    y = np.stack([data[s:s + n] for s in pick]).astype(np.int64)
    x = np.concatenate([np.full((batch, 1), BOS, dtype=np.int64), y[:, :-1]], axis=1)
    return torch.from_numpy(x), torch.from_numpy(y)


def eval_windows(data, seq):
    """Non-overlapping contiguous windows covering data: input [BOS] + bytes, every byte predicted exactly once."""
    xs, ys = [], []
    for s in range(0, len(data) - 1, seq):
        y = data[s:s + seq].astype(np.int64)
        x = np.concatenate([[BOS], y[:-1]])
        xs.append(x)
        ys.append(y)
    return xs, ys


@torch.no_grad()
def evaluate_bpb(model, data, seq, max_windows=None, batch=32):
    model.eval()
    xs, ys = eval_windows(data, seq)
    if max_windows is not None:
        idx = np.linspace(0, len(xs) - 1, min(max_windows, len(xs))).astype(int)
        xs = [xs[i] for i in idx]
        ys = [ys[i] for i in idx]
    total_nll, total_n = 0.0, 0
    # Full windows batched; the (shorter) last window alone.
    full = [i for i in range(len(xs)) if len(xs[i]) == seq]
    rest = [i for i in range(len(xs)) if len(xs[i]) != seq]
    for j in range(0, len(full), batch):
        ii = full[j:j + batch]
        x = torch.from_numpy(np.stack([xs[i] for i in ii]))
        y = torch.from_numpy(np.stack([ys[i] for i in ii]))
        logits = model(x)
        total_nll += F.cross_entropy(logits.reshape(-1, N_VOCAB), y.reshape(-1), reduction="sum").item()
        total_n += y.numel()
    for i in rest:
        x = torch.from_numpy(xs[i])[None]
        y = torch.from_numpy(ys[i])[None]
        logits = model(x)
        total_nll += F.cross_entropy(logits.reshape(-1, N_VOCAB), y.reshape(-1), reduction="sum").item()
        total_n += y.numel()
    model.train()
    return total_nll / total_n / math.log(2)


def unigram_bpb(train, val):
    """Cross-entropy (bits/byte) of val under byte frequencies of train (add-one smoothed over 256 bytes)."""
    counts = np.bincount(train, minlength=256).astype(np.float64) + 1.0
    p = counts / counts.sum()
    return float(-np.log2(p[val]).mean()), float(-(p * np.log2(p)).sum())


# ----------------------------------------------------------------------------------------------------------------
# Generation

@torch.no_grad()
def generate(model, prompt_ids, n_new, temperature=0.0, top_k=0, gen=None):
    """Greedy when temperature == 0. Slides the window if the context would exceed max_seq (keeps BOS off)."""
    model.eval()
    ids = list(prompt_ids)
    out = []
    for _ in range(n_new):
        ctx = ids[-model.c.max_seq:]
        logits = model(torch.tensor([ctx]))[0, -1]
        if temperature == 0.0:
            nxt = int(torch.argmax(logits))
        else:
            logits = logits / temperature
            if top_k > 0:
                v, _ = torch.topk(logits, top_k)
                logits[logits < v[-1]] = float("-inf")
            nxt = int(torch.multinomial(torch.softmax(logits, -1), 1, generator=gen))
        ids.append(nxt)
        out.append(nxt)
        if nxt == EOS:
            break
    model.train()
    return out


def decode(ids):
    return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")


def encode_prompt(text):
    return [BOS] + list(text.encode("utf-8"))


# ----------------------------------------------------------------------------------------------------------------
# Export

def sqdk_tensors(model):
    """The state dict under .sqdk llama names (engine/FORMAT.md), float32 numpy arrays, directory order."""
    sd = {k: v.detach().float().cpu().numpy() for k, v in model.state_dict().items()}
    out = [("tok_emb", sd["tok_emb.weight"])]
    for i in range(model.c.n_layers):
        p = "blocks.%d." % i
        for name in ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_out", "ffn_norm", "ffn_gate", "ffn_up",
                     "ffn_down"]:
            out.append(("blk.%d.%s.weight" % (i, name), sd[p + name + ".weight"]))
    out.append(("out_norm.weight", sd["out_norm.weight"]))
    return [(n, np.ascontiguousarray(a, dtype=np.float32)) for n, a in out]


def export(model, out_dir, sqdk_path, fixture_dir, prompt="The ", n_gen=32):
    c = model.c
    tensors = sqdk_tensors(model)
    # Always keep a plain copy of the named tensors (re-exportable without torch).
    np.savez(os.path.join(out_dir, "tiny-llama-bytes-tensors.npz"), **dict(tensors))
    sys.path.insert(0, HERE)
    try:
        import sqdk  # tools/sqdk.py, the reference writer (engine/FORMAT.md)
    except ImportError:
        sqdk = None
    if sqdk is None:
        print("export: tools/sqdk.py not found; tensors saved to %s, .sqdk export pending" % out_dir)
    else:
        os.makedirs(os.path.dirname(sqdk_path), exist_ok=True)
        write_sqdk(sqdk, c, tensors, sqdk_path)
        size = os.path.getsize(sqdk_path)
        print("export: wrote %s (%d bytes, %.2f MiB)" % (sqdk_path, size, size / 2**20))
        if size > 8 * 2**20:
            print("export: WARNING: larger than 8 MiB")

    # Golden fixture: logits at every position of the prompt, and greedy generation.
    os.makedirs(fixture_dir, exist_ok=True)
    ids = encode_prompt(prompt)
    model.eval()
    with torch.no_grad():
        logits = model(torch.tensor([ids]))[0].numpy().astype(np.float32)  # [len(ids), n_vocab]
    np.save(os.path.join(fixture_dir, "logits.npy"), logits)
    greedy = generate(model, ids, n_gen)
    # Logits at each generated step's last position, to localise a mismatch if tokens diverge.
    with torch.no_grad():
        full = model(torch.tensor([ids + greedy[:-1]]))[0].numpy().astype(np.float32)
    gen_logits = full[len(ids) - 1:]
    np.save(os.path.join(fixture_dir, "greedy_logits.npy"), gen_logits)
    top2 = np.sort(gen_logits, axis=1)[:, -2:]
    fixture = {
        "model": "models/tiny-llama-bytes.sqdk",
        "prompt": prompt,
        "prompt_ids": ids,
        "bos_prepended": True,
        "logits_file": "logits.npy",
        "logits_shape": list(logits.shape),
        "greedy_n_new": n_gen,
        "greedy_ids": greedy,
        "greedy_text": decode(greedy),
        "greedy_logits_file": "greedy_logits.npy",
        "greedy_min_top1_top2_margin": float((top2[:, 1] - top2[:, 0]).min()),
        "reference": "PyTorch %s float32, tools/train_tiny.py" % torch.__version__,
    }
    with open(os.path.join(fixture_dir, "greedy.json"), "w") as f:
        json.dump(fixture, f, indent=1)
        f.write("\n")
    print("fixture: %s  prompt=%r greedy=%r (min top1-top2 logit margin %.4f)"
          % (fixture_dir, prompt, decode(greedy), fixture["greedy_min_top1_top2_margin"]))
    model.train()


def write_sqdk(sqdk, c, tensors, path):
    """Writes the model with the reference writer tools/sqdk.py (engine/FORMAT.md), all tensors f32."""
    cfg = dict(arch="llama", d_model=c.d_model, n_layers=c.n_layers, n_heads=c.n_heads, n_kv_heads=c.n_kv_heads,
               head_dim=c.head_dim, d_ff=c.d_ff, n_vocab=c.n_vocab, max_seq=c.max_seq, norm_eps=c.norm_eps,
               rope_theta=c.rope_theta, tied_embeddings=True, rope_interleaved=False, tokenizer="byte_level",
               bos_id=BOS, eos_id=EOS)
    if c.attention_scale is not None:
        cfg["attention_scale"] = c.attention_scale
    sqdk.write_sqdk(path, cfg, [(name, a, "f32") for name, a in tensors])
    # Read back: same config and bit-identical tensors.
    cfg2, back = sqdk.read_sqdk(path)
    assert [n for n, _ in back] == [n for n, _ in tensors]
    for (n, a), (_, b) in zip(tensors, back):
        assert a.shape == b.shape and np.array_equal(a, b), n


# ----------------------------------------------------------------------------------------------------------------
# Training

def lr_at(progress, step, args):
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    p = min(1.0, progress)
    return args.lr * (args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * p)))


def make_optimizer(model, args):
    decay, no_decay = [], []
    for n, p in model.named_parameters():
        (decay if p.dim() == 2 and not n.startswith("tok_emb") else no_decay).append(p)
    return torch.optim.AdamW([{"params": decay, "weight_decay": args.weight_decay},
                              {"params": no_decay, "weight_decay": 0.0}], lr=args.lr, betas=(0.9, 0.95), eps=1e-8)


def save_ckpt(path, model, opt, state):
    tmp = path + ".tmp"
    torch.save({"model": model.state_dict(), "opt": opt.state_dict() if opt else None,
                "config": model.c.to_dict(), "state": state}, tmp)
    os.replace(tmp, path)


def load_model(path):
    ck = torch.load(path, map_location="cpu")
    model = TinyLlama(Config(**ck["config"]))
    model.load_state_dict(ck["model"])
    return model, ck


def train(args):
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    os.makedirs(args.out, exist_ok=True)
    text = load_corpus(args.out)
    train_data, val_data = split_data(text, args.val_frac)
    starts = line_starts(train_data)
    uni_val, uni_entropy = unigram_bpb(train_data, val_data)
    print("data: %d bytes, train %d, val %d, %d train verse starts" % (len(text), len(train_data), len(val_data),
                                                                       len(starts)))
    print("unigram baseline: val %.4f bits/byte (train byte entropy %.4f)" % (uni_val, uni_entropy))

    model = TinyLlama(Config())
    print("config:", json.dumps(model.c.to_dict()))
    n_params = count_params(model)
    print("params: %d (%.2f MiB as f32)" % (n_params, n_params * 4 / 2**20))
    opt = make_optimizer(model, args)
    gen = torch.Generator().manual_seed(args.seed)
    step, elapsed_before, tokens_seen = 0, 0.0, 0
    ckpt_path = os.path.join(args.out, "ckpt.pt")
    if args.resume and os.path.exists(ckpt_path):
        ck = torch.load(ckpt_path, map_location="cpu")
        model.load_state_dict(ck["model"])
        opt.load_state_dict(ck["opt"])
        step = ck["state"]["step"]
        elapsed_before = ck["state"]["elapsed"]
        # Checkpoints before this field existed: assume the current batch size throughout.
        tokens_seen = ck["state"].get("tokens", step * args.batch * args.seq)
        gen.set_state(ck["state"]["gen"])
        print("resumed at step %d, %.1f min elapsed" % (step, elapsed_before / 60))

    budget = args.time_budget_min * 60.0
    t0 = time.time()
    last_ckpt, last_log = t0, t0
    tokens_per_step = args.batch * args.seq
    history = []
    loss_acc, n_acc = 0.0, 0
    while True:
        elapsed = elapsed_before + time.time() - t0
        progress = max(step / args.max_steps, elapsed / budget)
        if progress >= 1.0:
            break
        lr = lr_at(progress, step, args)
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = make_batch(train_data, starts, args.batch, args.seq, gen)
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, N_VOCAB), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        step += 1
        tokens_seen += tokens_per_step
        loss_acc += loss.item()
        n_acc += 1
        now = time.time()
        if now - last_log >= args.log_every_s:
            el = elapsed_before + now - t0
            tr_bpb = loss_acc / n_acc / math.log(2)
            msg = "step %d  %.1f min  lr %.2e  train %.4f bpb  %.0f tok/s" % (
                step, el / 60, lr, tr_bpb, n_acc * tokens_per_step / (now - last_log))
            if step % args.eval_every == 0 or now - last_ckpt >= args.ckpt_every_s:
                vb = evaluate_bpb(model, val_data, args.seq, max_windows=64)
                msg += "  val(64 windows) %.4f bpb" % vb
                history.append({"step": step, "minutes": round(el / 60, 2), "train_bpb": round(tr_bpb, 4),
                                "val_bpb_64w": round(vb, 4)})
            print(msg, flush=True)
            last_log = now
            loss_acc, n_acc = 0.0, 0
        if now - last_ckpt >= args.ckpt_every_s:
            save_ckpt(ckpt_path, model, opt, {"step": step, "elapsed": elapsed_before + now - t0,
                                               "tokens": tokens_seen, "gen": gen.get_state()})
            last_ckpt = now
            print("checkpoint: step %d" % step, flush=True)

    train_minutes = (elapsed_before + time.time() - t0) / 60
    save_ckpt(ckpt_path, model, opt, {"step": step, "elapsed": train_minutes * 60, "tokens": tokens_seen,
                                       "gen": gen.get_state()})
    print("training done: %d steps, %.1f min, %d tokens" % (step, train_minutes, tokens_seen))
    t_eval = time.time()
    val_bpb = evaluate_bpb(model, val_data, args.seq)
    print("final val: %.4f bits/byte over %d bytes (%.1f s); unigram %.4f" % (
        val_bpb, len(val_data), time.time() - t_eval, uni_val))
    summary = {"params": n_params, "steps": step, "train_minutes": round(train_minutes, 1),
               "tokens_seen": tokens_seen, "val_bytes": int(len(val_data)),
               "train_bytes": int(len(train_data)), "val_bpb": round(val_bpb, 4),
               "unigram_val_bpb": round(uni_val, 4), "args": vars(args), "history": history}
    final = os.path.join(args.out, "final.pt")
    torch.save({"model": model.state_dict(), "opt": None, "config": model.c.to_dict(), "state": summary}, final)
    with open(os.path.join(args.out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=1)
    samples(model)
    do_export(model, args)


def samples(model):
    g = torch.Generator().manual_seed(1234)
    # No KV cache here (every byte re-runs the whole window), so samples are kept short.
    for prompt in ["The ", "And God said"]:
        ids = encode_prompt(prompt)
        greedy = generate(model, ids, 120)
        print("greedy  %r -> %r" % (prompt, prompt + decode(greedy)), flush=True)
        s = generate(model, ids, 200, temperature=0.8, top_k=40, gen=g)
        print("sampled %r -> %r" % (prompt, prompt + decode(s)), flush=True)


def do_export(model, args):
    export(model, args.out, os.path.join(REPO, "models", "tiny-llama-bytes.sqdk"),
           os.path.join(REPO, "tests", "data", "tiny"))


def bench(args):
    torch.manual_seed(0)
    model = TinyLlama(Config())
    opt = make_optimizer(model, args)
    print("params", count_params(model))
    x = torch.randint(0, 256, (args.batch, args.seq))
    for i in range(6):
        t = time.time()
        loss = F.cross_entropy(model(x).reshape(-1, N_VOCAB), x.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        dt = time.time() - t
        print("step %.3f s, %.0f tok/s" % (dt, args.batch * args.seq / dt))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="/work/train-out", help="checkpoints, logs, cached corpus (outside the repo)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--max-steps", type=int, default=100000)
    ap.add_argument("--time-budget-min", type=float, default=70.0)
    ap.add_argument("--val-frac", type=float, default=0.05)
    ap.add_argument("--log-every-s", type=float, default=30.0)
    ap.add_argument("--eval-every", type=int, default=10**9)
    ap.add_argument("--ckpt-every-s", type=float, default=240.0)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--export-only", metavar="CHECKPOINT")
    ap.add_argument("--bench", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.bench:
        return bench(args)
    if args.export_only:
        model, ck = load_model(args.export_only)
        print("loaded %s: %d params, state %s" % (args.export_only, count_params(model),
                                                 {k: v for k, v in ck["state"].items() if k != "gen"}
                                                 if isinstance(ck.get("state"), dict) else None))
        samples(model)
        return do_export(model, args)
    train(args)


if __name__ == "__main__":
    main()
