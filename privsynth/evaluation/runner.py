"""The benchmark runner: a declarative suite (YAML) -> a grid of cells -> per-cell JSON -> tables and plots.

A suite names datasets (generated or loaded once, cached under ``<results>/<suite>/data``) and a list of *stages*.
Each stage has a cell ``kind`` (a registered function, see :func:`register_cell`), a ``grid`` (the product of its
lists gives one cell per point, e.g. synthesizer x ε x agent x seed) and fixed ``params``. A stage may ``need`` an
earlier stage: each of its cells is linked to the upstream cell that agrees on the ``match`` keys (e.g. the agent
trained on the synthetic data of the same synthesizer and ε).

A cell is identified by a stable hash of its kind, params, the specs of the datasets it names and its upstream cell;
its result is stored as ``<results>/<suite>/cells/<id>.json`` and a re-run skips every cell whose file exists, so a
changed config re-runs only what it changes. Cells of one stage run in a process pool (``spawn``, one torch thread per
process) or, with ``executor="ray"``, as Ray tasks reserving the stage's ``cpus`` (:mod:`privsynth.evaluation.executors`,
docs/scale_out.md); failures are recorded next to the results and retried on the next run. After the stages, tables (pandas,
mean ± std over the seeds, markdown + HTML + CSV) and plots (matplotlib Agg) are written under
``<results>/<suite>/``. See ``docs/benchmarks.md``.

Written here rather than on a workflow engine (snakemake, hydra sweeps): the grid is small, must run on two CPU cores
without a daemon, and the cache-by-config-hash is a few lines; for grids that outgrow one machine, Ray only schedules
the cells (the planning, caching and tables stay here).
"""
from __future__ import annotations

import hashlib
import importlib
import itertools
import json
import math
import os
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

import numpy as np
import yaml

from privsynth.data.dataset import DatasetInfo, OfflineDataset
from privsynth.errors import InvalidData, PrivsynthError
from privsynth.evaluation.executors import init_worker

__all__ = [
    "Suite", "Stage", "Cell", "CellContext", "register_cell", "resolve_kind", "load_suite", "run_suite",
    "cell_id", "expand_stage", "collect_records", "write_tables", "write_plots", "save_dataset", "load_dataset_file",
    "register_dataset_source", "register_group", "deep_merge",
]

CellFn = Callable[[dict[str, Any], "CellContext"], dict[str, Any]]
GroupFn = Callable[[list[dict[str, Any]], list["CellContext"]], list[dict[str, Any]]]
_CELL_KINDS: dict[str, CellFn] = {}
_GROUP_KINDS: dict[str, tuple[Callable[[dict[str, Any]], Any], GroupFn]] = {}
_DATASET_SOURCES: dict[str, Callable[..., OfflineDataset]] = {}


# ---------------------------------------------------------------------------------------------------- registries
def register_cell(name: str) -> Callable[[CellFn], CellFn]:
    """Decorator: register ``fn(params, ctx) -> dict`` as the cell kind ``name``."""

    def deco(fn: CellFn) -> CellFn:
        _CELL_KINDS[name] = fn
        return fn

    return deco


def register_group(name: str, key: Callable[[dict[str, Any]], Any]) -> Callable[[GroupFn], GroupFn]:
    """Decorator: ``fn(params_list, ctx_list) -> results`` runs several cells of kind ``name`` as one job.

    Cells of one stage whose params give equal ``key(params)`` are compatible; the runner hands up to the stage's
    ``group`` of them to ``fn`` at once (e.g. agent cells trained as one batched model). If ``fn`` raises, each cell
    of the group runs alone, so one bad cell fails only itself.
    """

    def deco(fn: GroupFn) -> GroupFn:
        _GROUP_KINDS[name] = (key, fn)
        return fn

    return deco


def resolve_kind(name: str) -> CellFn:
    """A registered kind, or ``"package.module:function"`` imported on demand."""
    if name not in _CELL_KINDS:
        importlib.import_module("privsynth.evaluation.cells")  # the built-in kinds register on import
    if name in _CELL_KINDS:
        return _CELL_KINDS[name]
    if ":" in name:
        module, _, attr = name.partition(":")
        try:
            return getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise InvalidData(f"cannot import cell kind '{name}': {exc}") from exc
    raise InvalidData(f"unknown cell kind '{name}': registered kinds are {', '.join(sorted(_CELL_KINDS))}")


