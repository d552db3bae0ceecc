"""The official Braco computation, step by step on the full lattice (braco-official §1).

This is a second, deliberately straightforward implementation used as the parity reference in tests and
as the baseline in ``braco cost --measure``. It follows the official order of operations:
the N x N DCT-II matrix built in the input's dtype, the full two-sided transform ``(D X) Dᵀ`` of every
channel, the polar embedding computed over the whole N x N frequency lattice and added before truncation,
truncation to ``C x C``, the optional size-C inverse DCT, and the residual branch with the temperature read
on the host. It supports the official options only (polar or no embedding, coef/idct coordinates).
"""

from __future__ import annotations

import math
from functools import lru_cache

import torch
import torch.nn.functional as F

__all__ = ["official_dct_matrix", "official_polar_features", "official_forward"]


def official_dct_matrix(n: int, dtype: torch.dtype, device: torch.device | str = "cpu") -> torch.Tensor:
    """DCT-II built in ``dtype`` with the official operation order (inexact in fp16/bf16 by design)."""
    pos = torch.arange(n, dtype=dtype, device=device)
    freq = torch.arange(n, dtype=dtype, device=device).unsqueeze(1)
    d = torch.cos((math.pi / n) * (pos + 0.5) * freq)
    d[0].mul_(1.0 / math.sqrt(n))
    d[1:].mul_(math.sqrt(2.0 / n))
    return d


@lru_cache(maxsize=32)
def _cached_dct(n: int, dtype: torch.dtype, device) -> torch.Tensor:
    # The official module keeps its DCT matrices in non-persistent buffers after the first call. Built
    # outside inference mode so a cached matrix stays usable by autograd.
    with torch.inference_mode(False):
        return official_dct_matrix(n, dtype, device)


@lru_cache(maxsize=16)
def official_polar_features(n: int, num_freqs: int, include_raw: bool, device="cpu") -> torch.Tensor:
    """Polar features over the full N x N lattice in float32, ``[N, N, 4F(+3)]`` (cached per shape and
    device, as the official code caches them)."""
    with torch.inference_mode(False):
        return _polar_features(n, num_freqs, include_raw, device)


def _polar_features(n: int, num_freqs: int, include_raw: bool, device) -> torch.Tensor:
    u = torch.arange(n, dtype=torch.float32, device=device).view(n, 1).expand(n, n)
    v = torch.arange(n, dtype=torch.float32, device=device).view(1, n).expand(n, n)
    r = torch.sqrt(u * u + v * v) / max(math.sqrt(2 * (n - 1) ** 2), 1.0)
    theta = torch.atan2(v, u)
    theta = torch.where((u == 0) & (v == 0), torch.zeros_like(theta), theta)
    bands = [float(2**j) for j in range(num_freqs)]
    # The official radial phase forms π·2^j in fp32 first, then multiplies by r.
    radial = [(torch.tensor(math.pi, dtype=torch.float32) * band) * r for band in bands]
    angular = [band * theta for band in bands]
    feats = [p.sin() for p in radial] + [p.cos() for p in radial] + [a.sin() for a in angular] + [a.cos() for a in angular]
    if include_raw:
        feats = [r, torch.sin(theta), torch.cos(theta)] + feats
    return torch.stack(feats, dim=-1)


def _grad_energy(grid: torch.Tensor) -> torch.Tensor:
    # grid [B, N, N, d] in fp32; vertical then horizontal neighbour differences, as the official order.
    b, n, _, _ = grid.shape
    e = torch.zeros(b, n, n, dtype=torch.float32, device=grid.device)
    dv = (grid[:, 1:] - grid[:, :-1]).pow(2).sum(-1)
    e[:, 1:] = e[:, 1:] + dv
    e[:, :-1] = e[:, :-1] + dv
    dh = (grid[:, :, 1:] - grid[:, :, :-1]).pow(2).sum(-1)
    e[:, :, 1:] = e[:, :, 1:] + dh
    e[:, :, :-1] = e[:, :, :-1] + dh
    e = e.flatten(1)
    return (e - e.mean(1, keepdim=True)) / (e.std(1, keepdim=True, unbiased=True) + 1e-6)


