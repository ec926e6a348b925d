"""Train a small EAGLE-3 head on a main model's own hidden states (torch, CPU, minutes).

The head follows optimum-intel's LlamaEagle3Model (model_patcher.py), tensor for tensor and
under the names of an AngelSlim checkpoint, which is what optimum-intel's export reads:
`fc` folds three main-model hidden states (3H) into one (H); `midlayer` is one Llama decoder
layer whose attention reads [input_layernorm(embedding) ; hidden_norm(hidden)] (2H wide);
`norm` and `lm_head` give logits over a reduced draft vocabulary, and `d2t` maps a draft
token d to the main model's token d + d2t[d]. `t2d` marks the main's tokens that the draft
vocabulary holds.

How OpenVINO GenAI drafts with it (speculative_decoding/continuous_batching/eagle3_strategy.cpp):
the draft sees the prompt shifted by one token (position i holds token x[i+1] beside the
main's hidden states at position i) and predicts x[i+2]; each further guess in a step feeds
the head its own midlayer output in place of the main's states. Training mirrors that
("training-time test", as in EAGLE-3): step s at position i reads step s-1's output at
position i-1 and attends to the first step's keys up to i-s+1 plus its own chain.

Labels are the main model's own greedy choices (self-distillation), so what is learned is
what greedy verification accepts.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn
from torch.nn import functional as F


@dataclass(frozen=True)
class HeadShape:
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    draft_vocab: int
    rope_theta: float
    eps: float


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(size))
        self.eps = eps

    def forward(self, x):
        x32 = x.float()
        return self.weight * (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype)


def _rotate_half(x):
    a, b = x.chunk(2, dim=-1)
    return torch.cat((-b, a), dim=-1)


class Attention(nn.Module):
    def __init__(self, s: HeadShape):
        super().__init__()
        self.s = s
        self.q_proj = nn.Linear(2 * s.hidden, s.heads * s.head_dim, bias=False)
        self.k_proj = nn.Linear(2 * s.hidden, s.kv_heads * s.head_dim, bias=False)
        self.v_proj = nn.Linear(2 * s.hidden, s.kv_heads * s.head_dim, bias=False)
        self.o_proj = nn.Linear(s.heads * s.head_dim, s.hidden, bias=False)

    def qkv(self, x, cos, sin):
        b, n, _ = x.shape
        s = self.s
        q = self.q_proj(x).view(b, n, s.heads, s.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, n, s.kv_heads, s.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, n, s.kv_heads, s.head_dim).transpose(1, 2)
        q, k = q * cos + _rotate_half(q) * sin, k * cos + _rotate_half(k) * sin
        rep = s.heads // s.kv_heads
        return q, k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)


class MLP(nn.Module):
    def __init__(self, s: HeadShape):
        super().__init__()
        self.gate_proj = nn.Linear(s.hidden, s.intermediate, bias=False)
        self.up_proj = nn.Linear(s.hidden, s.intermediate, bias=False)
        self.down_proj = nn.Linear(s.intermediate, s.hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class MidLayer(nn.Module):
    def __init__(self, s: HeadShape):
        super().__init__()
        self.self_attn = Attention(s)
        self.mlp = MLP(s)
        self.hidden_norm = RMSNorm(s.hidden, s.eps)
        self.input_layernorm = RMSNorm(s.hidden, s.eps)
        self.post_attention_layernorm = RMSNorm(s.hidden, s.eps)


class Eagle3Head(nn.Module):
    """The head's tensors under AngelSlim's names (state_dict() is the checkpoint)."""

    def __init__(self, s: HeadShape):
        super().__init__()
        self.s = s
        self.embed_tokens = nn.Embedding(s.vocab, s.hidden)
        self.fc = nn.Linear(3 * s.hidden, s.hidden, bias=False)
        self.midlayer = MidLayer(s)
        self.norm = RMSNorm(s.hidden, s.eps)
        self.lm_head = nn.Linear(s.hidden, s.draft_vocab, bias=False)
        self.register_buffer("d2t", torch.zeros(s.draft_vocab, dtype=torch.long))
        self.register_buffer("t2d", torch.zeros(s.vocab, dtype=torch.bool))

    def rope(self, n: int):
        d = self.s.head_dim
        inv = 1.0 / (self.s.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
        ang = torch.outer(torch.arange(n, dtype=torch.float32), inv)
        ang = torch.cat((ang, ang), dim=-1)
        return ang.cos()[None, None], ang.sin()[None, None]

    def unrolled(self, features, ids, depth: int):
        """Logits of `depth` chained guesses: features [B, N, 3H] of the main at positions
        0..N-1, ids [B, N] the tokens x[1..N]; step s's logits at i guess x[i+2]."""
        b, n = ids.shape
        m, s = self.midlayer, self.s
        emb = m.input_layernorm(self.embed_tokens(ids))
        cos, sin = self.rope(n)
        hidden = self.fc(features)
        keys, values, out = [], [], []
        causal = torch.ones(n, n, dtype=torch.bool).tril()
        for step in range(depth):
            if step:  # own output of the previous guess, one position earlier
                hidden = torch.cat((torch.zeros_like(hidden[:, :1]), hidden[:, :-1]), dim=1)
            q, k, v = m.self_attn.qkv(torch.cat((emb, m.hidden_norm(hidden)), dim=-1), cos, sin)
            keys.append(k)
            values.append(v)
            scale = 1.0 / math.sqrt(s.head_dim)
            # first step's keys up to i - step; each later step's own key at its diagonal
            first = (q @ keys[0].transpose(-1, -2)) * scale
            first = first.masked_fill(~causal.tril(-step), float("-inf"))
            diag = [((q * self._shift(kk, step - t)).sum(-1, keepdim=True) * scale) for t, kk in enumerate(keys[1:], 1)]
            weights = torch.softmax(torch.cat([first] + diag, dim=-1), dim=-1)
            att = weights[..., :n] @ values[0]
            for t, vv in enumerate(values[1:], 1):
                att = att + weights[..., n + t - 1:n + t] * self._shift(vv, step - t)
            att = att.transpose(1, 2).reshape(b, n, s.heads * s.head_dim)
            h = hidden + m.self_attn.o_proj(att)
            h = h + m.mlp(m.post_attention_layernorm(h))
            out.append(self.lm_head(self.norm(h)))
            hidden = h
        return out

    @staticmethod
    def _shift(x, by: int):
        """x moved `by` positions later along the sequence (dim 2), zeros in front."""
        if by == 0:
            return x
        return torch.cat((torch.zeros_like(x[:, :, :by]), x[:, :, :-by]), dim=2)