def register_dataset_source(name: str) -> Callable:
    """Decorator: register ``fn(**spec) -> OfflineDataset`` as a dataset source usable as ``{source: name}``."""

    def deco(fn):
        _DATASET_SOURCES[name] = fn
        return fn

    return deco


@register_cell("echo")
def _echo_cell(params: dict[str, Any], ctx: "CellContext") -> dict[str, Any]:
    """Trivial kind for testing the runner: returns its numeric params (optionally sleeps or fails)."""
    started = time.time()
    if params.get("sleep"):
        time.sleep(float(params["sleep"]))
    if params.get("fail"):
        raise RuntimeError("echo cell asked to fail")
    out = {k: v for k, v in params.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    out.update(pid=os.getpid(), started=started, ended=time.time())
    if ctx.upstream is not None:
        out["upstream_value"] = ctx.upstream["result"].get("value")
    return out


@register_dataset_source("random")
def _random_dataset(episodes: int = 4, length: int = 10, obs_dim: int = 2, act_dim: int = 1, seed: int = 0,
                    name: str = "random", **_) -> OfflineDataset:
    """Gaussian episodes, for runner tests and dry runs."""
    rng = np.random.default_rng(seed)
    n = episodes * length
    obs = rng.normal(size=(n, obs_dim)).astype(np.float32)
    timeouts = np.zeros(n, dtype=bool)
    timeouts[length - 1 :: length] = True
    return OfflineDataset(
        observations=obs, actions=rng.uniform(-1, 1, (n, act_dim)).astype(np.float32), rewards=rng.normal(size=n),
        next_observations=obs + 0.1, terminals=np.zeros(n, dtype=bool), timeouts=timeouts,
        episode_ids=np.repeat(np.arange(episodes), length), info=DatasetInfo(name=name, ref_min_score=0.0, ref_max_score=1.0),
    )


@register_dataset_source("pointmaze")
def _pointmaze_dataset(**spec) -> OfflineDataset:
    """``privsynth.data.pointmaze.generate_pointmaze`` with the spec's PointMazeConfig fields (maze, steps, seed, ...)."""
    from privsynth.data.pointmaze import PointMazeConfig, generate_pointmaze  # data helper

    return generate_pointmaze(PointMazeConfig(**spec), progress=False)


@register_dataset_source("locomotion")
def _locomotion_dataset(**spec) -> OfflineDataset:
    """``privsynth.data.locomotion.generate_locomotion`` from a shipped SAC policy (env, kind, steps, seed, ...)."""
    from privsynth.data.locomotion.generate import LocomotionConfig, generate_locomotion  # data helper

    return generate_locomotion(LocomotionConfig(**spec), progress=False)


@register_dataset_source("minari")
def _minari_dataset(dataset_id: str, **_) -> OfflineDataset:
    from privsynth.data import minari_io  # data helper

    return minari_io.load_dataset(dataset_id)


# ---------------------------------------------------------------------------------------------------- dataset cache
_ARRAYS = ("observations", "actions", "rewards", "next_observations", "terminals", "timeouts", "episode_ids")


def save_dataset(ds: OfflineDataset, path: Path) -> None:
    """Cache a dataset as one ``.npz`` (arrays + info JSON), written atomically. A cache, not a release format."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, info=np.array(json.dumps(ds.info.to_dict(), default=str)), **{k: getattr(ds, k) for k in _ARRAYS})
    os.replace(tmp, path)


def load_dataset_file(path: Path) -> OfflineDataset:
    with np.load(path, allow_pickle=False) as z:
        return OfflineDataset(**{k: z[k] for k in _ARRAYS}, info=DatasetInfo.from_dict(json.loads(str(z["info"]))))


# ---------------------------------------------------------------------------------------------------- suite model
@dataclass
class Stage:
    """One grid of cells of one kind."""

    kind: str
    grid: dict[str, list[Any]] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    needs: dict[str, Any] | None = None  # {"stage": NAME, "match": [keys], "where": {key: value}, "optional": bool}
    name: str = ""
    cases: list[dict[str, Any]] = field(default_factory=lambda: [{}])  # zipped settings, crossed with the grid
    cpus: float = 1.0  # CPUs one cell needs (the Ray executor reserves them; not part of the cell id)
    group: int = 4  # at most this many compatible cells run as one job (kinds with a group runner); 1: never group


@dataclass
class Suite:
    name: str
    stages: list[Stage]
    datasets: dict[str, dict[str, Any]] = field(default_factory=dict)
    tables: list[dict[str, Any]] = field(default_factory=list)
    plots: list[dict[str, Any]] = field(default_factory=list)
    workers: int = 1
    results_dir: Path = Path("evaluation/results")
    description: str = ""
    current: dict[str, list[dict[str, Any]]] | None = field(default=None, repr=False)  # records of the current plan

    @property
    def out(self) -> Path:
        return Path(self.results_dir) / self.name


@dataclass
class Cell:
    kind: str
    params: dict[str, Any]
    stage: str
    upstream: str | None = None  # id of the upstream cell
    datasets: dict[str, dict[str, Any]] = field(default_factory=dict)  # specs of the datasets the params name
    id: str = ""


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, default=str, separators=(",", ":"))


def cell_id(kind: str, params: dict[str, Any], upstream: str | None, datasets: dict[str, Any]) -> str:
    """Stable id: kind plus 12 hex digits of SHA-1 over the canonical JSON of everything that defines the cell."""
    digest = hashlib.sha1(_canonical({"kind": kind, "params": params, "upstream": upstream, "datasets": datasets}).encode())
    return f"{kind.split(':')[-1]}-{digest.hexdigest()[:12]}"


def load_suite(path: str | Path, results_dir: str | Path | None = None) -> Suite:
    """Parse and validate a suite YAML (see ``evaluation/suites/*.yaml``)."""
    path = Path(path)
    if not path.is_file():
        raise InvalidData(f"suite file '{path}' does not exist")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise InvalidData(f"suite file '{path}' is not valid YAML: {str(exc).splitlines()[0]}") from exc
    stages_raw = raw.get("stages")
    if not stages_raw:
        raise InvalidData(f"suite '{path.name}' has no stages")
    defaults = raw.get("defaults", {}) or {}
    stages = []
    for i, s in enumerate(stages_raw):
        if "kind" not in s:
            raise InvalidData(f"stage {i} of suite '{path.name}' has no kind")
        grid = s.get("grid", {}) or {}
        for k, v in grid.items():
            if not isinstance(v, list) or not v:
                raise InvalidData(f"grid entry '{k}' of stage '{s.get('name', s['kind'])}' must be a non-empty list")
        cases = s.get("cases") or [{}]
        if not isinstance(cases, list) or not all(isinstance(c, dict) for c in cases):
            raise InvalidData(f"'cases' of stage '{s.get('name', s['kind'])}' must be a list of mappings")
        stages.append(Stage(kind=s["kind"], grid=grid, params=deep_merge(defaults, s.get("params") or {}),
                            needs=s.get("needs"), name=s.get("name", s["kind"]), cases=cases,
                            cpus=float(s.get("cpus", 1)), group=max(1, int(s.get("group", 4)))))
    names = [s.name for s in stages]
    if len(set(names)) != len(names):
        raise InvalidData(f"stage names in suite '{path.name}' must be unique, got {names}")
    for s in stages:
        if s.needs and s.needs.get("stage") not in names[: names.index(s.name)]:
            raise InvalidData(f"stage '{s.name}' needs '{s.needs.get('stage')}', which is not an earlier stage")
    return Suite(
        name=raw.get("name", path.stem), stages=stages, datasets=raw.get("datasets", {}) or {},
        tables=raw.get("tables", []) or [], plots=raw.get("plots", []) or [], workers=int(raw.get("workers", 1)),
        results_dir=Path(results_dir or raw.get("results_dir", "evaluation/results")),
        description=raw.get("description", ""),
    )


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` on top of ``base``; nested mappings merge key by key, anything else is replaced."""
    out = dict(base)
    for k, v in over.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def expand_stage(stage: Stage) -> list[dict[str, Any]]:
    """Stage params, then each case, then each grid point merged on top (deep merge), in a stable order."""
    keys = list(stage.grid)
    return [deep_merge(deep_merge(stage.params, case), dict(zip(keys, combo)))
            for case in stage.cases for combo in itertools.product(*(stage.grid[k] for k in keys))]


def _dataset_names(obj: Any, known: dict[str, Any]) -> set[str]:
    if isinstance(obj, str):
        return {obj} if obj in known else set()
    if isinstance(obj, dict):
        return set().union(*(_dataset_names(v, known) for v in obj.values())) if obj else set()
    if isinstance(obj, list):
        return set().union(*(_dataset_names(v, known) for v in obj)) if obj else set()
    return set()


# ---------------------------------------------------------------------------------------------------- context
@dataclass
class CellContext:
    """What a cell function may use besides its params: datasets, its artifact folder, its upstream record."""

    suite_dir: Path
    cell_id: str
    datasets: dict[str, dict[str, Any]]
    upstream: dict[str, Any] | None = None

    @property
    def artifact_dir(self) -> Path:
        d = self.suite_dir / "artifacts" / self.cell_id
        d.mkdir(parents=True, exist_ok=True)
        return d

    @property
    def upstream_dir(self) -> Path:
        if self.upstream is None:
            raise InvalidData(f"cell {self.cell_id} has no upstream cell")
        return self.suite_dir / "artifacts" / self.upstream["id"]

    def dataset(self, name: str) -> OfflineDataset:
        """A suite dataset by name (prepared before the stages run)."""
        if name not in self.datasets:
            raise InvalidData(f"dataset '{name}' is not declared in the suite")
        return load_dataset_file(_dataset_path(self.suite_dir, name, self.datasets))


def _dataset_path(suite_dir: Path, name: str, specs: dict[str, Any]) -> Path:
    digest = hashlib.sha1(_canonical(_resolved_spec(name, specs)).encode()).hexdigest()[:10]
    return suite_dir / "data" / f"{name}-{digest}.npz"


def _resolved_spec(name: str, specs: dict[str, Any]) -> Any:
    """A dataset's spec with the specs of the datasets it derives from inlined (so the cache key covers them)."""
    spec = dict(specs[name])
    if "split_of" in spec:
        spec["split_of"] = _resolved_spec(spec["split_of"], specs)
    return spec


def split_transitions(ds: OfflineDataset, fraction: float, seed: int = 0) -> tuple[OfflineDataset, OfflineDataset]:
    """Random split of the *transitions* (PrivORL's ``train_test_split`` on rows): the unit of transition-level DP.

    Rows keep their episode ids (episodes become gappy, which transition-level consumers do not mind).
    """
    if not 0.0 < fraction < 1.0:
        raise InvalidData(f"split fraction must be in (0, 1), got {fraction}")
    n = ds.n_transitions
    perm = np.random.default_rng(seed).permutation(n)
    k = min(max(int(round(fraction * n)), 1), n - 1)

    def take(idx: np.ndarray) -> OfflineDataset:
        idx = np.sort(idx)
        return OfflineDataset(**{a: getattr(ds, a)[idx] for a in _ARRAYS}, info=DatasetInfo.from_dict(ds.info.to_dict()))

    return take(perm[:k]), take(perm[k:])


def prepare_datasets(suite: Suite) -> None:
    """Generate, load or split every declared dataset once, in the main process, caching them as ``.npz``."""
    done: set[str] = set()

    def build(name: str, chain: tuple[str, ...] = ()) -> None:
        if name in done:
            return
        if name not in suite.datasets:
            raise InvalidData(f"dataset '{name}' is not declared in suite '{suite.name}'")
        if name in chain:
            raise InvalidData(f"datasets {' -> '.join(chain + (name,))} form a cycle")
        path = _dataset_path(suite.out, name, suite.datasets)
        if not path.exists():
            spec = dict(suite.datasets[name])
            sensitive = spec.pop("sensitive", None)
            if "split_of" in spec:
                parent = spec.pop("split_of")
                build(parent, chain + (name,))
                whole = load_dataset_file(_dataset_path(suite.out, parent, suite.datasets))
                fraction, seed = float(spec.get("fraction", 0.8)), int(spec.get("seed", 0))
                by = spec.get("by", "episode")
                if by == "episode":
                    first, second = whole.split_episodes(fraction, seed=seed)
                elif by == "transition":
                    first, second = split_transitions(whole, fraction, seed)
                else:
                    raise InvalidData(f"dataset '{name}': split 'by' must be 'episode' or 'transition', got '{by}'")
                ds = first if spec.get("part", "first") == "first" else second
            else:
                source = spec.pop("source", None)
                if source not in _DATASET_SOURCES:
                    raise InvalidData(f"dataset '{name}' has unknown source '{source}': use one of {sorted(_DATASET_SOURCES)} or split_of")
                ds = _DATASET_SOURCES[source](**spec)
            if sensitive is not None:
                ds.info.sensitive = bool(sensitive)
            ds.info.name = name
            save_dataset(ds, path)
        done.add(name)

    for name in suite.datasets:
        build(name)


# ---------------------------------------------------------------------------------------------------- execution
_init_worker = init_worker  # one torch thread per cell (kept under its old name: commands import it)


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    return str(obj)


def _write_json(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, default=_json_default))
    os.replace(tmp, path)


def _execute(payload: dict[str, Any]) -> dict[str, Any]:
    """Run one cell (in a worker or inline); never raises: failures come back as a record with a traceback."""
    t0 = time.perf_counter()
    ctx = CellContext(Path(payload["suite_dir"]), payload["id"], payload["datasets"], payload["upstream_record"])
    try:
        result = resolve_kind(payload["kind"])(dict(payload["params"]), ctx)
        status, error = "done", None
    except Exception as exc:  # noqa: BLE001 - a cell failure must not stop the grid
        result, status = None, "failed"
        error = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        if not isinstance(exc, PrivsynthError):
            error += "\n" + traceback.format_exc()
    return {"id": payload["id"], "kind": payload["kind"], "stage": payload["stage"], "params": payload["params"],
            "upstream": payload["upstream"], "status": status, "error": error, "result": result,
            "seconds": round(time.perf_counter() - t0, 3), "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S")}


def _execute_group(payloads: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Run a group of compatible cells as one job through their kind's group runner (a single cell, or a kind
    without one, runs alone). If the group runner fails, every cell runs alone so a bad cell fails only itself."""
    if len(payloads) == 1 or payloads[0]["kind"] not in _GROUP_KINDS:
        return [_execute(p) for p in payloads]
    t0 = time.perf_counter()
    ctxs = [CellContext(Path(p["suite_dir"]), p["id"], p["datasets"], p["upstream_record"]) for p in payloads]
    try:
        results = _GROUP_KINDS[payloads[0]["kind"]][1]([dict(p["params"]) for p in payloads], ctxs)
    except Exception:  # noqa: BLE001 - fall back to one cell at a time
        return [_execute(p) for p in payloads]
    seconds = round((time.perf_counter() - t0) / len(payloads), 3)  # each cell's share of the job
    return [{"id": p["id"], "kind": p["kind"], "stage": p["stage"], "params": p["params"], "upstream": p["upstream"],
             "status": "done", "error": None, "result": r, "seconds": seconds,
             "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S")} for p, r in zip(payloads, results)]


def _group_payloads(payloads: list[dict[str, Any]], stage: Stage, workers: int) -> list[list[dict[str, Any]]]:
    """Jobs of a stage: compatible cells (equal group key) in groups of at most ``stage.group``, split so that the
    ``workers`` stay busy (8 compatible cells on 2 workers: two jobs of 4); other cells one per job."""
    if stage.group > 1 and stage.kind not in _GROUP_KINDS:
        try:
            resolve_kind(stage.kind)  # the built-in kinds (and their group runners) register on import
        except InvalidData:
            pass  # reported by the cells themselves
    if stage.group <= 1 or stage.kind not in _GROUP_KINDS:
        return [[p] for p in payloads]
    key_fn = _GROUP_KINDS[stage.kind][0]
    by_key: dict[str, list[dict[str, Any]]] = {}
    for p in payloads:
        by_key.setdefault(_canonical(key_fn(p["params"])), []).append(p)
    jobs = []
    for members in by_key.values():
        n_jobs = max(math.ceil(len(members) / stage.group), min(workers, len(members)))
        size = math.ceil(len(members) / n_jobs)
        jobs += [members[i:i + size] for i in range(0, len(members), size)]
    return jobs


def _cells_dir(suite: Suite) -> Path:
    return suite.out / "cells"


def collect_records(suite: Suite, kind: str | None = None, stage: str | None = None) -> list[dict[str, Any]]:
    """Finished cell records of the suite (optionally of one kind or stage), in file-name order."""
    d = _cells_dir(suite)
    paths = sorted(p for p in d.glob("*.json") if not p.name.endswith(".failed.json")) if d.exists() else []
    recs = [json.loads(p.read_text()) for p in paths]
    return [r for r in recs if (kind is None or r["kind"] == kind) and (stage is None or r["stage"] == stage)]


def _plan_stage(suite: Suite, stage: Stage, finished: dict[str, list[dict[str, Any]]]) -> tuple[list[Cell], int]:
    """Cells of a stage, each linked to its upstream; returns (cells, number blocked by a missing upstream)."""
    cells, blocked = [], 0
    for params in expand_stage(stage):
        upstream = None
        if stage.needs:
            match, where = stage.needs.get("match", []), stage.needs.get("where", {})
            cands = [r for r in finished.get(stage.needs["stage"], [])
                     if all(r["params"].get(k) == params.get(k) for k in match)
                     and all(r["params"].get(k) == v for k, v in where.items())]
            if not cands and not stage.needs.get("optional", False):
                blocked += 1
                continue
            if len(cands) > 1:
                raise InvalidData(f"stage '{stage.name}': {len(cands)} upstream cells match {({k: params.get(k) for k in match})}; add keys to 'match'")
            upstream = cands[0]["id"] if cands else None
        names = _dataset_names(params, suite.datasets)
        specs = {n: _resolved_spec(n, suite.datasets) for n in sorted(names)}
        cell = Cell(kind=stage.kind, params=params, stage=stage.name, upstream=upstream, datasets=specs)
        cell.id = cell_id(cell.kind, params, upstream, specs)
        cells.append(cell)
    return cells, blocked


def run_suite(suite: Suite, *, workers: int | None = None, only: Iterable[str] | None = None, dry_run: bool = False,
              progress: bool = True, log: Callable[[str], None] = print, executor: str = "local",
              address: str | None = None) -> dict[str, Any]:
    """Run every unfinished cell stage by stage, then write tables and plots. Returns a summary dict.

    ``executor="local"`` runs cells in a process pool of ``workers``; ``"ray"`` submits them as Ray tasks with the
    stage's ``cpus`` (on the cluster at ``address``, else a local Ray instance); see
    :mod:`privsynth.evaluation.executors`.
    """
    workers = max(1, int(workers or suite.workers))
    pool = _LazyExecutor(executor, workers, address)  # started on the first stage with work (Ray takes seconds)
    try:
        return _run_suite(suite, pool, only, dry_run, progress, log)
    finally:
        pool.close()


class _LazyExecutor:
    def __init__(self, name: str, workers: int, address: str | None) -> None:
        from privsynth.evaluation.executors import EXECUTORS

        if name not in EXECUTORS:
            raise InvalidData(f"unknown executor '{name}': choose {' or '.join(EXECUTORS)}")
        self.name, self.workers, self.address, self.executor = name, workers, address, None

    def get(self):
        from privsynth.evaluation.executors import make_executor

        if self.executor is None:
            self.executor = make_executor(self.name, workers=self.workers, address=self.address)
        return self.executor

    def close(self) -> None:
        if self.executor is not None:
            self.executor.close()


def _run_suite(suite: Suite, pool: _LazyExecutor, only: Iterable[str] | None, dry_run: bool, progress: bool,
               log: Callable[[str], None]) -> dict[str, Any]:
    only = set(only) if only else None
    cells_dir = _cells_dir(suite)
    cells_dir.mkdir(parents=True, exist_ok=True)
    if not dry_run:
        prepare_datasets(suite)
    summary = {"suite": suite.name, "ran": 0, "skipped": 0, "failed": 0, "blocked": 0, "failures": []}
    finished: dict[str, list[dict[str, Any]]] = {}
    for stage in suite.stages:
        cells, blocked = _plan_stage(suite, stage, finished)
        summary["blocked"] += blocked
        todo = [c for c in cells if not (cells_dir / f"{c.id}.json").exists()]
        if only is not None and stage.name not in only and stage.kind not in only:
            todo = []
        summary["skipped"] += len(cells) - len(todo)
        log(f"[{suite.name}] stage {stage.name}: {len(cells)} cells, {len(cells) - len(todo)} finished, {len(todo)} to run"
            + (f", {blocked} waiting on unfinished or failed upstream cells" if blocked else ""))
        if not dry_run and todo:
            by_id = {r["id"]: r for recs in finished.values() for r in recs}
            payloads = [{"id": c.id, "kind": c.kind, "stage": c.stage, "params": c.params, "upstream": c.upstream,
                         "upstream_record": by_id.get(c.upstream) if c.upstream else None,
                         "datasets": suite.datasets, "suite_dir": str(suite.out)} for c in todo]
            jobs = _group_payloads(payloads, stage, pool.workers)
            if len(jobs) < len(payloads):
                log(f"[{suite.name}] stage {stage.name}: {len(payloads)} cells in {len(jobs)} jobs "
                    f"(compatible cells train as one batched model)")
            cpus = [stage.cpus] * len(jobs)
            for rec in _map(jobs, pool.get(), cpus, progress, f"{suite.name}/{stage.name}"):
                if rec["status"] == "done":
                    (cells_dir / f"{rec['id']}.failed.json").unlink(missing_ok=True)
                    _write_json(cells_dir / f"{rec['id']}.json", rec)
                    summary["ran"] += 1
                else:
                    _write_json(cells_dir / f"{rec['id']}.failed.json", rec)
                    summary["failed"] += 1
                    summary["failures"].append({"id": rec["id"], "error": rec["error"].splitlines()[0]})
                    log(f"[{suite.name}] cell {rec['id']} failed: {rec['error'].splitlines()[0]}")
        finished[stage.name] = []
        for c in cells:  # a finished cell may have been produced under another stage name: adopt it
            path = cells_dir / f"{c.id}.json"
            if path.exists():
                rec = json.loads(path.read_text())
                if rec["stage"] != stage.name and not dry_run:
                    rec["stage"] = stage.name
                    _write_json(path, rec)
                finished[stage.name].append(rec)
    if not dry_run:
        suite.current = finished
        summary["tables"] = [str(p) for p in write_tables(suite)]
        summary["plots"] = [str(p) for p in write_plots(suite)]
    return summary


def _map(jobs: list[list[dict[str, Any]]], executor, cpus: list[float], progress: bool, desc: str):
    from tqdm import tqdm

    bar = tqdm(total=sum(len(j) for j in jobs), desc=desc, disable=not progress, leave=False)
    try:
        for recs in executor.map(_execute_group, jobs, cpus):
            for rec in recs:
                yield rec
                bar.update()
    finally:
        bar.close()


# ---------------------------------------------------------------------------------------------------- tables
def _eps_label(v: Any) -> Any:
    if v is None or (isinstance(v, float) and math.isinf(v)):
        return "no DP"
    return v


def _label(key: str, value: Any) -> str:
    if key == "epsilon":
        return "no DP" if _eps_label(value) == "no DP" else f"ε={value:g}"
    return f"{key}={value}"


def records_frame(records: list[dict[str, Any]]):
    """One row per cell: scalar params and scalar results flattened into columns (results win on clashes)."""
    import pandas as pd

    rows = []
    for r in records:
        row = {k: v for k, v in r["params"].items() if not isinstance(v, (dict, list))}
        if "epsilon" in row:
            row["epsilon"] = _eps_label(row["epsilon"])
        row.update({k: v for k, v in (r["result"] or {}).items() if isinstance(v, (int, float, str, bool)) or v is None})
        row["cell"] = r["id"]
        row["seconds"] = r["seconds"]
        rows.append(row)
    return pd.DataFrame(rows)


def _markdown(df) -> str:
    """A GitHub markdown table (pandas' to_markdown needs the optional ``tabulate``)."""
    cols = [str(c) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for _, row in df.iterrows():
        lines.append("| " + " | ".join(str(v) for v in row.tolist()) + " |")
    return "\n".join(lines) + "\n"


def summary_table(records: list[dict[str, Any]], rows: list[str], values: list[str], cols: list[str] | None = None,
                  digits: int = 3):
    """mean ± std (and n) of ``values`` over every cell sharing ``rows`` + ``cols`` (i.e. across seeds)."""
    import pandas as pd

    df = records_frame(records)
    if df.empty:
        return pd.DataFrame()
    keys = [k for k in rows + (cols or []) if k in df.columns]
    present = [v for v in values if v in df.columns]
    if not present:
        return pd.DataFrame()
    keyed = df[keys].astype(object).where(df[keys].notna(), "–").astype(str) if keys else None
    groups = df.groupby([keyed[k] for k in keys], sort=True, dropna=False) if keys else [((), df)]
    out = []
    for key, g in groups:
        key = key if isinstance(key, tuple) else (key,)
        row = dict(zip(keys, key))
        for v in present:
            vals = pd.to_numeric(g[v], errors="coerce").dropna()
            if vals.empty:
                row[v] = "–"
            elif len(vals) == 1:
                row[v] = f"{vals.iloc[0]:.{digits}f}"
            else:
                row[v] = f"{vals.mean():.{digits}f} ± {vals.std(ddof=1):.{digits}f}"
        row["n"] = len(g)
        out.append(row)
    table = pd.DataFrame(out)
    if cols and len(present) == 1:
        table = table.pivot_table(index=[k for k in rows if k in keys], columns=[c for c in cols if c in keys],
                                  values=present[0], aggfunc="first").reset_index()
        table.columns = [" ".join(str(x) for x in c if str(x)) if isinstance(c, tuple) else str(c) for c in table.columns]
    return table


def current_records(suite: Suite) -> dict[str, list[dict[str, Any]]]:
    """Finished records of the cells the suite defines *now*, per stage (cells of older configs are left out)."""
    cells_dir = _cells_dir(suite)
    finished: dict[str, list[dict[str, Any]]] = {}
    for stage in suite.stages:
        cells, _ = _plan_stage(suite, stage, finished)
        finished[stage.name] = [json.loads(p.read_text()) for c in cells if (p := cells_dir / f"{c.id}.json").exists()]
    return finished


def _current(suite: Suite, spec: dict[str, Any]) -> list[dict[str, Any]]:
    if suite.current is None:
        suite.current = current_records(suite)
    by_stage = suite.current
    return [r for name, recs in by_stage.items() for r in recs
            if (spec.get("stage") in (None, name)) and (spec.get("kind") in (None, r["kind"]))]


def write_tables(suite: Suite) -> list[Path]:
    """Every table of the suite as markdown, HTML and the raw per-cell CSV."""
    out_dir = suite.out / "tables"
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for spec in suite.tables:
        recs = _current(suite, spec)
        if not recs:
            continue
        table = summary_table(recs, list(spec.get("rows", [])), list(spec["values"]), spec.get("cols"),
                              int(spec.get("digits", 3)))
        name = spec["name"]
        md = f"## {spec.get('title', name)}\n\n" + (spec.get("caption", "") + "\n\n" if spec.get("caption") else "")
        md += _markdown(table)
        (out_dir / f"{name}.md").write_text(md)
        table.to_html(out_dir / f"{name}.html", index=False)
        records_frame(recs).to_csv(out_dir / f"{name}.cells.csv", index=False)
        written += [out_dir / f"{name}.md", out_dir / f"{name}.html"]
    return written


# ---------------------------------------------------------------------------------------------------- plots
def write_plots(suite: Suite) -> list[Path]:
    """Privacy-utility curves (value vs ε per series) and ROC plots of MIA cells."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = suite.out / "plots"
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for spec in suite.plots:
        recs = _current(suite, spec)
        if not recs:
            continue
        path = out_dir / f"{spec['name']}.png"
        if spec["type"] == "privacy_utility":
            _privacy_utility(plt, recs, spec, path)
        elif spec["type"] == "roc":
            from privsynth.evaluation.mia.audit import plot_roc

            label_keys = spec.get("label", ["synthesizer", "epsilon"])
            runs = {}
            for r in recs:
                audit = (r["result"] or {}).get(spec.get("audit", "audit"))  # "data_audit": data-only attacks
                if audit:
                    label = " ".join(_label(k, r["params"].get(k)) for k in label_keys)
                    attacks = {a: v for a, v in audit["attacks"].items() if a in spec.get("attacks", audit["attacks"])}
                    runs[label] = {**audit, "attacks": attacks}
            if not runs:
                continue
            plot_roc(runs, str(path), title=spec.get("title"))
        else:
            raise InvalidData(f"unknown plot type '{spec['type']}': use privacy_utility or roc")
        written.append(path)
    return written


def _privacy_utility(plt, recs: list[dict[str, Any]], spec: dict[str, Any], path: Path) -> None:
    """y vs ε, one line per ``series`` key value, mean ± std over the other keys (seeds); no-DP drawn at the right."""
    import pandas as pd

    df = records_frame(recs)
    x, y, series = spec.get("x", "epsilon"), spec["y"], spec.get("series", "synthesizer")
    if y not in df.columns or x not in df.columns:
        return
    finite = pd.to_numeric(df[x], errors="coerce")
    top = (finite.max() if finite.notna().any() else 1.0) * 3
    df["_x"] = finite.fillna(top)
    df[y] = pd.to_numeric(df[y], errors="coerce")
    fig, ax = plt.subplots(figsize=(5, 3.6))
    for name, g in df.groupby(df[series].astype(str) if series in df.columns else np.zeros(len(df))):
        agg = g.groupby("_x")[y].agg(["mean", "std"]).reset_index().sort_values("_x")
        ax.errorbar(agg["_x"], agg["mean"], yerr=agg["std"].fillna(0), marker="o", capsize=3, label=str(name))
    ax.set_xscale("log")
    ticks = sorted(df["_x"].unique())
    ax.set_xticks(ticks)
    ax.set_xticklabels(["no DP" if t == top else f"{t:g}" for t in ticks])
    ax.set(xlabel="ε", ylabel=spec.get("ylabel", y), title=spec.get("title", ""))
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
