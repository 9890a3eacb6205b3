"""Running a suite: every unfinished cell, stage by stage (consecutive stages of one groupable kind that do not
need each other run as one, their compatible cells batched together), on an executor (a local process pool or Ray tasks,
:mod:`privsynth.evaluation.executors`, docs/scale_out.md), then its tables and plots.

A cell runs as a :class:`CellJob` (what a worker needs, picklable) and comes back as a
:class:`~privsynth.evaluation.bench.records.CellRecord`; a failure is recorded next to the results as
``<id>.failed.json`` and retried on the next run, and never stops the grid.
"""
from __future__ import annotations

import contextlib
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from privsynth.errors import InvalidData, PrivsynthError
from privsynth.evaluation.bench.context import CellContext
from privsynth.evaluation.bench.kinds import group_runner, prepare_suite_datasets, resolve_kind
from privsynth.evaluation.bench.plan import group_jobs, plan_stage, validate_suite
from privsynth.evaluation.bench.plots import write_plots
from privsynth.evaluation.bench.records import CellFailure, CellRecord, RunSummary, read_record, write_json
from privsynth.evaluation.bench.suite import Cell, Stage, Suite
from privsynth.evaluation.bench.tables import write_tables
from privsynth.evaluation.executors import EXECUTORS, Executor, make_executor

__all__ = ["CellJob", "run_suite", "run", "execute_cell", "execute_group"]


@dataclass
class CellJob:
    """One cell as a worker runs it: the cell, its upstream record and where the suite's files are."""

    id: str
    kind: str
    stage: str
    params: dict[str, Any]
    upstream: str | None
    upstream_record: CellRecord | None
    datasets: dict[str, dict[str, Any]]  # every dataset spec of the suite
    suite_dir: str
    fingerprint: str | None = None  # the resolved configuration (:func:`_fingerprint`), stored in the record

    def context(self) -> CellContext:
        return CellContext(Path(self.suite_dir), self.id, self.datasets, self.upstream_record)

    def record(self, *, status: str, result: dict[str, Any] | None, error: str | None, seconds: float) -> CellRecord:
        return CellRecord(id=self.id, kind=self.kind, stage=self.stage, params=self.params, upstream=self.upstream,
                          status=status, error=error, result=result, seconds=round(seconds, 3),
                          finished_at=time.strftime("%Y-%m-%dT%H:%M:%S"),
                          upstream_finished_at=self.upstream_record.finished_at if self.upstream_record else None,
                          config_fingerprint=self.fingerprint)


def execute_cell(job: CellJob) -> CellRecord:
    """Run one cell (in a worker or inline); never raises: a failure comes back as a record with the traceback."""
    t0 = time.perf_counter()
    try:
        result = resolve_kind(job.kind)(dict(job.params), job.context())
        return job.record(status="done", result=result, error=None, seconds=time.perf_counter() - t0)
    except Exception as exc:  # noqa: BLE001 - a cell failure must not stop the grid
        error = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        if not isinstance(exc, PrivsynthError):
            error += "\n" + traceback.format_exc()
        return job.record(status="failed", result=None, error=error, seconds=time.perf_counter() - t0)


def execute_group(jobs: list[CellJob]) -> list[CellRecord]:
    """Run a group of compatible cells as one job through their kind's group runner (a single cell, or a kind
    without one, runs alone). If the group runner fails, every cell runs alone so a bad cell fails only itself.

    The group runner is looked up through :func:`~privsynth.evaluation.bench.kinds.group_runner`, which imports the
    built-in cell modules first: a fresh worker process has not imported them yet."""
    runner = group_runner(jobs[0].kind) if len(jobs) > 1 else None
    if runner is None:
        return [execute_cell(j) for j in jobs]
    t0 = time.perf_counter()
    try:
        results = runner[1]([dict(j.params) for j in jobs], [j.context() for j in jobs])
    except Exception:  # noqa: BLE001 - fall back to one cell at a time
        return [execute_cell(j) for j in jobs]
    seconds = (time.perf_counter() - t0) / len(jobs)  # each cell's share of the job
    return [j.record(status="done", result=r, error=None, seconds=seconds) for j, r in zip(jobs, results)]