def _sparsemax(z: torch.Tensor) -> torch.Tensor:
    # Sort-based sparsemax over the last axis (Martins & Astudillo 2016), written out.
    z = z - z.max(dim=-1, keepdim=True).values
    zs, _ = torch.sort(z, dim=-1, descending=True)
    k = torch.arange(1, z.shape[-1] + 1, dtype=z.dtype, device=z.device)
    cums = zs.cumsum(-1) - 1
    support = (k * zs > cums).sum(dim=-1, keepdim=True)
    tau = cums.gather(-1, support - 1) / support.to(z.dtype)
    return torch.clamp(z - tau, min=0)


def official_forward(params: dict[str, torch.Tensor], x: torch.Tensor, cfg) -> torch.Tensor:
    """Official forward for a coder with parameters ``params`` (official names) and config ``cfg``.

    Args:
        params: e.g. ``dict(coder.named_parameters())``.
        x: ``[B, N² or 1+N², d]``.
        cfg: a :class:`~braco_patch.config.BracoConfig` with ``embedding`` in {polar, none},
            coordinates in {coef, idct, auto} and ``selection='sparsemax'``.
    Returns:
        ``[B, C² + S, d]``.
    """
    b, length, d = x.shape
    n = math.isqrt(length)
    if n * n != length:
        n = math.isqrt(length - 1)
        x = x[:, 1:]
    c, s = cfg.cutoff, cfg.residual_tokens
    dtype = x.dtype

    # Steps 2-3: full N x N DCT of every channel, left product first.
    dct = _cached_dct(n, dtype, x.device)
    grid = x.transpose(1, 2).reshape(b * d, n, n)
    with torch.set_grad_enabled(torch.is_grad_enabled() and not cfg.detach_dct):
        y = torch.matmul(torch.matmul(dct, grid), dct.transpose(0, 1)).view(b, d, n, n)
    # Step 4: polar embedding over the full lattice, added before truncation.
    if cfg.embedding == "polar":
        feats = official_polar_features(n, cfg.num_freqs, cfg.include_raw, x.device)
        w = params["polar_proj.weight"]
        pe = F.linear(feats.to(w.dtype), w).permute(2, 0, 1).unsqueeze(0).to(y.dtype)
        y = y + params["polar_pe_scale"] * pe
    # Steps 5-7: truncation, optional size-C inverse DCT, row-major serialisation.
    y = y[:, :, :c, :c]
    if cfg.resolved_coordinates == "idct":
        dc = _cached_dct(c, y.dtype, x.device)
        y = torch.matmul(torch.matmul(dc.transpose(0, 1), y), dc)
    backbone = y.permute(0, 2, 3, 1).reshape(b, c * c, d)
    if s == 0:
        return backbone

    # Steps 8-11: scorer, gradient prior, sparsemax with a host-side temperature, pooling.
    h = F.layer_norm(x, (d,), params["spatial_scorer.0.weight"], params["spatial_scorer.0.bias"], 1e-5)
    if "spatial_scorer.3.weight" in params:
        h = F.gelu(F.linear(h, params["spatial_scorer.1.weight"], params["spatial_scorer.1.bias"]))
        logits = F.linear(h, params["spatial_scorer.3.weight"], params["spatial_scorer.3.bias"])
    else:
        logits = F.linear(h, params["spatial_scorer.1.weight"], params["spatial_scorer.1.bias"])
    logits = logits.transpose(1, 2).contiguous()
    if cfg.prior == "grad":
        energy = _grad_energy(x.reshape(b, n, n, d).float())
        logits = logits + params["spatial_prior_weight"].to(logits.dtype) * energy.to(logits.dtype).unsqueeze(1)
    tau = max(cfg.temperature * cfg.temperature_mul, 1e-6)
    weights = _sparsemax((logits / tau).float()).to(logits.dtype)
    r = torch.einsum("bsl,bld->bsd", weights, x)
    if cfg.residual_norm:
        r = F.layer_norm(r, (d,), params["spatial_norm.weight"], params["spatial_norm.bias"], 1e-5)
    r = r * params["spatial_scale"].to(r.dtype)
    return torch.cat([backbone, r], dim=1)