def init_from_main(head: Eagle3Head, embed: torch.Tensor, final_norm: torch.Tensor, draft_ids: torch.Tensor) -> None:
    """Start near the main model: its embeddings (frozen; GenAI copies the main's anyway), its
    final norm and its output rows for the draft vocabulary, and `fc` passing the late layer's
    state through, so the first guesses are already in the main's output space."""
    with torch.no_grad():
        head.embed_tokens.weight.copy_(embed)
        head.embed_tokens.weight.requires_grad_(False)
        head.lm_head.weight.copy_(embed[draft_ids])  # SmolLM2 ties its output to its embeddings
        head.norm.weight.copy_(final_norm)
        h = head.s.hidden
        head.fc.weight.zero_()
        head.fc.weight[:, 2 * h:].copy_(torch.eye(h))
        head.fc.weight.add_(torch.randn_like(head.fc.weight) * 1e-3)
        head.midlayer.self_attn.o_proj.weight.mul_(0.1)
        head.midlayer.mlp.down_proj.weight.mul_(0.1)


def train(head: Eagle3Head, features: torch.Tensor, ids: torch.Tensor, labels: torch.Tensor, steps: int,
          depth: int = 3, batch: int = 4, lr: float = 2e-3, log: Callable[[str], None] = print) -> list[float]:
    """AdamW with a cosine schedule over `steps` batches; labels are draft-vocabulary indices,
    -100 where the main's choice is outside it. Returns each step's first-guess accuracy."""
    params = [p for p in head.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: min(1.0, (i + 1) / 20) * 0.5 * (1 + math.cos(math.pi * i / steps)))
    gen = torch.Generator().manual_seed(0)
    accuracy, start = [], time.monotonic()
    for i in range(steps):
        pick = torch.randint(0, ids.shape[0], (batch,), generator=gen)
        outs = head.unrolled(features[pick].float(), ids[pick], depth)
        loss = 0.0
        for step, logits in enumerate(outs):
            target = labels[pick].clone()
            target[:, :step] = -100  # no own output one position earlier to start from
            loss = loss + (0.8 ** step) * F.cross_entropy(logits.flatten(0, 1), target.flatten(), ignore_index=-100)
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        sched.step()
        with torch.no_grad():
            mask = labels[pick] >= 0
            accuracy.append(float((outs[0].argmax(-1) == labels[pick])[mask].float().mean()))
        if i % 25 == 0 or i == steps - 1:
            log(f"step {i + 1}/{steps}: loss {float(loss.detach()):.3f}, first-guess accuracy {accuracy[-1]:.2f} "
                f"({time.monotonic() - start:.0f} s)")
    return accuracy
