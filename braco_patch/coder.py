"""The Braco token coder (paper §3.4, Fig. 2): ``[B, L, d]`` vision tokens → ``[B, C² + S, d]``.

Steps, each a unit of its own:

1. basis (:mod:`.basis`): orthonormal 2-D DCT of the ``H x W`` token lattice, retained ``C x C`` block;
2. basis-coordinate embedding (:mod:`.embedding`), gated and added to the retained coefficients;
3. coordinate organisation (:mod:`.coordinates`): ``coef``/``idct``/``randrot``;
4. spatial residual tokens (:mod:`.residual`): scorer + gradient prior → sparsemax maps → pooled tokens.

Steps 1 and 3 are one fixed linear map of the token axis, ``A (D_C ⊗ D_C)``; it is built in float64 once
per grid, dtype and device and applied as a single ``[C², L] x [B, L, d]`` product, so only the retained
rows are ever computed. The embedding is input-independent: ``A (α W φ)`` is recomputed in training and
cached in eval mode until its weights change. ``forward`` never reads a tensor value on the host.

Fused form (issue 29, :mod:`.fused`; ``coder.fused``, on by default): the same numbers in about twenty kernels
instead of about a hundred. The backbone and its embedding are one ``baddbmm``; step 4 runs the scorer, a
six-kernel gradient energy, a one-kernel standardisation that also applies the prior weight and the
temperature, a six-kernel sparsemax, the pooling and a residual LayerNorm whose weights carry the residual
scale. Outside training (and outside ``torch.compile``, which fuses them itself) the folded parameters are
cached like the embedding; the scorer's last bias is left out there, because every selection is invariant to
a constant added to a row. What runs fused: every coordinate mode, every embedding, prior ``grad``/``none``,
``S = 0``, ``C = 0``, CLS or not, non-square grids, both norms, training and eval, float32/float16/bfloat16.
What keeps the step-by-step form of :mod:`.residual`: selections other than ``sparsemax``, autocast, grids of
more than :data:`.fused.MAX_FUSED_TOKENS` tokens or fewer than 2, and a scorer whose last layer is not a plain
``nn.Linear`` (a quantised one). ``coder.fused = False`` forces the step-by-step form everywhere.

Parameter names are the official checkpoint names (braco-official §3), in the official registration
order, so official checkpoints load as they are.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn as nn

from .basis import dct_matrix, retained_block_operator
from .config import BracoConfig
from .coordinates import coordinate_matrix
from .embedding import embedding_features, feature_width
from .fused import (
    MAX_FUSED_TOKENS,
    fused_operators,
    neighbour_energy,
    prior_gain,
    sparsemax_rows,
    standardised_prior,
    working_dtype,
)
from .residual import build_scorer, gradient_energy, pool, select, standardise
from .schedule import TEMPERATURE_FLOOR, scheduled_temperature

__all__ = ["BracoCoder", "LEGACY_NAMES"]

#: Older / standalone parameter names → current names; applied when loading a state dict.
LEGACY_NAMES = {
    "post_norm.": "post_concat_ln.",
    "polar_projection.": "polar_proj.",
    "polar_scale": "polar_pe_scale",
    "residual_norm.": "spatial_norm.",
    "residual_scale": "spatial_scale",
    "residual_prior_scale": "spatial_prior_weight",
    "residual_scorer.": "spatial_scorer.",
}


class BracoCoder(nn.Module):
    """Compress an N x N (or H x W) grid of vision tokens into ``C² + S`` tokens.

    Args:
        dim: token width d (1024 for CLIP-L/14).
        cutoff: C, retained DCT frequencies per axis (paper main table: 1/2/3/4).
        residual_tokens: S, spatial residual tokens (paper main table: 3/5/7/9).
        grid: optional fixed ``(H, W)`` token grid; without it the grid is N x N from the token count.
        **options: any other :class:`BracoConfig` field (``coordinates="idct"``, ``embedding="none"``, ...).

    Example::

        coder = BracoCoder(dim=1024, cutoff=3, residual_tokens=7)
        z = coder(torch.randn(2, 577, 1024))  # [2, 16, 1024]; the CLS token is dropped
    """

    def __init__(
        self,
        dim: int,
        cutoff: int = 3,
        residual_tokens: int = 7,
        *,
        grid: tuple[int, int] | None = None,
        config: BracoConfig | None = None,
        **options: Any,
    ) -> None:
        super().__init__()
        if config is None:
            config = BracoConfig(cutoff=cutoff, residual_tokens=residual_tokens, **options)
        elif options:
            config = config.replace(**options)
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise ValueError(f"dim must be a positive integer, got {dim!r}")
        if grid is not None:
            grid = _check_grid(grid)
            if config.cutoff > min(grid):
                raise ValueError(f"cutoff C={config.cutoff} exceeds the token grid {grid[0]}x{grid[1]}")
            _check_budget(config, grid)
        self.config = config
        self.dim = dim
        self.grid = grid
        c, s = config.cutoff, config.residual_tokens

        # Registration order is the official one (it fixes named_parameters() order and init RNG draws).
        has_pe = c > 0 and config.embedding != "none"
        if has_pe and config.embedding == "learned":
            self.pe_table = nn.Parameter(torch.randn(c * c, dim) * 0.02)
        elif has_pe:
            self.polar_proj = nn.Linear(feature_width(config.embedding, config.num_freqs, config.include_raw), dim, bias=False)
        if has_pe:
            self.polar_pe_scale = nn.Parameter(torch.tensor(float(config.pe_scale_init)))
        if config.residual_norm:
            self.spatial_norm = nn.LayerNorm(dim, eps=1e-5)
        self.spatial_scale = nn.Parameter(torch.tensor(float(config.residual_scale_init)))
        self.spatial_prior_weight = nn.Parameter(torch.tensor(float(config.prior_weight_init)))
        if s > 0:
            self.spatial_scorer = build_scorer(dim, s, config.scorer_hidden_mult)
        if config.post_concat_norm:
            self.post_concat_ln = nn.LayerNorm(dim, eps=config.post_concat_norm_eps)
        self.register_buffer("temperature_cur", torch.tensor(float(config.temperature)), persistent=False)

        #: Use the few-kernel form where it applies (see the module docstring); ``False`` runs every step as
        #: :mod:`.residual` states it.
        self.fused = True
        self._operators: dict[tuple, Any] = {}
        self._caches: dict[str, tuple[tuple, Any]] = {}

    @classmethod
    def from_config(cls, dim: int, config: BracoConfig, grid: tuple[int, int] | None = None) -> "BracoCoder":
        return cls(dim, grid=grid, config=config)

    # -- properties ----------------------------------------------------------------------------------
    @property
    def cutoff(self) -> int:
        return self.config.cutoff

    @property
    def residual_tokens(self) -> int:
        return self.config.residual_tokens

    @property
    def output_tokens(self) -> int:
        """K = C² + S."""
        return self.config.output_tokens

    @property
    def is_annealed(self) -> bool:
        return self.config.is_annealed

    def extra_repr(self) -> str:
        cfg = self.config
        return (
            f"dim={self.dim}, cutoff={cfg.cutoff}, residual_tokens={cfg.residual_tokens}, "
            f"coordinates={cfg.resolved_coordinates}, embedding={cfg.embedding}, prior={cfg.prior}, "
            f"selection={cfg.selection}"
        )

    # -- temperature ---------------------------------------------------------------------------------
    @torch.no_grad()
    def set_temperature(self, value: float) -> None:
        """Set the sparsemax temperature (used until the next ``set_step``)."""
        if not math.isfinite(float(value)) or float(value) <= 0:
            raise ValueError(f"temperature must be a finite number > 0, got {value!r}")
        self.temperature_cur.fill_(max(float(value), TEMPERATURE_FLOOR))

    @torch.no_grad()
    def set_step(self, step: int, max_steps: int | None = None) -> float:
        """Set the temperature for optimiser step ``step`` from the config's schedule; returns it.

        ``max_steps`` is accepted for the trainer callback's signature and ignored, as in the official
        code: the schedule length is ``temp_steps``.
        """
        cfg = self.config
        tau = scheduled_temperature(
            step, temperature=cfg.temperature, start=cfg.temp_start, end=cfg.temp_end, steps=cfg.temp_steps,
            schedule=cfg.temp_schedule,
        )
        self.temperature_cur.fill_(tau)
        return tau

    # -- grid ----------------------------------------------------------------------------------------
    def resolve_grid(self, num_tokens: int) -> tuple[tuple[int, int], int]:
        """``((H, W), offset)`` for ``num_tokens`` tokens; ``offset`` 1 means a leading CLS token is dropped."""
        if self.grid is not None:
            h, w = self.grid
            if num_tokens in (h * w, h * w + 1):
                return self.grid, num_tokens - h * w
            raise ValueError(
                f"expected {h * w} or {h * w + 1} tokens (the {h}x{w} grid, optionally with a CLS token), got {num_tokens}"
            )
        for offset in (0, 1):
            n = math.isqrt(max(num_tokens - offset, 0))
            if n > 0 and n * n == num_tokens - offset:
                if self.cutoff > n:
                    raise ValueError(f"cutoff C={self.cutoff} exceeds the {n}x{n} token grid; C must be at most {n}")
                _check_budget(self.config, (n, n))
                return (n, n), offset
        raise ValueError(
            f"expected N² or 1+N² tokens (an N×N grid, optionally with a CLS token), got {num_tokens}; "
            "pass grid=(H, W) for a non-square grid"
        )

    # -- fixed operators -----------------------------------------------------------------------------
    def _operator(self, grid: tuple[int, int], dtype: torch.dtype, device: torch.device):
        """``(A (D_C ⊗ D_C)) [C², H·W]`` and ``A φ [C², F]`` (or ``None``), cached per grid/dtype/device."""
        return self._constant(("backbone", grid, dtype, device), lambda: self._build_operator(grid, dtype, device))

    def _fused_operators(self, grid: tuple[int, int], device: torch.device, dtype: torch.dtype):
        """The operators of the fused residual step (:func:`.fused.fused_operators`), cached per grid/device/dtype."""
        return self._constant(("fused", grid, device, dtype), lambda: fused_operators(grid, device, dtype))

    def _constant(self, key: tuple, build):
        cached = self._operators.get(key)
        if cached is None:
            # Built outside inference mode so a cache filled under ``torch.inference_mode`` still serves
            # later training steps (inference tensors cannot be saved for backward).
            with torch.inference_mode(False), torch.no_grad():
                cached = build()
            self._operators[key] = cached
        return cached

    def _build_operator(self, grid: tuple[int, int], dtype: torch.dtype, device: torch.device):
        cfg = self.config
        a = coordinate_matrix(cfg.coordinates, cfg.cutoff, cfg.rotation_seed)
        op = a @ retained_block_operator(dct_matrix(grid[0]), dct_matrix(grid[1]), cfg.cutoff)
        feats = None
        if cfg.embedding in ("polar", "sincos2d") and cfg.cutoff > 0:
            feats = (a @ embedding_features(cfg.embedding, cfg.cutoff, grid, cfg.num_freqs, cfg.include_raw))
            feats = feats.to(device=device, dtype=torch.float32)
        return op.to(device=device, dtype=dtype), feats

    # -- values derived from parameters (cached outside training) ------------------------------------
    def _derived(self, slot: str, key: tuple, params: list[torch.Tensor], build):
        """``build()``, reused while ``key`` and ``params`` (identity and in-place version) are unchanged.

        Only outside training, outside ``torch.compile`` and when no gradient can reach ``params``;
        parameters made under inference mode carry no version counter, so they are never cached.
        """
        use_cache = not (
            self.training
            or torch.compiler.is_compiling()
            or any(map(torch.is_inference, params))
            or (torch.is_grad_enabled() and any(p.requires_grad for p in params))
        )
        if not use_cache:
            return build()
        full_key = key + tuple((p.data_ptr(), p._version) for p in params)
        hit = self._caches.get(slot)
        if hit is not None and hit[0] == full_key:
            return hit[1]
        value = build()
        self._caches[slot] = (full_key, value)
        return value

    # -- step 2: embedding ---------------------------------------------------------------------------
    def coordinate_embedding(self, grid: tuple[int, int], dtype: torch.dtype, device: torch.device) -> torch.Tensor | None:
        """``A (α W_pe φ(u, v))`` for the retained block, ``[C², d]`` in ``dtype``; ``None`` without one."""
        cfg = self.config
        if cfg.cutoff == 0 or cfg.embedding == "none":
            return None
        return self._derived("embedding", (grid, dtype, device), self._embedding_parameters(),
                             lambda: self._embedding(grid, dtype, device))

    def _embedding(self, grid: tuple[int, int], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        if self.config.embedding == "learned":
            a = self._coordinate_matrix(device)
            return (a @ self.pe_table.to(a.dtype)).to(dtype) * self.polar_pe_scale.to(dtype)
        feats = self._operator(grid, dtype, device)[1]
        weight = self.polar_proj.weight
        return nn.functional.linear(feats.to(weight.dtype), weight).to(dtype) * self.polar_pe_scale.to(dtype)

    def _embedding_parameters(self) -> list[torch.Tensor]:
        first = self.pe_table if self.config.embedding == "learned" else self.polar_proj.weight
        return [first, self.polar_pe_scale]

    def _coordinate_matrix(self, device: torch.device) -> torch.Tensor:
        cfg = self.config
        return coordinate_matrix(cfg.coordinates, cfg.cutoff, cfg.rotation_seed).to(device=device, dtype=torch.float32)

    def backbone(self, tokens: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
        """Steps 1–3 on grid tokens ``[B, H·W, d]`` → ``[B, C², d]``."""
        op, _ = self._operator(grid, tokens.dtype, tokens.device)
        source = tokens.detach() if self.config.detach_dct and torch.is_grad_enabled() else tokens
        pe = self.coordinate_embedding(grid, tokens.dtype, tokens.device)
        if pe is None:
            return torch.matmul(op, source)
        if self._fuses(tokens):  # product and embedding add in one kernel
            return torch.baddbmm(pe, op.expand(tokens.shape[0], -1, -1), source)
        return torch.matmul(op, source) + pe

    # -- step 4: residual tokens ---------------------------------------------------------------------
    def _fuses(self, tokens: torch.Tensor) -> bool:
        """Whether the fused form serves these grid tokens (module docstring, "What keeps ...")."""
        return self.fused and not torch.is_autocast_enabled(tokens.device.type)

    def _fuses_residual(self, tokens: torch.Tensor) -> bool:
        return (
            self._fuses(tokens)
            and self.config.selection == "sparsemax"
            and 2 <= tokens.shape[1] <= MAX_FUSED_TOKENS
            and type(self.spatial_scorer[-1]) is nn.Linear
        )

    def residual_weights(self, tokens: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
        """Sparsemax maps ``[B, S, H·W]`` over grid tokens ``[B, H·W, d]`` (rows on the simplex)."""
        if self._fuses_residual(tokens):
            return self._fused_weights(tokens, grid)
        cfg = self.config
        logits = self.spatial_scorer(tokens).transpose(1, 2)
        if cfg.prior == "grad":
            prior = standardise(gradient_energy(tokens.reshape(tokens.shape[0], grid[0], grid[1], -1)))
            logits = logits + self.spatial_prior_weight.to(logits.dtype) * prior.to(logits.dtype).unsqueeze(1)
        return select(logits, self._temperature(), cfg.selection)

    def _temperature(self) -> torch.Tensor:
        return torch.clamp_min(self.temperature_cur * self.config.temperature_mul, TEMPERATURE_FLOOR)

    def _fused_weights(self, tokens: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
        """:meth:`residual_weights` in the fused form: scorer, prior, temperature and sparsemax.

        The weights come in the working dtype (float32, float64 for a float64 coder).
        """
        work = working_dtype(tokens.dtype)
        ops = self._fused_operators(grid, tokens.device, work)
        hidden = tokens
        for layer in list(self.spatial_scorer)[:-1]:
            hidden = layer(hidden)
        final = self.spatial_scorer[-1]
        with_bias = final.bias is not None and torch.is_grad_enabled() and final.bias.requires_grad
        weight, bias, gain = self._scorer_head(tokens.shape[1], tokens.device, work, with_bias)
        base = None
        if self.config.prior == "grad":
            grid_tokens = tokens.reshape(tokens.shape[0], grid[0], grid[1], -1)
            if grid_tokens.dtype != work:
                grid_tokens = grid_tokens.to(work)
            base = standardised_prior(neighbour_energy(grid_tokens, ops), gain)
        if bias is not None:  # only while the bias trains: it moves a whole row, which no selection sees
            base = bias.unsqueeze(1) if base is None else base + bias.unsqueeze(1)
        head = weight.expand(tokens.shape[0], -1, -1)
        if base is not None and hidden.dtype == work:
            z = torch.baddbmm(base, head, hidden.transpose(1, 2))
        else:
            z = torch.bmm(head, hidden.transpose(1, 2))
            z = z.to(work) if base is None else base + z  # the working dtype from here on
        return sparsemax_rows(z, ops)

    def _scorer_head(self, length: int, device: torch.device, work: torch.dtype, with_bias: bool):
        """``(W/τ, b/τ or None, prior gain [L] or None)`` of the scorer's last layer, temperature folded in."""
        final = self.spatial_scorer[-1]
        params = [final.weight, self.spatial_prior_weight, self.temperature_cur] + ([final.bias] if with_bias else [])

        def build():
            tau = self._temperature()
            gain = prior_gain(self.spatial_prior_weight, tau, length, work) if self.config.prior == "grad" else None
            bias = final.bias.to(work) / tau.to(work) if with_bias else None
            return final.weight / tau.to(final.weight.dtype), bias, gain

        return self._derived("scorer_head", (length, device, work, final.weight.dtype, with_bias), params, build)

    def residual(self, tokens: torch.Tensor, grid: tuple[int, int]) -> torch.Tensor:
        """Step 4: ``[B, H·W, d]`` → ``[B, S, d]`` pooled, normalised and scaled residual tokens."""
        weights = self.residual_weights(tokens, grid)
        if not self._fuses(tokens):
            r = pool(weights, tokens)
            if self.config.residual_norm:
                r = self.spatial_norm(r)
            return r * self.spatial_scale.to(r.dtype)
        r = torch.bmm(weights if weights.dtype == tokens.dtype else weights.to(tokens.dtype), tokens)
        if not self.config.residual_norm:
            return r * self.spatial_scale.to(r.dtype)
        norm = self.spatial_norm
        params = [norm.weight, norm.bias, self.spatial_scale]
        if torch.is_grad_enabled() and any(p.requires_grad for p in params):  # the gradients eager gives
            return norm(r) * self.spatial_scale.to(r.dtype)
        weight, bias = self._derived("residual_norm", (norm.weight.dtype,), params,
                                     lambda: (norm.weight * self.spatial_scale, norm.bias * self.spatial_scale))
        return nn.functional.layer_norm(r, norm.normalized_shape, weight, bias, norm.eps)

    # -- forward -------------------------------------------------------------------------------------
    def split_tokens(self, x: torch.Tensor) -> tuple[torch.Tensor, tuple[int, int]]:
        """Validate ``x [B, L, d]`` and return its grid tokens ``[B, H·W, d]`` (contiguous) and ``(H, W)``.

        A floating-point input of another dtype than the coder's parameters is cast to theirs once, here
        (outside autocast, which handles mixed dtypes itself); integer or boolean tokens are an error.
        """
        if not (x.is_floating_point()):
            raise ValueError(f"expected floating-point tokens, got dtype {x.dtype}")
        if x.dim() != 3:
            raise ValueError(f"expected tokens of shape [batch, tokens, {self.dim}], got shape {tuple(x.shape)}")
        if x.shape[-1] != self.dim:
            raise ValueError(f"expected token width {self.dim}, got {x.shape[-1]} (shape {tuple(x.shape)})")
        grid, offset = self.resolve_grid(x.shape[1])
        dtype = self.spatial_scale.dtype
        if x.dtype != dtype and not torch.is_autocast_enabled(x.device.type):
            x = x.to(dtype)
        tokens = x[:, offset:] if offset else x
        # One copy here (batch > 1 with a CLS token) instead of one in every layer that needs it contiguous.
        return (tokens if tokens.is_contiguous() else tokens.contiguous()), grid

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``[B, L, d]`` with ``L = H·W`` or ``1 + H·W`` → ``[B, C² + S, d]`` (backbone first, then residual)."""
        tokens, grid = self.split_tokens(x)
        if tokens.shape[0] == 0:  # an empty batch (a static shape: no host sync)
            return tokens.new_zeros((0, self.output_tokens, self.dim))
        parts = []
        if self.config.cutoff > 0:
            parts.append(self.backbone(tokens, grid))
        if self.config.residual_tokens > 0:
            parts.append(self.residual(tokens, grid))
        z = torch.cat(parts, dim=1) if len(parts) > 1 else parts[0]
        if self.config.post_concat_norm:
            z = self.post_concat_ln(z)
        return z

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs):
        for key in [k for k in state_dict if k.startswith(prefix)]:
            rest = key[len(prefix):]
            for old, new in LEGACY_NAMES.items():
                if rest.startswith(old):
                    state_dict[prefix + new + rest[len(old):]] = state_dict.pop(key)
                    break
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs)


def _check_budget(config: BracoConfig, grid: tuple[int, int]) -> None:
    """Refuse a budget ``C² + S`` larger than the ``H·W`` tokens it compresses (a compressor must not expand)."""
    tokens = grid[0] * grid[1]
    if config.output_tokens > tokens:
        raise ValueError(
            f"{config.name} outputs C²+S = {config.output_tokens} tokens but the {grid[0]}x{grid[1]} grid has only "
            f"{tokens}; with C={config.cutoff}, S must be at most {tokens - config.backbone_tokens}"
        )


def _check_grid(grid) -> tuple[int, int]:
    try:
        h, w = (int(v) for v in grid)
    except (TypeError, ValueError):
        raise ValueError(f"grid must be a pair of positive integers (H, W), got {grid!r}") from None
    if h < 1 or w < 1:
        raise ValueError(f"grid must be a pair of positive integers (H, W), got {grid!r}")
    return h, w
