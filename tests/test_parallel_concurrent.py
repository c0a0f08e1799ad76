"""The parallel block's two executions (Three things Table 4): branches one after the other (timm's
forward) and concurrently (one wider layer) compute the same function of the same parameters."""
import pytest
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from vitmlp.models import create_model
from vitmlp.models.parallel import ParallelBlock, set_concurrent

torch.set_num_threads(1)


def _randomise(module, seed=0):
    """Non-trivial LayerNorm affines, LayerScale gammas and biases (the folding must get them right),
    new weights at their init scale."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_((p if p.ndim > 1 else 1) * torch.randn(p.shape, generator=gen) * (0.3 if p.ndim == 1 else 1))


def _block(branches, layerscale, **kw):
    blk = ParallelBlock(48, num_heads=4, num_parallel=branches, qkv_bias=True, init_values=layerscale, **kw)
    _randomise(blk)
    return blk


def _both(blk, x):
    """Outputs (and, in training, gradients of parameters and input) sequential vs concurrent."""
    out = []
    for on in (False, True):
        blk.concurrent = on
        xi = x.clone().requires_grad_(blk.training)
        y = blk(xi)
        grads = []
        if blk.training:
            blk.zero_grad()
            (y * torch.linspace(-1, 1, y.shape[-1])).sum().backward()
            grads = [xi.grad] + [p.grad.clone() for p in blk.parameters()]
        out.append((y.detach(), grads))
    return out


@pytest.mark.parametrize("branches", [2, 3])
@pytest.mark.parametrize("layerscale", [None, 0.1])
@pytest.mark.parametrize("train", [False, True])
@pytest.mark.parametrize("fused_attn", [True, False])
def test_concurrent_equals_sequential(branches, layerscale, train, fused_attn):
    blk = _block(branches, layerscale).train(train)
    for a in blk.attns:
        a.attn.fused_attn = fused_attn
    x = torch.randn(3, 7, 48)
    (y_seq, g_seq), (y_par, g_par) = _both(blk, x)
    assert torch.allclose(y_par, y_seq, atol=1e-5, rtol=1e-5)
    for gs, gp in zip(g_seq, g_par):  # training: the same gradients reach the same parameters
        assert torch.allclose(gp, gs, atol=1e-4, rtol=1e-4)


def test_concurrent_runs_each_step_once_for_all_branches():
    """Sequential: 4 linears and 1 attention per branch; concurrent: 4 and 1 for the whole block."""
    class Count(TorchFunctionMode):
        def __init__(self):
            super().__init__()
            self.n = {F.linear: 0, F.scaled_dot_product_attention: 0}

        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func in self.n:
                self.n[func] += 1
            return func(*args, **(kwargs or {}))

    blk, x = _block(3, 0.1).eval(), torch.randn(2, 5, 48)
    counts = []
    for on in (False, True):
        blk.concurrent = on
        with torch.no_grad(), Count() as c:
            blk(x)
        counts.append(list(c.n.values()))
    assert counts == [[12, 3], [4, 1]]


def test_model_switch_keeps_parameters_and_state_dict():
    torch.manual_seed(0)
    m = create_model("vit_S18x2", img_size=32, patch_size=8, width_mult=0.25, depth_mult=1 / 6,
                     num_classes=10, layerscale=0.1).eval()
    _randomise(m)
    before = {k: v.clone() for k, v in m.state_dict().items()}
    n_params = sum(p.numel() for p in m.parameters())
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        y_seq = m(x)
        assert set_concurrent(m, True) == len(m.blocks) == 3
        y_par = m(x)
    assert torch.allclose(y_par, y_seq, atol=1e-5)
    after = m.state_dict()
    assert list(after) == list(before) and all(torch.equal(after[k], v) for k, v in before.items())
    assert sum(p.numel() for p in m.parameters()) == n_params and not list(m.buffers())


def test_inference_cache_follows_every_parameter_change():
    """The fused weights cached for inference are rebuilt after an in-place update, a
    load_state_dict or a move of the parameters: they never drift from the state_dict."""
    blk, x = _block(2, 0.1).eval(), torch.randn(2, 5, 48)
    other = _block(2, 0.1)
    _randomise(other, seed=1)

    def agree():
        with torch.no_grad():
            blk.concurrent = True
            y_par = blk(x)
            blk.concurrent = False
            return torch.allclose(y_par, blk(x), atol=1e-5)

    assert agree()
    with torch.no_grad():
        blk.ffns[1].ls.gamma.mul_(-2)       # an optimiser step is an in-place update
        blk.attns[0].norm.bias.add_(1)
    assert agree()
    blk.load_state_dict(other.state_dict())
    assert agree()
    blk.attns[1].attn.qkv.weight.data = blk.attns[1].attn.qkv.weight.data.double().float()  # new storage
    assert agree()


def test_stochastic_training_falls_back_to_the_sequential_draws():
    blk = _block(2, 0.1, drop_path=0.5, proj_drop=0.1).train()
    x = torch.randn(4, 5, 48)
    ys = []
    for on in (False, True):
        blk.concurrent = on
        torch.manual_seed(0)
        ys.append(blk(x))
    assert torch.equal(*ys)


def test_ffn_without_norm_fuses_and_bn_ffn_is_refused():
    x = torch.randn(2, 3, 8, 8)
    m = create_model("vit_S2x2", img_size=8, patch_size=4, width_mult=0.125, num_classes=5, ffn_norm=False).eval()
    _randomise(m)
    with torch.no_grad():
        y = m(x)
        set_concurrent(m, True)
        assert torch.allclose(m(x), y, atol=1e-5)
    bn = create_model("vit_S2x2", img_size=8, patch_size=4, width_mult=0.125, num_classes=5, ffn_bn=True)
    with pytest.raises(ValueError, match="BnMlp"):
        set_concurrent(bn, True)


def test_paired_throughput_alternates_the_modes():
    from vitmlp.measure import paired_throughput
    m = create_model("vit_S2x2", img_size=8, patch_size=4, width_mult=0.125, num_classes=5)
    calls = []
    modes = {"seq": lambda: (calls.append("seq"), set_concurrent(m, False)),
             "par": lambda: (calls.append("par"), set_concurrent(m, True))}
    out = paired_throughput(m, modes, batch=2, img_size=8, min_time=0.0, max_rounds=3)
    assert calls == ["seq", "par", "seq", "par"]          # a warm-up round, then one counted round
    assert list(out) == ["seq", "par"] and all(len(v) == 1 and v[0] > 0 for v in out.values())
    calls.clear()
    out = paired_throughput(m, modes, batch=2, img_size=8, min_time=1e9, max_rounds=3)
    assert calls == ["seq", "par"] * 2 + ["par", "seq"] + ["seq", "par"] and len(out["par"]) == 3


def test_two_models_are_timed_alternately_for_at_least_min_rounds():
    """Mixer Table 3's claim: each Mixer/ViT pair timed in alternating rounds, so a change of load on
    a shared machine hits both models of a round alike."""
    from vitmlp.measure import paired_models_throughput
    calls = []
    pair = {}
    for name in ("Mixer", "ViT"):
        pair[name] = create_model("vit_S2x2", img_size=8, patch_size=4, width_mult=0.125, num_classes=5)
        pair[name].register_forward_hook(lambda mod, inp, out, n=name: calls.append(n))
    out = paired_models_throughput(pair, batch=2, img_size=8, min_time=0.0, min_rounds=3)
    assert calls == ["Mixer", "ViT"] * 2 + ["ViT", "Mixer"] + ["Mixer", "ViT"]   # warm-up, then 3 rounds
    assert {k: len(v) for k, v in out.items()} == {"Mixer": 3, "ViT": 3}


def test_timings_run_the_model_without_autograd():
    """Inference is timed without an autograd graph: a decorator that slid onto a helper left
    paired_throughput recording one, and Table 4's B18x2 at batch 64 took 21 GB and was killed."""
    from vitmlp.measure import paired_throughput, throughput
    m = create_model("vit_S2x2", img_size=8, patch_size=4, width_mult=0.125, num_classes=5)
    grad = []
    m.register_forward_hook(lambda mod, inp, out: grad.append(torch.is_grad_enabled()))
    paired_throughput(m, {"seq": lambda: set_concurrent(m, False)}, batch=2, img_size=8, min_time=0.0, max_rounds=1)
    throughput(m, batch=2, img_size=8, warmup=0, min_time=0.0)
    assert grad and not any(grad)