class LazyExecutor:
    """The executor, started on the first stage with work (Ray takes seconds to start)."""

    def __init__(self, name: str, workers: int, address: str | None) -> None:
        if name not in EXECUTORS:
            raise InvalidData(f"unknown executor '{name}': choose {' or '.join(EXECUTORS)}")
        self.name, self.workers, self.address = name, workers, address
        self.executor: Executor | None = None

    def get(self) -> Executor:
        if self.executor is None:
            self.executor = make_executor(self.name, workers=self.workers, address=self.address)
        return self.executor

    def close(self) -> None:
        if self.executor is not None:
            self.executor.close()


def run_suite(suite: Suite, *, workers: int | None = None, only: Iterable[str] | None = None, dry_run: bool = False,
              progress: bool = True, log: Callable[[str], None] = print, executor: str = "local",
              address: str | None = None) -> RunSummary:
    """Run every unfinished cell stage by stage, then write tables and plots.

    ``executor="local"`` runs cells in a process pool of ``workers``; ``"ray"`` submits them as Ray tasks with the
    stage's ``cpus`` (on the cluster at ``address``, else a local Ray instance); see
    :mod:`privsynth.evaluation.executors`. ``dry_run`` plans and logs; it runs no cell and writes no record, table
    or plot.
    """
    pool = LazyExecutor(executor, max(1, int(workers or suite.workers)), address)
    try:
        return run(suite, pool, only=only, dry_run=dry_run, progress=progress, log=log)
    finally:
        pool.close()


def run(suite: Suite, pool: LazyExecutor, *, only: Iterable[str] | None = None, dry_run: bool = False,
        progress: bool = True, log: Callable[[str], None] = print) -> RunSummary:
    """:func:`run_suite` on an executor the caller owns.

    The suite is checked first (kinds, sources, ``--only`` names), dry run or not, so a typo fails before any work.
    A dry run plans each stage as if the cells it would run had finished, so downstream cells count as "to run"."""
    validate_suite(suite)
    only = set(only) if only else None
    if only:
        names = [s.name for s in suite.stages]
        unknown = sorted(o for o in only if o not in names and o not in {s.kind for s in suite.stages})
        if unknown:
            raise InvalidData(f"--only {', '.join(unknown)}: no such stage in suite '{suite.name}' "
                              f"(stages: {', '.join(names)})")
    cells_dir = suite.cells_dir
    with contextlib.ExitStack() as stack:
        if not dry_run:
            cells_dir.mkdir(parents=True, exist_ok=True)
            stack.enter_context(_results_lock(suite))
            prepare_suite_datasets(suite)
        return _run_locked(suite, pool, only, dry_run, progress, log)


