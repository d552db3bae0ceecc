"""Command lines of the diagnostics: ``braco diagnose energy|probe`` and ``braco calibrate``.

    braco diagnose energy --vision-tower PATH --images DIR [--out DIR] [--max-images 1024] [--budgets K ...]
                          [--bases ...] [--magnitude-samples 128] [--batch-size 32] [--device cpu]
    braco diagnose probe  --vision-tower PATH --images DIR [--labels FILE] [--out DIR] [--budgets K ...]
                          [--probe-dim 64] [--val-fraction 0.2] [--test-fraction 0.2] [--lambda 0.5]
    braco calibrate       --vision-tower PATH --images DIR [--out DIR] [--resamples 3] [--n 1024]
                          [--cutoffs 2 ... 16] [--beta 5e-4] [--gamma 0.5] [--gram-scale energy]

Each writes JSON, CSV and PNG files into ``--out`` and prints a short summary. Bad inputs (missing tower,
empty or missing image folder, unreadable image, budget or cutoff larger than the grid) end the command
with one sentence on stderr and exit status 2 (the user-error status of llava.utils.cli_main).
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

import torch

from llava.devices import resolve_device
from llava.numeric import number_type
from llava.outputs import MARKER, guard_outputs, write_text
from llava.utils import UserError

from ..argtypes import non_negative_int, positive_int
from . import energy as energy_mod
from .data import InputError, list_images, load_labelled, open_image, resample_indices, split_indices
from .learnability import DEFAULT_BETA, DEFAULT_CUTOFFS, DEFAULT_GAMMA, GRAM_SCALES, crossover_scan, format_calibration_table, summarize_calibration
from .readability import DEFAULT_LAMBDA, DEFAULT_PROBE_DIM, channel_projection, probe_diagnostics
from .report import (
    calibration_summary,
    energy_summary,
    plot_crossover,
    plot_energy_curves,
    plot_energy_maps,
    plot_probe_curves,
    probe_summary,
    write_csv,
    write_json,
)
from .stats import DEFAULT_KEEP_GRAMS, MomentAccumulator, feature_batches, resampled_moments, token_moments
from .tower import load_tower

__all__ = ["diagnose_main", "calibrate_main", "run_energy", "run_probe", "run_calibrate"]

logger = logging.getLogger(__name__)

DEFAULT_BUDGETS = (1, 4, 9, 16, 25, 36, 49, 64)


#: A share of the labelled images (a validation or test split): above 0 and below 1 (1 itself is refused when splitting).
FRACTION = number_type(0, 1, lo_open=True)

def _add_common(p: argparse.ArgumentParser, out: str) -> None:
    p.add_argument("--vision-tower", "--vision_tower", required=True,
                   help="local CLIP/SigLIP tower folder, or a LLaVA checkpoint folder whose config.json names one in mm_vision_tower")
    p.add_argument("--images", required=True, help="image folder (searched recursively)")
    p.add_argument("--out", default=out, help="output folder (default %(default)s)")
    p.add_argument("--select-layer", "--select_layer", type=int, default=None,
                   help="hidden-state layer of the features (default: the checkpoint's mm_vision_select_layer, else -2)")
    p.add_argument("--batch-size", "--batch_size", type=positive_int, default=32, help="images per tower batch (default 32)")
    p.add_argument("--device", default="cpu", help="torch device for the tower (default cpu)")
    p.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"], help="tower dtype (default float32)")
    p.add_argument("--seed", type=non_negative_int, default=0, help="seed of sampling, splits and the random bases (default 0)")
    p.add_argument("--no-progress", "--no_progress", action="store_true", help="hide progress bars")


def _add_bases(p: argparse.ArgumentParser) -> None:
    p.add_argument("--bases", nargs="+", choices=list(energy_mod.ALL_BASES), default=list(energy_mod.ALL_BASES),
                   help="bases to compare (default: all; random = separable Q⊗Q, klt = oracle fitted to M)")


def build_diagnose_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="braco diagnose", description="Compressibility diagnostics of a vision tower "
                                     "(paper §3.2, App. A–B, G): energy retention and linear probes per basis.")
    sub = parser.add_subparsers(dest="what", required=True, metavar="{energy,probe}")
    e = sub.add_parser("energy", help="energy retention E(B;S) per basis, structured vs magnitude truncation, energy maps",
                       description="Energy retention E(B;S) = tr(P U M Uᵀ Pᵀ)/tr(M) (paper eq. unified_energy_retention) "
                                   "of spatial, DCT, Haar, random orthonormal and KLT bases, under structured (C x C block) "
                                   "and per-sample magnitude (top-K) truncation, with per-coefficient energy maps.")
    _add_common(e, "outputs/diagnose-energy")
    _add_bases(e)
    e.add_argument("--max-images", "--max_images", type=positive_int, default=1024,
                   help="at most this many images, a seeded sample without replacement (default 1024, the paper's n)")
    e.add_argument("--budgets", type=positive_int, nargs="+", default=None,
                   help=f"budgets K tabulated (default {' '.join(map(str, DEFAULT_BUDGETS))}, up to the grid's L); curves cover every K")
    e.add_argument("--magnitude-samples", "--magnitude_samples", type=non_negative_int, default=DEFAULT_KEEP_GRAMS,
                   help="per-sample token Grams kept for magnitude truncation, L²·4 bytes each (default %(default)s; 0 = skip)")
    p = sub.add_parser("probe", help="readability R, C = λE + (1−λ)R and linear-probe accuracy vs budget per basis",
                       description="Readability R(B;S) of a task direction fitted by a ridge probe on the training split "
                                   "(paper App. B), C = λE + (1−λ)R (eq. unified_C), and val/test accuracy of ridge probes "
                                   "on the retained coordinates of each basis and budget.")
    _add_common(p, "outputs/diagnose-probe")
    _add_bases(p)
    p.add_argument("--labels", default=None,
                   help="JSONL with {\"image\": path relative to --images, \"label\": ...} per line "
                        "(default: class sub-folders of --images)")
    p.add_argument("--max-images", "--max_images", type=positive_int, default=2000,
                   help="at most this many labelled images, a seeded sample (default %(default)s)")
    p.add_argument("--budgets", type=positive_int, nargs="+", default=None,
                   help=f"budgets K (default {' '.join(map(str, DEFAULT_BUDGETS))}, up to the grid's L)")
    p.add_argument("--probe-dim", "--probe_dim", type=non_negative_int, default=DEFAULT_PROBE_DIM,
                   help="channels kept per token by a seeded random orthonormal projection (default %(default)s; 0 = all)")
    p.add_argument("--val-fraction", "--val_fraction", type=FRACTION, default=0.2, help="validation share (default 0.2)")
    p.add_argument("--test-fraction", "--test_fraction", type=FRACTION, default=0.2, help="test share (default 0.2)")
    p.add_argument("--lambda", dest="lam", type=number_type(0, 1), default=DEFAULT_LAMBDA,
                   help="λ of C = λE + (1−λ)R, paper eq. unified_C; the paper gives no value (default %(default)s)")
    return parser


def build_calibrate_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="braco calibrate", description=(
        "Label-free coef/idct calibration (paper App. I and 'Functional rankings and cross-encoder calibration'): "
        "for each of --resamples seeded samples of --n images, scan C and report K_b*, the first K_b = C² where "
        "Δ_st/K_b² − βρ_C < 0 (idct preferred), as median (min–max)."))
    _add_common(p, "outputs/calibrate")
    p.add_argument("--n", type=positive_int, default=1024, help="images per resample, without replacement (paper: 1024)")
    p.add_argument("--resamples", type=positive_int, default=3, help="resamples, seeds seed..seed+r-1 (paper: 3, seeds 0/1/2)")
    p.add_argument("--cutoffs", type=positive_int, nargs="+", default=None,
                   help="cutoffs C to scan (paper: 2..16; default 2..min(16, N))")
    p.add_argument("--beta", type=number_type(), default=DEFAULT_BETA,
                   help="β of eq. unified_learn_obj; the paper gives no value (default %(default)s, see learnability.py)")
    p.add_argument("--gamma", type=number_type(), default=DEFAULT_GAMMA,
                   help="γ of eq. app_unified_stat_obj, 0 < γ < 1 (γ = 1 makes L_st rotation invariant); the paper gives "
                        "no value (default %(default)s)")
    p.add_argument("--gram-scale", "--gram_scale", choices=list(GRAM_SCALES), default="energy",
                   help="energy: Ḡ from M/tr(M), so β, γ are dimensionless (default); raw: Ḡ from M in feature units")
    p.add_argument("--encoder-name", "--encoder_name", default=None, help="row label of the table (default: tower folder)")
    p.add_argument("--dataset-name", "--dataset_name", default=None, help="column label of the table (default: images folder)")
    return p


# --------------------------------------------------------------------------------------------------- helpers


def _setup(args):
    paths = list_images(args.images)
    tower = load_tower(args.vision_tower, select_layer=args.select_layer, device=args.device, dtype=args.dtype)
    tokens = tower.encode([open_image(paths[0])]).shape[1]  # the grid, before the long pass
    return tower, paths, tokens


def _make_out(out: Path) -> None:
    """Create ``--out`` (checked up front by :func:`_run`) and mark it as ours, so that a re-run may write there."""
    out.mkdir(parents=True, exist_ok=True)
    write_text(out / MARKER, "written by braco diagnose / calibrate; a re-run may replace its files\n")


def _budgets(requested, tokens: int) -> list[int]:
    if requested is None:
        return [k for k in DEFAULT_BUDGETS if k <= tokens]
    bad = [k for k in requested if k > tokens]
    if bad:
        grid = round(tokens ** 0.5)
        raise InputError(f"budget K={bad[0]} is larger than the {grid}x{grid} = {tokens} tokens of this tower; K must be at most {tokens}")
    return sorted(set(requested))


def _used_setting(flag: str, requested, used, reason: str):
    """``used``; when it is not what ``flag`` asked for, a warning naming both and why, so that the record written
    (which holds ``used``) is never read as the request."""
    if used != requested:
        logger.warning("%s %s but %s: using %s (recorded as such)", flag, requested, reason, used)
    return used


def _subsample(paths: list, limit: int, seed: int) -> list:
    if len(paths) <= limit:
        return paths
    return [paths[i] for i in resample_indices(len(paths), limit, 1, seed)[0]]


# ---------------------------------------------------------------------------------------------------- energy


def run_energy(args) -> dict:
    tower, paths, tokens = _setup(args)
    budgets = _budgets(args.budgets, tokens)
    paths = _subsample(paths, args.max_images, args.seed)
    stats = token_moments(tower, paths, batch_size=args.batch_size, keep_grams=max(args.magnitude_samples, 0),
                          progress=not args.no_progress)
    result = energy_mod.energy_diagnostics(stats.m, stats.grid, bases=args.bases, grams=stats.grams, seed=args.seed)
    out = Path(args.out)
    _make_out(out)
    n = stats.grid
    title = f"{tower.name}: {n}x{n} tokens, {stats.count} images"
    table = result.at(budgets)
    curves = [{"basis": b, "truncation": rule, "K": k + 1, "energy": float(v)}
              for rule, group in (("structured", result.structured), ("magnitude", result.magnitude))
              for b, curve in group.items() for k, v in enumerate(curve)]
    payload = {"tower": str(args.vision_tower), "images": str(args.images), "count": stats.count, "grid": n,
               "dim": stats.dim, "select_layer": tower.select_layer, "budgets": budgets,
               "magnitude_samples": result.magnitude_samples, "coherence": result.coherence, "table": table,
               "structured": result.structured, "magnitude": result.magnitude, "maps": result.maps}
    write_json(out / "energy.json", payload)
    write_csv(out / "energy_table.csv", table)
    write_csv(out / "energy_curves.csv", curves)
    plot_energy_curves(out / "energy_curves.png", result.structured, result.magnitude, max_k=max(budgets), title=title)
    squares = [round(k**0.5) for k in budgets if round(k**0.5) ** 2 == k]
    plot_energy_maps(out / "energy_maps.png", result.maps, blocks=[c for c in squares if 1 < c < n][:3], title=title)
    print(energy_summary(result, budgets, title))
    print(f"written: {', '.join(p.name for p in sorted(out.glob('energy*')))} in {out}")
    return payload


# ----------------------------------------------------------------------------------------------------- probe


def run_probe(args) -> dict:
    labelled = load_labelled(args.images, args.labels)
    tower = load_tower(args.vision_tower, select_layer=args.select_layer, device=args.device, dtype=args.dtype)
    keep = list(range(len(labelled.paths)))
    if len(keep) > args.max_images:
        keep = resample_indices(len(keep), args.max_images, 1, args.seed)[0].tolist()
    paths = [labelled.paths[i] for i in keep]
    labels = labelled.labels[keep]
    tokens = tower.encode([open_image(paths[0])]).shape[1]
    budgets = _budgets(args.budgets, tokens)
    splits = split_indices(labels, args.val_fraction, args.test_fraction, seed=args.seed)
    is_train = torch.zeros(len(paths), dtype=torch.bool)
    is_train[torch.from_numpy(splits["train"])] = True
    acc, feats, proj = MomentAccumulator(), [], None
    for start, x in feature_batches(tower, paths, args.batch_size, desc="probe features", progress=not args.no_progress):
        mask = is_train[start:start + x.shape[0]]
        if mask.any():
            acc.update(x[mask])
        if start == 0:
            proj = channel_projection(x.shape[-1], args.probe_dim, seed=args.seed)
        feats.append(x if proj is None else x @ proj)
    stats = acc.result()
    kept = feats[0].shape[-1]
    probe_dim = _used_setting("--probe-dim", args.probe_dim or kept, kept, f"the tower's features have {stats.dim} channels")
    result = probe_diagnostics(torch.cat(feats), labels, splits, stats.m, stats.grid, bases=args.bases, budgets=budgets,
                               lam=args.lam, seed=args.seed)
    out = Path(args.out)
    _make_out(out)
    n = stats.grid
    title = f"{tower.name}: {n}x{n} tokens, {len(paths)} images, {len(labelled.classes)} classes"
    payload = {"tower": str(args.vision_tower), "images": str(args.images), "labels": args.labels,
               "classes": labelled.classes, "grid": n, "dim": stats.dim, "probe_dim": probe_dim,
               "select_layer": tower.select_layer, "splits": {k: len(v) for k, v in splits.items()}, "lambda": args.lam,
               "direction_ridge_alpha": result.direction_alpha, "all_tokens": result.full, "rows": result.rows}
    write_json(out / "probe.json", payload)
    write_csv(out / "probe.csv", result.rows)
    plot_probe_curves(out / "probe_curves.png", result, title=title)
    print(probe_summary(result, title + "; splits " + ", ".join(f"{k} {len(v)}" for k, v in splits.items())))
    print(f"written: probe.json, probe.csv, probe_curves.png in {out}")
    return payload


# ------------------------------------------------------------------------------------------------- calibrate


def run_calibrate(args) -> dict:
    if not 0 < args.gamma < 1:
        logger.warning("gamma=%s is outside (0, 1): at 1 L_st cannot tell organisations apart, above 1 it rewards dense mixes", args.gamma)
    tower, paths, tokens = _setup(args)
    grid = round(tokens ** 0.5)
    if args.cutoffs is None:
        cutoffs = [c for c in DEFAULT_CUTOFFS if c <= grid]
    else:
        bad = [c for c in args.cutoffs if c > grid]
        if bad:
            raise InputError(f"cutoff C={bad[0]} is larger than the {grid}x{grid} token grid of this tower; C must be at most {grid}")
        cutoffs = sorted(set(args.cutoffs))
    if not cutoffs:
        raise InputError(f"no cutoff to scan: the {grid}x{grid} grid admits only C=1; pass --cutoffs 1")
    n = _used_setting("--n", args.n, min(args.n, len(paths)), f"only {len(paths)} images under {str(args.images)!r}")
    if n == len(paths) and args.resamples > 1:
        logger.warning("every one of the %d resamples is the whole folder of %d images, so the range is degenerate",
                       args.resamples, n)
    index_sets = resample_indices(len(paths), n, args.resamples, seed=args.seed)
    stats = resampled_moments(tower, paths, index_sets, batch_size=args.batch_size, progress=not args.no_progress)
    kwargs = {"beta": args.beta, "gamma": args.gamma, "scale": args.gram_scale, "seed": args.seed}
    scans = [crossover_scan(s.m, cutoffs, **kwargs) for s in stats]
    summary = summarize_calibration(scans)
    encoder = args.encoder_name or f"{tower.name} ({grid}x{grid})"
    dataset = args.dataset_name or Path(args.images).resolve().name
    table = format_calibration_table([(encoder, dataset, summary)])
    out = Path(args.out)
    _make_out(out)
    rows = [{"resample": r, "seed": args.seed + r, "images": s.count, **row.as_row()}
            for r, (s, scan) in enumerate(zip(stats, scans)) for row in scan]
    payload = {"tower": str(args.vision_tower), "images": str(args.images), "encoder": encoder, "dataset": dataset,
               "grid": grid, "select_layer": tower.select_layer, "n": n, "n_requested": args.n, "resamples": args.resamples,
               "seeds": [args.seed + r for r in range(args.resamples)], "images_per_resample": [s.count for s in stats],
               "beta": args.beta, "gamma": args.gamma, "gram_scale": args.gram_scale, "cutoffs": cutoffs,
               "summary": summary, "table": table, "scan": rows}
    write_json(out / "calibration.json", payload)
    write_csv(out / "calibration_scan.csv", rows)
    write_csv(out / "calibration_budgets.csv", summary["per_budget"])
    write_text(out / "calibration_table.md", table + "\n")
    plot_crossover(out / "crossover.png", scans, summary["k_b_star"], beta=args.beta, title=f"{encoder} on {dataset}")
    print(f"coordinate calibration: {len(stats)} resamples of {stats[0].count} images, β={args.beta:g}, γ={args.gamma:g}, "
          f"Gram scale {args.gram_scale}")
    print(calibration_summary(summary))
    print(table)
    print(f"written: calibration.json, calibration_scan.csv, calibration_budgets.csv, calibration_table.md, crossover.png in {out}")
    return payload


# ------------------------------------------------------------------------------------------------------ mains


def _run(prog: str, fn, args) -> dict:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        # Up front, before the tower loads: a --device this machine lacks, an --out that is a file, a non-empty
        # folder we did not write, or a place that cannot be written.
        args.device = resolve_device(args.device)
        guard_outputs(inputs={"--vision-tower": args.vision_tower, "--images": args.images,
                              "--labels": getattr(args, "labels", None)}, folders={"--out": args.out})
        return fn(args)
    except (InputError, UserError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None


def diagnose_main(argv=None) -> dict:
    args = build_diagnose_parser().parse_args(argv)
    fn = run_energy if args.what == "energy" else run_probe
    return _run(f"braco diagnose {args.what}", fn, args)


def calibrate_main(argv=None) -> dict:
    args = build_calibrate_parser().parse_args(argv)
    return _run("braco calibrate", run_calibrate, args)
