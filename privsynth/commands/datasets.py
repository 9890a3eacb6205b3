"""``privsynth datasets``: make, list, show, import, export, split and delete local (Minari) datasets.

Why this module is long: seven leaves of one verb share their parser helpers and one-line error handling; the
import leaf carries the own-data options (schema, layouts, impute) of issue 39.

Thin wrappers over :mod:`privsynth.data.pointmaze`, :mod:`privsynth.data.locomotion.generate`,
:mod:`privsynth.data.split` and :mod:`privsynth.data.minari_io`; every user error is a
:class:`~privsynth.errors.PrivsynthError` (one line, exit status 2).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from privsynth.data.units import DATA_UNITS
from privsynth.commands._dataset_export import export_command
from privsynth.commands._surface import example, hidden_option
from privsynth.errors import InvalidData, PrivsynthError

if TYPE_CHECKING:
    from privsynth.data.dataset import OfflineDataset


def register(subparsers: Any) -> None:
    p = subparsers.add_parser("datasets", help="make, list and inspect local offline-RL datasets (Minari store)")
    p.set_defaults(func=lambda args: _help(p))
    sub = p.add_subparsers(dest="datasets_command", metavar="ACTION")

    make = sub.add_parser("make", help="generate a dataset")
    make.set_defaults(func=lambda args: _help(make))
    make_sub = make.add_subparsers(dest="generator", metavar="GENERATOR")
    pm = make_sub.add_parser(
        "pointmaze", help="PointMaze, made as D4RL maze2d (waypoint controller + action noise, one long run)",
        epilog=example("datasets make pointmaze --maze umaze --steps 100000"))
    pm.add_argument("--maze", default="umaze", metavar="MAZE", help="open | umaze | medium | large (default umaze)")
    pm.add_argument("--steps", type=int, default=100_000, help="environment steps to collect (default 100000)")
    pm.add_argument("--seed", type=int, default=0, help="seed of the environment reset, action noise and waypoints")
    pm.add_argument("--dense", action="store_true", help="dense reward exp(-distance) instead of sparse 0/1")
    pm.add_argument("--action-noise", type=float, default=0.5, help="std of Gaussian action noise (default 0.5)")
    pm.add_argument("--ref-episodes", type=int, default=100, help="episodes per reference policy (default 100)")
    pm.add_argument("--name", default=None, help="dataset id (default privsynth/pointmaze-<maze>[-dense]-v0)")
    pm.add_argument("--overwrite", action="store_true", help="replace an existing dataset with this id")
    pm.add_argument("--quiet", action="store_true", help="no progress bar")
    pm.set_defaults(func=_make_pointmaze)

    loco = make_sub.add_parser(
        "locomotion", help="MuJoCo HalfCheetah / Walker2d / Hopper, made as D4RL from the shipped SAC policies",
        epilog=example("datasets make locomotion --env hopper --kind medium"))
    loco.add_argument("--env", default="halfcheetah", metavar="ENV",
                      help="halfcheetah | walker2d | hopper (default halfcheetah)")
    loco.add_argument(
        "--kind", default="medium", help="random | medium | expert | medium-replay | medium-expert (default medium)"
    )
    loco.add_argument("--steps", type=int, default=None, help="transitions (default 100000; medium-replay: as trained)")
    loco.add_argument("--seed", type=int, default=0, help="seed of the environment and the policy's sampling")
    loco.add_argument("--name", default=None, help="dataset id (default privsynth/<env>-<kind>-v0)")
    loco.add_argument("--overwrite", action="store_true", help="replace an existing dataset with this id")
    loco.add_argument("--quiet", action="store_true", help="no progress bar")
    loco.set_defaults(func=_make_locomotion)

    ls = sub.add_parser("list", help="list local datasets", epilog=example("datasets list --json"))
    ls.add_argument("--json", action="store_true", help="print JSON")
    ls.set_defaults(func=_list)

    show = sub.add_parser("show", help="episodes, steps, dims, reference scores and privacy card of a dataset",
                          epilog=example("datasets show privsynth/pointmaze-umaze-v0"))
    show.add_argument("dataset_id", nargs="?", metavar="ID")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.set_defaults(func=_show)

    imp = sub.add_parser(
        "import", help="import your data: .csv / .parquet (column layout in docs/datasets.md) or a D4RL-style .npz",
        epilog=example("datasets import logs.csv --name hospital/icu-v0 --env-id Pendulum-v1"))
    imp.add_argument("path", nargs="?", metavar="FILE", help=".csv, .parquet or .npz file")
    imp.add_argument("--name", default=None, help="dataset id (default: the file name)")
    imp.add_argument("--env-id", default=None,
                     help="gymnasium id of the environment the data came from; dims are checked against its spaces")
    imp.add_argument("--env-kwargs", default=None, help="JSON object of keyword arguments of the environment")
    imp.add_argument("--obs-keys", default=None,
                     help="for Dict observation spaces: comma-separated keys the observation columns hold, in order")
    imp.add_argument("--obs-cols", default=None, help="comma-separated observation columns (default obs_0, obs_1, ...)")
    imp.add_argument("--act-cols", default=None, help="comma-separated action columns (default act_0, act_1, ...)")
    imp.add_argument("--next-obs-cols", default=None,
                     help="comma-separated next-observation columns (default next_obs_0, ...; absent: episode order)")
    imp.add_argument("--map", action="append", default=[], metavar="ROLE=COLUMN",
                     help="rename a column role: reward, terminal, truncated or episode_id (repeatable)")
    imp.add_argument("--schema", default=None, metavar="S.yaml",
                     help="your schema (YAML or JSON: episode_id, order, observations, actions, reward, terminal; "
                          "docs/own_data.md): the table is read in its own column names, kinds and bounds")
    imp.add_argument("--impute", choices=("ffill",), default=None,
                     help="with --schema: fill missing observation cells with the episode's previous value (its "
                          "next one at an episode's start); default: a missing value is refused")
    imp.add_argument("--ref-min", type=float, default=None, help="reference return of a random policy (public)")
    imp.add_argument("--ref-max", type=float, default=None, help="reference return of an expert policy (public)")
    imp.add_argument("--mark-public", dest="public", action="store_true", help="mark the data public (default: sensitive)")
    hidden_option(imp, "--public", dest="public", action="store_true")
    imp.add_argument("--overwrite", action="store_true", help="replace an existing dataset with this id")
    imp.set_defaults(func=_import)

    exp = sub.add_parser("export", help="write a dataset as .csv / .parquet (your schema's columns, one row per step), "
                                        "a D4RL-style .npz or a d3rlpy dataset file",
                         epilog=example("datasets export privsynth/umaze-synthetic-v0 umaze.npz"))
    exp.add_argument("dataset_id", nargs="?", metavar="ID", help="local dataset id")
    exp.add_argument("path", nargs="?", metavar="FILE",
                     help="output file (npz: '.npz' is appended when FILE does not end in it; d3rlpy: e.g. .h5)")
    exp.add_argument("--format", choices=("npz", "d3rlpy", "csv", "parquet"), default=None,
                     help="csv / parquet when FILE ends in .csv / .parquet (default: npz). csv / parquet: one row per step "
                          "with an episode and a step column, in the schema's column names and values; npz: D4RL-style arrays (observations, actions, rewards, next_observations, terminals, "
                          "timeouts, episode_ids); every Minari episode ends in a terminal or a timeout, so "
                          "splitting on terminals|timeouts gives the Minari episodes; d3rlpy: an MDPDataset file "
                          "holding exactly the dataset's transitions (load with "
                          "d3rlpy.dataset.ReplayBuffer.load(open(FILE, 'rb'), d3rlpy.dataset.InfiniteBuffer()))")
    exp.add_argument("--with-next", action="store_true",
                     help="csv / parquet: also write the next-state columns (next_<name>)")
    exp.add_argument("--overwrite", action="store_true", help="replace an existing output file")
    exp.set_defaults(func=_export)

    sp = sub.add_parser("split", help="split a dataset at random into members and non-members (for audits)",
                        epilog=example("datasets split privsynth/pointmaze-umaze-v0 --unit trajectory",
                                       "--members privsynth/umaze-members-v0 --non-members privsynth/umaze-nonmembers-v0"))
    sp.add_argument("dataset_id", nargs="?", metavar="ID")
    sp.add_argument("--fraction", type=float, default=0.8, help="share of the units that are members (default 0.8)")
    sp.add_argument("--unit", choices=DATA_UNITS, default="trajectory", metavar="UNIT",
                    help="unit drawn at random: transition | trajectory (an episode)")
    hidden_option(sp, "--by", dest="by")
    sp.add_argument("--seed", type=int, default=0, help="seed of the random split (not private; no privacy noise)")
    sp.add_argument("--members", default=None, metavar="OUT_ID", help="id of the members part")
    sp.add_argument("--non-members", default=None, metavar="OUT_ID", help="id of the non-members part")
    sp.add_argument("--overwrite", action="store_true", help="replace existing output datasets")
    sp.set_defaults(func=_split)

    rm = sub.add_parser("delete", help="delete a local dataset", epilog=example("datasets delete privsynth/old-v0"))
    rm.add_argument("dataset_id", nargs="?", metavar="ID")
    rm.set_defaults(func=_delete)


def _help(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _need_id(args: argparse.Namespace) -> str:
    if not getattr(args, "dataset_id", None):
        raise PrivsynthError("a dataset id is required (see `privsynth datasets list`)")
    return args.dataset_id


def _fmt_score(x: Any) -> str:
    return "-" if x is None else f"{x:.2f}"


# ---------------------------------------------------------------------------------------------------- make
def _generate_and_write(args: argparse.Namespace, cfg: Any,
                        generate: Callable[..., OfflineDataset]) -> tuple[OfflineDataset, str]:
    """Resolve the id (refusing to overwrite unless asked), generate, write; prints the path and the size line."""
    from privsynth.data import minari_io

    dataset_id = minari_io.resolve_id(args.name or cfg.dataset_name, for_write=True)
    if minari_io.dataset_exists(dataset_id) and not args.overwrite:
        raise PrivsynthError(f"dataset '{dataset_id}' already exists; pass --overwrite to replace it")
    cfg.name = dataset_id
    t0 = time.perf_counter()
    ds = generate(cfg, progress=not args.quiet)
    t1 = time.perf_counter()
    path = minari_io.write_dataset(ds, dataset_id, overwrite=args.overwrite)
    s = ds.summary()
    print(f"wrote {dataset_id} -> {path}")
    has_refs = ds.info.ref_min_score is not None and ds.info.ref_max_score is not None
    normalised = f" (normalised {ds.normalized_score(s['episode_return_mean']):.1f})" if has_refs else ""
    print(f"  {s['episodes']} episodes, {s['transitions']} transitions, obs {s['obs_dim']} / act {s['act_dim']} dims, "
          f"mean episode length {s['episode_length_mean']:.1f}, mean return {s['episode_return_mean']:.3f}{normalised}")
    timing = f"generated in {t1 - t0:.1f} s, written in {time.perf_counter() - t1:.1f} s"
    return ds, timing


def _make_pointmaze(args: argparse.Namespace) -> int:
    from privsynth.data.pointmaze import PointMazeConfig, generate_pointmaze

    cfg = PointMazeConfig(maze=args.maze, steps=args.steps, seed=args.seed, dense=args.dense,
                          action_noise=args.action_noise, ref_episodes=args.ref_episodes)
    ds, timing = _generate_and_write(args, cfg, generate_pointmaze)
    print(f"  reference scores on {ds.info.env_id} (fixed goal, {ds.info.env_kwargs['max_episode_steps']} steps): "
          f"random {_fmt_score(ds.info.ref_min_score)}, expert {_fmt_score(ds.info.ref_max_score)}")
    print(f"  {timing} (collection includes the reference scores)")
    return 0


def _make_locomotion(args: argparse.Namespace) -> int:
    from privsynth.data.locomotion.generate import LocomotionConfig, generate_locomotion

    cfg = LocomotionConfig(env=args.env, kind=args.kind, steps=args.steps, seed=args.seed)
    ds, timing = _generate_and_write(args, cfg, generate_locomotion)
    print(f"  reference scores on {ds.info.env_id}: random {_fmt_score(ds.info.ref_min_score)}, "
          f"expert {_fmt_score(ds.info.ref_max_score)}")
    print(f"  {timing}")
    return 0


# ------------------------------------------------------------------------------------------- list / show
def _list(args: argparse.Namespace) -> int:
    from privsynth.data import minari_io

    rows, unreadable = [], []
    for i in minari_io.list_datasets():
        try:  # one damaged folder in the store does not hide the others
            rows.append(minari_io.describe(i))
        except PrivsynthError as exc:
            unreadable.append({"id": i, "error": str(exc)})
    if args.json:
        print(json.dumps(rows + unreadable, indent=2))
        return 0
    for bad in unreadable:
        print(f"privsynth: warning: {bad['error']}", file=sys.stderr)
    if not rows:
        store = os.environ.get("MINARI_DATASETS_PATH")
        where = f" in {store}" + (" (the folder does not exist)" if store and not Path(store).exists() else "")
        print(f"no local datasets{where} (privsynth datasets make pointmaze --maze umaze)")
        return 0
    header = f"{'ID':<44} {'EPISODES':>9} {'STEPS':>10} {'SENSITIVE':>9} {'EPSILON':>8}  ENV"
    print(header)
    for r in rows:
        eps = "-" if r["epsilon"] is None else f"{r['epsilon']:g}"
        print(
            f"{r['id']:<44} {r['episodes']!s:>9} {r['transitions']!s:>10} {('yes' if r['sensitive'] else 'no'):>9} "
            f"{eps:>8}  {r['env_id'] or '-'}"
        )
    return 0


def _show(args: argparse.Namespace) -> int:
    from privsynth.data import minari_io

    dataset_id = _need_id(args)
    ds = minari_io.load_dataset(dataset_id)
    facts = minari_io.describe(dataset_id)
    summary = ds.summary()
    out = {
        "id": facts["id"],
        "path": facts["path"],
        "storage_scheme": facts["scheme"],
        **summary,
        "minari_episodes": facts["episodes"],
        # per Minari episode, as the episode count above (summary's episode_return_mean is per episode id)
        "return_per_minari_episode": float(ds.rewards.sum()) / facts["episodes"] if facts["episodes"] else None,
        "obs_keys": ds.info.obs_keys,
        "env_kwargs": ds.info.env_kwargs,
        "privacy_card": ds.info.privacy_card,
        "schema": ds.info.schema,
        "extra": ds.info.extra,
    }
    if args.json:
        print(json.dumps(out, indent=2, default=str))
        return 0
    print(f"{out['id']}  ({out['path']})")
    print(f"  name:        {summary['name']}")
    print(f"  environment: {summary['env_id'] or '-'}")
    eps = facts["episodes"]
    print(f"  episodes:    {eps} Minari episodes (mean length {summary['transitions'] / max(eps or 1, 1):.1f})")
    print(f"  transitions: {summary['transitions']}")
    print(f"  dims:        obs {summary['obs_dim']}, action {summary['act_dim']}")
    print(
        f"  return:      mean {out['return_per_minari_episode'] or 0.0:.3f} per Minari episode; "
        f"terminal rate {summary['terminal_rate']:.3f}"
    )
    lo, hi = summary["ref_min_score"], summary["ref_max_score"]
    print(f"  reference:   random {_fmt_score(lo)}, expert {_fmt_score(hi)}")
    print(f"  sensitive:   {'yes' if summary['sensitive'] else 'no'}")
    card = ds.info.privacy_card
    print("  privacy:     " + minari_io.card_summary(card))
    if card is not None:
        print(f"               (full card: privsynth privacy card {out['id']})")
    return 0


# ----------------------------------------------------------------------------------------- import / export
def _csv(text: str | None) -> list[str] | None:
    items = [t.strip() for t in (text or "").split(",") if t.strip()]
    return items or None


def _import(args: argparse.Namespace) -> int:
    from privsynth.data import minari_io

    if not args.path:
        raise PrivsynthError("a .csv, .parquet or .npz file to import is required")
    path = Path(args.path)
    if not path.is_file():
        raise PrivsynthError(f"no such file: {path}")
    _check_refs(args.ref_min, args.ref_max)
    if path.suffix.lower() == ".npz":  # column options mean nothing for D4RL-style arrays: refused, not ignored
        given = [flag for flag, v in (("--obs-cols", args.obs_cols), ("--act-cols", args.act_cols),
                                      ("--next-obs-cols", args.next_obs_cols), ("--map", args.map)) if v]
        if given:
            raise InvalidData(f"{', '.join(given)} name(s) table columns; a .npz file holds D4RL-style arrays "
                              "(observations, actions, ...) and takes none")
    schema = None
    if args.schema:  # read and checked before any data
        given = [flag for flag, v in (("--obs-cols", args.obs_cols), ("--act-cols", args.act_cols),
                                      ("--next-obs-cols", args.next_obs_cols), ("--map", args.map),
                                      ("--env-id", args.env_id), ("--obs-keys", args.obs_keys)) if v]
        if given:
            raise InvalidData(f"{', '.join(given)} cannot go with --schema: the schema declares the columns")
        if path.suffix.lower() == ".npz":
            raise InvalidData("--schema reads a table (.csv or .parquet), not a .npz file")
        from privsynth.data.schema import load_schema

        schema = load_schema(args.schema)
    elif args.impute:
        raise InvalidData("--impute needs --schema (it fills the observation columns the schema declares)")
    if args.env_kwargs and not args.env_id:
        raise InvalidData("--env-kwargs configures the environment of --env-id; give --env-id too")
    name = args.name or path.stem
    dataset_id = minari_io.resolve_id(name, for_write=True)
    if minari_io.dataset_exists(dataset_id) and not args.overwrite:  # before reading any data
        raise PrivsynthError(f"dataset '{dataset_id}' already exists; pass --overwrite to replace it")
    if args.env_id:  # a mistyped id would silently drop every check against the environment's spaces
        from privsynth.data.minari_spaces import check_env_id

        check_env_id(args.env_id)
    try:
        env_kwargs = json.loads(args.env_kwargs) if args.env_kwargs else {}
    except json.JSONDecodeError as exc:
        raise InvalidData(f"--env-kwargs is not a JSON object: {exc.msg}") from None
    if not isinstance(env_kwargs, dict):
        raise InvalidData("--env-kwargs must be a JSON object")
    columns = {}
    for item in args.map:
        role, sep, col = item.partition("=")
        if not sep or not role or not col:
            raise InvalidData(f"--map takes ROLE=COLUMN, got '{item}'")
        columns[role.strip()] = col.strip()
    common = dict(name=dataset_id, env_id=args.env_id, env_kwargs=env_kwargs, obs_keys=_csv(args.obs_keys),
                  ref_min_score=args.ref_min, ref_max_score=args.ref_max, sensitive=not args.public)
    if path.suffix.lower() == ".npz":
        ds = _read_npz(path, **common)
    else:
        from privsynth.data.tabular import from_pandas, read_table

        ds = from_pandas(read_table(path), schema=schema, impute=args.impute, **common) if schema is not None else \
            from_pandas(read_table(path), columns=columns, observation_columns=_csv(args.obs_cols),
                         action_columns=_csv(args.act_cols), next_observation_columns=_csv(args.next_obs_cols),
                         **common)
    ds.info.extra["imported_from"] = str(path)
    out = minari_io.write_dataset(ds, dataset_id, overwrite=args.overwrite)
    kind = "public" if args.public else "sensitive"
    dropped = ds.info.extra.get("dropped_final_rows") or 0
    note = f"; {dropped} final rows only closed their episodes (no next_obs columns)" if dropped else ""
    if schema is not None:
        note = f"; schema {args.schema}, {ds.info.extra['imported_layout']} layout, " \
               f"{int(ds.terminals.sum())} terminal transitions"
    print(f"imported {ds.n_transitions} transitions in {ds.n_episodes} episodes ({kind}, obs {ds.obs_dim} / act "
          f"{ds.act_dim} dims, env {ds.info.env_id or '-'}{note}) -> {out}")
    return 0


def _export(args: argparse.Namespace) -> int:
    """``datasets export``: csv / parquet here (the holder's own columns); npz and d3rlpy in
    :func:`~privsynth.commands._dataset_export.export_command`."""
    if args.format is None:
        suffix = Path(args.path or "").suffix.lower()
        args.format = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}.get(suffix, "npz")
    if args.format not in ("csv", "parquet"):
        if args.with_next:
            raise InvalidData("--with-next applies to csv and parquet exports")
        return export_command(args)
    from privsynth.commands._dataset_export import _export_path, _write_atomic
    from privsynth.data import minari_io
    from privsynth.data.schema import export_frame

    dataset_id = _need_id(args)
    if not args.path:
        raise PrivsynthError("an output file path is required")
    out = _export_path(args.path, args.format, args.overwrite)
    if args.format == "parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise InvalidData("parquet export needs pyarrow (pip install 'privsynth[parquet]')") from None
    ds = minari_io.load_dataset(dataset_id)
    df = export_frame(ds, with_next=args.with_next)
    if args.format == "csv":
        _write_atomic(out, lambda f: f.write(df.to_csv(index=False, float_format="%.7g").encode("utf-8")))
    else:
        _write_atomic(out, lambda f: df.to_parquet(f, index=False))
    names = "the schema's column names" if ds.info.schema else "obs_i / act_i columns (no schema)"
    print(f"exported {ds.n_transitions} transitions of {minari_io.resolve_id(dataset_id)} in "
          f"{len(np.unique(ds.episode_ids))} episodes ({names}, one row per step) -> {out}")
    return 0


def _check_refs(lo: float | None, hi: float | None) -> None:
    """Reference returns must be finite, and the expert's above the random policy's (else scores flip or divide by 0)."""
    for flag, v in (("--ref-min", lo), ("--ref-max", hi)):
        if v is not None and not np.isfinite(v):
            raise InvalidData(f"{flag} must be a finite return, got {v}")
    if lo is not None and hi is not None and not hi > lo:
        raise InvalidData(f"--ref-max ({hi:g}, expert) must exceed --ref-min ({lo:g}, random policy)")


def _read_npz(path: Path, **common: Any) -> OfflineDataset:
    from privsynth.data.d4rl_arrays import D4RL_KEYS, from_d4rl_arrays
    from privsynth.data.dataset import DatasetInfo
    from privsynth.data.minari_io import check_env_spaces, env_spaces

    from privsynth.data.tabular import read_npz

    data = read_npz(path)
    missing = [k for k in D4RL_KEYS if k not in data]
    if missing:
        raise InvalidData(f"{path} lacks the arrays {', '.join(missing)}")
    n = len(np.asarray(data["rewards"]).reshape(-1))
    if n == 0:
        raise InvalidData(f"{path} holds no transitions (empty episodes)")
    info = DatasetInfo(**common)
    ds = from_d4rl_arrays(data, info)
    check_env_spaces(info, ds.obs_dim, ds.act_dim)
    spaces = env_spaces(info)
    if spaces is not None:
        info.action_low = np.asarray(spaces[1].low, dtype=np.float64).reshape(-1).tolist()
        info.action_high = np.asarray(spaces[1].high, dtype=np.float64).reshape(-1).tolist()
    return ds


def _split(args: argparse.Namespace) -> int:
    from privsynth.data.split import write_split

    source = _need_id(args)
    if not args.members or not args.non_members:
        raise PrivsynthError("--members OUT_ID and --non-members OUT_ID are required")
    from privsynth.data.split import split_for_unit

    args.by = getattr(args, "by", None) or split_for_unit(args.unit)  # --by: the previous release's spelling
    parts = write_split(source, args.members, args.non_members, fraction=args.fraction, by=args.by, seed=args.seed,
                        overwrite=args.overwrite)
    kind = "sensitive" if parts[0][1].info.sensitive else "public"
    print(f"split {parts[0][1].info.extra['split']['source']} by {args.by} at random (fraction {args.fraction:g}, "
          f"seed {args.seed}; {kind})")
    for role, (out, ds) in zip(("members", "non-members"), parts):
        print(f"  wrote {role} {out}: {ds.n_episodes} episodes, {ds.n_transitions} transitions")
    return 0


def _delete(args: argparse.Namespace) -> int:
    from privsynth.data import minari_io

    full = minari_io.delete_dataset(_need_id(args))
    print(f"deleted {full}", file=sys.stdout)
    return 0