@contextlib.contextmanager
def _results_lock(suite: Suite) -> Iterator[None]:
    """One run per results folder: two runs at once each re-ran the other's upstream cells and left records of one
    beside artifacts of the other. Released when the run ends (also when the process dies)."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock
        yield
        return
    with open(suite.out / ".lock", "w") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise InvalidData(f"another privsynth bench is running on {suite.out}: wait for it, or pass another "
                              "--results-dir") from None
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _run_locked(suite: Suite, pool: LazyExecutor, only: set[str] | None, dry_run: bool, progress: bool,
                log: Callable[[str], None]) -> RunSummary:
    cells_dir = suite.cells_dir
    summary = RunSummary(suite=suite.name)
    finished: dict[str, list[CellRecord]] = {}
    would_run = 0
    batch: list[tuple[Stage, list[Cell], list[Cell]]] = []  # planned stages that run together (see _joins)

    def flush() -> None:
        nonlocal would_run
        todo_by_stage = [(st, todo) for st, _, todo in batch if todo]
        if not dry_run and todo_by_stage:
            _run_stages(suite, todo_by_stage, finished, pool, summary, progress, log)
        for st, cells, todo in batch:
            finished[st.name] = _adopt_finished(cells, st.name, cells_dir, write=not dry_run)
            if dry_run:  # what this run would produce, so downstream stages plan against it (stale cells: once)
                would_run += len(todo)
                rerun = {c.id for c in todo}
                finished[st.name] = [r for r in finished[st.name] if r.id not in rerun]
                finished[st.name] += [CellRecord(id=c.id, kind=c.kind, stage=c.stage, params=c.params,
                                                 upstream=c.upstream, status="planned") for c in todo]
        batch.clear()

    for stage in suite.stages:
        if batch and not _joins([st for st, _, _ in batch], stage):
            flush()
        cells, blocked = plan_stage(suite, stage, finished)
        summary.blocked += blocked
        upstreams = {r.id: r for recs in finished.values() for r in recs}
        stale = [c for c in cells if _stale(c, cells_dir, upstreams)]
        todo = [c for c in cells if not (cells_dir / f"{c.id}.json").exists()] + stale
        done = len(cells) - len(todo)
        if stale:
            log(f"[{suite.name}] stage {stage.name}: {len(stale)} finished cells are stale (their upstream cell ran "
                "again since, with new DP draws, or their preset resolves to another configuration now): they run "
                "again")
        left_out = only is not None and stage.name not in only and stage.kind not in only
        if left_out:
            todo = []
        summary.skipped += len(cells) - len(todo)
        wait = ("no upstream cell (left out by --only, or none matches)" if dry_run
                else "unfinished or failed upstream cells")
        log(f"[{suite.name}] stage {stage.name}: {len(cells)} cells, {done} finished, "
            + (f"{len(cells) - done} left out by --only" if left_out else f"{len(todo)} to run")
            + (f", {blocked} waiting on {wait}" if blocked else ""))
        batch.append((stage, cells, todo))
    flush()
    if dry_run:
        log(f"[{suite.name}] dry run: {would_run} cells would run; nothing was run or written")
    else:
        suite.current = finished
        try:
            summary.tables = [str(p) for p in write_tables(suite, log=log)]
        except InvalidData as exc:  # a refused table (a key no cell has, e.g. after --only): the run's summary stays
            summary.table_error = str(exc)
        finally:  # the plots are written either way; the cells are saved anyway
            summary.plots = [str(p) for p in write_plots(suite, log=log)]
    return summary


def _stale(cell: Cell, cells_dir: Path, upstreams: dict[str, CellRecord]) -> bool:
    """A finished cell made from something that has changed since: its upstream record is not the one it was
    computed from (the upstream ran again: a DP fine-tune draws new noise, so its release and everything computed
    from it changed), or its configuration resolves differently now (a preset changed). Records written before
    these stamps existed carry none and are taken as they are."""
    path = cells_dir / f"{cell.id}.json"
    if not path.exists():
        return False
    rec = read_record(path)
    now = _fingerprint(cell)
    if rec.config_fingerprint is not None and rec.config_fingerprint != now and not _vouched(cell, cells_dir, now):
        return True
    if not cell.upstream or cell.upstream not in upstreams:
        return False
    return rec.upstream_finished_at is not None and rec.upstream_finished_at != upstreams[cell.upstream].finished_at


def _vouched(cell: Cell, cells_dir: Path, now: str | None) -> bool:
    """A pre-training cell, or the public model alone sampled from one, recorded under an older fingerprint (one that
    hashed the whole configuration, the DP fine-tune's settings too) whose checkpoint holds today's pre-training
    configuration: the checkpoint it made, or samples, is what the cell would make now."""
    from privsynth.evaluation import cells

    if not now or not now.startswith(cells.SCOPED):
        return False
    owner = cell.id if cell.kind == "pretrain" else cell.upstream
    return bool(owner) and cells.checkpoint_fingerprint(cells_dir.parent / "artifacts" / str(owner) / "model.pt") == now


def _fingerprint(cell: Cell) -> str | None:
    """The built-in cells' :func:`~privsynth.evaluation.cells.config_fingerprint` of a cell (None for other kinds)."""
    import importlib

    fn = getattr(importlib.import_module("privsynth.evaluation.cells"), "config_fingerprint", None)
    try:
        return fn(cell.kind, cell.params) if fn is not None else None
    except InvalidData:  # a bad setting fails that cell alone, when it runs, in one line
        return None


def _joins(batch: list[Stage], stage: Stage) -> bool:
    """Whether ``stage`` runs together with the planned ``batch`` of stages: same kind with a group runner, same
    grouping and CPUs, and no need of a batch stage (its upstreams are finished before the batch runs). Then their
    compatible cells share batched jobs and the workers stay busy across the stages (table1_small's synthetic and
    real agent stages: 9 cells per agent in 3 jobs, rather than 6 and then 3 cells, the last split 2 + 1)."""
    first = batch[0]
    if stage.kind != first.kind or stage.group <= 1 or group_runner(stage.kind) is None:
        return False
    if (stage.group, stage.cpus) != (first.group, first.cpus):
        return False
    return not (stage.needs and stage.needs.get("stage") in {s.name for s in batch})


def _run_stages(suite: Suite, todo_by_stage: list[tuple[Stage, list[Cell]]], finished: dict[str, list[CellRecord]],
                pool: LazyExecutor, summary: RunSummary, progress: bool, log: Callable[[str], None]) -> None:
    by_id = {r.id: r for recs in finished.values() for r in recs}
    jobs = [CellJob(id=c.id, kind=c.kind, stage=c.stage, params=c.params, upstream=c.upstream,
                    upstream_record=by_id.get(c.upstream) if c.upstream else None, datasets=suite.datasets,
                    suite_dir=str(suite.out), fingerprint=_fingerprint(c)) for _, todo in todo_by_stage for c in todo]
    stage = todo_by_stage[0][0]  # the stages share kind, grouping and CPUs (_joins)
    names = " + ".join(st.name for st, _ in todo_by_stage)
    groups = group_jobs(jobs, stage, pool.workers, params_of=lambda j: j.params)
    if len(groups) < len(jobs):
        log(f"[{suite.name}] stage {names}: {len(jobs)} cells in {len(groups)} jobs "
            f"(compatible cells train as one batched model)")
    try:
        _collect(suite, groups, pool, stage, summary, progress, log, desc=f"{suite.name}/{names}")
    except KeyboardInterrupt:
        log(f"[{suite.name}] interrupted in stage {names}: the cells that had finished are saved "
            f"({summary.ran} done, {summary.failed} failed in this run); run again to continue")
        raise


def _collect(suite: Suite, groups: list[list[CellJob]], pool: LazyExecutor, stage: Stage, summary: RunSummary,
             progress: bool, log: Callable[[str], None], desc: str | None = None) -> None:
    """Run the jobs and write each record as it comes back."""
    records = _map(groups, pool.get(), [stage.cpus] * len(groups), progress, desc or f"{suite.name}/{stage.name}")
    with contextlib.closing(records):  # stopping early (Ctrl-C while writing) stops the executor's workers now
        for rec in records:
            _store(suite, rec, summary, log)


def _store(suite: Suite, rec: CellRecord, summary: RunSummary, log: Callable[[str], None]) -> None:
    if rec.done:
        (suite.cells_dir / f"{rec.id}.failed.json").unlink(missing_ok=True)
        write_json(suite.cells_dir / f"{rec.id}.json", rec.to_json())
        summary.ran += 1
    else:
        write_json(suite.cells_dir / f"{rec.id}.failed.json", rec.to_json())
        summary.failed += 1
        summary.failures.append(CellFailure(id=rec.id, error=rec.first_error_line))
        log(f"[{suite.name}] cell {rec.id} failed: {rec.first_error_line}")


def _adopt_finished(cells: list[Cell], stage_name: str, cells_dir: Path, write: bool) -> list[CellRecord]:
    """Records of the stage's finished cells; one produced under another stage name is adopted (renamed on disk)."""
    out = []
    for c in cells:
        path = cells_dir / f"{c.id}.json"
        if path.exists():
            rec = read_record(path)
            if rec.stage != stage_name and write:
                rec.stage = stage_name
                write_json(path, rec.to_json())
            out.append(rec)
    return out


def _map(groups: list[list[CellJob]], executor: Executor, cpus: list[float], progress: bool,
         desc: str) -> Iterator[CellRecord]:
    from tqdm import tqdm

    bar = tqdm(total=sum(len(g) for g in groups), desc=desc, disable=not progress, leave=False)
    results = executor.map(execute_group, groups, cpus)
    try:
        for recs in results:
            for rec in recs:
                yield rec
                bar.update()
    finally:
        results.close()  # a generator: closing it early cancels what is queued and ends the workers
        bar.close()
