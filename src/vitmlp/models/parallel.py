"""Three things, Sec. 3.2 / Table 4: the parallel block with its branches run one after the other
("seq", as timm's ParallelThingsBlock and the official deit ``models_v2.py`` do) or concurrently
("par").

Concurrent execution runs the P branches as one layer P times wider, one kernel per step instead
of P (the official code has none; the paper's Table 4 used "a simple implementation"):

- LayerNorm's normalisation is shared (same input, same mean and variance); each branch's affine
  (w, b) is folded into the linear after it: ``(u*w + b) @ W.T + c = u @ (W*w).T + (W@b + c)``.
- The P qkv projections are one linear of width P*3D and attention is one call over P*H heads.
- The output projection reads the P branches' heads side by side, ``(B, N, P*D) @ (P*D, D)``, so
  eq. 2's sum over branches happens inside that matmul (LayerScale's gamma folded into the rows).
- The FFN likewise: fc1 of width P*4D, fc2 summing over branches.

On a GPU, one CUDA stream per branch would be another route (not done here).

The fused weights are derived from the branch parameters, never stored: built at every call when
autograd records (training), cached for inference and rebuilt as soon as any parameter changes
(storage or in-place version), so they cannot drift from the ``state_dict``.

    set_concurrent(model, True)    # every ParallelBlock of the model runs its branches at once
"""
from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from einops import rearrange
from timm.layers import DropPath, LayerScale, Mlp
from timm.models.vision_transformer import Attention, ParallelThingsBlock


def _weight_bias(lin: nn.Linear):
    """(weight (out, in), bias), zeros standing for a missing bias."""
    w = lin.weight
    return w, lin.bias if lin.bias is not None else w.new_zeros(w.shape[0])


def _fold_in(norm: nn.Module, lin: nn.Linear):
    """(weight, bias) of ``lin(norm's affine(u))`` as one linear on the normalised ``u``."""
    w, c = _weight_bias(lin)
    if isinstance(norm, nn.Identity):
        return w, c
    return w * norm.weight, w @ norm.bias + c


def _fold_out(ls: nn.Module, lin: nn.Linear):
    """(weight, bias) of ``ls(lin(h))``: LayerScale's gamma scales the output rows."""
    w, c = _weight_bias(lin)
    return (ls.gamma[:, None] * w, ls.gamma * c) if isinstance(ls, LayerScale) else (w, c)


def _normalise(x: torch.Tensor, norm: nn.Module) -> torch.Tensor:
    return F.layer_norm(x, norm.normalized_shape, eps=norm.eps) if isinstance(norm, nn.LayerNorm) else x


class ParallelBlock(ParallelThingsBlock):
    """timm's ParallelThingsBlock (eq. 2) with ``concurrent``: False runs timm's forward, branch
    after branch; True runs the branches as one wider layer (module docstring). Same parameters,
    same ``state_dict``. In training with dropout or drop-path, or with an attention mask, the
    concurrent path falls back to the sequential one (random draws are per branch)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.concurrent = False
        self._cache = None  # (parameter versions, fused weights); a plain attribute, not state

    def check_concurrent(self) -> None:
        """Raise ValueError if a sublayer is not one the fused path reproduces."""
        why = []
        for norms in ([a.norm for a in self.attns], [f.norm for f in self.ffns]):  # one shared normalisation each
            if not (all(type(n) is nn.Identity for n in norms) or all(
                    isinstance(n, nn.LayerNorm) and n.weight is not None and n.bias is not None
                    and n.eps == norms[0].eps for n in norms)):
                why.append("the branches' norms must all be affine LayerNorms with one eps, or all Identity")
        for a in self.attns:
            at = a.attn
            if type(at) is not Attention or getattr(at, "gate", None) is not None or not all(
                    isinstance(m, nn.Identity) for m in (at.q_norm, at.k_norm, at.norm)):
                why.append("attention must be timm's plain Attention (no qk-norm, scale-norm or gate)")
                break
        if any(type(f.mlp) is not Mlp or not isinstance(f.mlp.norm, nn.Identity) for f in self.ffns):
            why.append("FFN must be timm's plain Mlp (no norm inside, e.g. not BnMlp)")
        if len({type(f.mlp.act) for f in self.ffns}) > 1:
            why.append("all branches need the same activation")
        if why:
            raise ValueError("concurrent branches not supported for this block: " + "; ".join(why))

    def _stochastic(self) -> bool:
        return any((isinstance(m, nn.Dropout) and m.p > 0) or (isinstance(m, DropPath) and m.drop_prob > 0)
                   for m in self.modules())

    def fused_weights(self) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
        """(weight, bias) of the four wide linears, from the branch parameters."""
        qkv = [_fold_in(a.norm, a.attn.qkv) for a in self.attns]
        proj = [_fold_out(a.ls, a.attn.proj) for a in self.attns]
        fc1 = [_fold_in(f.norm, f.mlp.fc1) for f in self.ffns]
        fc2 = [_fold_out(f.ls, f.mlp.fc2) for f in self.ffns]
        side_by_side = lambda ws: (torch.cat([w for w, _ in ws]), torch.cat([b for _, b in ws]))  # noqa: E731
        summed = lambda ws: (torch.cat([w for w, _ in ws], dim=1), sum(b for _, b in ws))  # noqa: E731
        return {"qkv": side_by_side(qkv), "proj": summed(proj), "fc1": side_by_side(fc1), "fc2": summed(fc2)}

    def _weights(self):
        if torch.is_grad_enabled() and any(p.requires_grad for p in self.parameters()):
            return self.fused_weights()  # autograd: gradients reach the branch parameters
        key = tuple((id(p), p.data_ptr(), p._version) for p in self.parameters())
        if self._cache is None or self._cache[0] != key:
            with torch.no_grad():
                self._cache = (key, self.fused_weights())
        return self._cache[1]

    def forward(self, x: torch.Tensor, attn_mask=None, is_causal: bool = False) -> torch.Tensor:
        if not self.concurrent or attn_mask is not None or is_causal or (self.training and self._stochastic()):
            return super().forward(x, attn_mask=attn_mask, is_causal=is_causal)
        w = self._weights()
        P, attn = self.num_parallel, self.attns[0].attn
        # (B, N, P*3D) -> q, k, v, each (B, P*H, N, hd): the P branches' heads side by side
        qkv = F.linear(_normalise(x, self.attns[0].norm), *w["qkv"])
        q, k, v = rearrange(qkv, "b n (p t h d) -> t b (p h) n d", p=P, t=3, h=attn.num_heads)
        if attn.fused_attn:
            a = F.scaled_dot_product_attention(q, k, v)
        else:  # the explicit path, as timm's Attention with fused_attn=False
            a = ((q * attn.scale) @ k.transpose(-2, -1)).softmax(dim=-1) @ v
        x = x + F.linear(rearrange(a, "b (p h) n d -> b n (p h d)", p=P), *w["proj"])  # sums the branches
        h = self.ffns[0].mlp.act(F.linear(_normalise(x, self.ffns[0].norm), *w["fc1"]))  # (B, N, P*4D)
        return x + F.linear(h, *w["fc2"])  # (B, N, D), summed over branches


def set_concurrent(model: nn.Module, on: bool = True) -> int:
    """Run the branches of every ParallelBlock in ``model`` concurrently (or one after the other);
    returns how many blocks were switched. Raises ValueError if a block cannot be fused."""
    blocks = [m for m in model.modules() if isinstance(m, ParallelBlock)]
    for blk in blocks:
        if on:
            blk.check_concurrent()
        blk.concurrent = on
    return len(blocks)
