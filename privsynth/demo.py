"""The end-to-end demo behind ``make demo`` / ``privsynth demo``.

On the embedded default it generates a small public PointMaze corpus (other maps) and a sensitive umaze set (stored
flagged sensitive), splits the sensitive set at the release's privacy unit into members (the fine-tuning records) and
held-out non-members (both stored too, sensitive, so the audit can be re-run from the CLI), pre-trains the PrivORL-n
synthesizer on the public data with curiosity, DP fine-tunes it on the members (ε = 10), samples from the EMA weights,
releases the synthetic set through the release guard, evaluates it against the sensitive set (optionally with agents),
audits the release with membership inference tested against its card's ε, and writes ``report.md`` /
``report.json``. The guard's checks run before anything else sees the samples; the Minari write of the release
(single-threaded HDF5 work) runs in a forked child process beside evaluation and audit, and the report is written once
it has succeeded.

The split is the audit's design (:mod:`privsynth.demo_audit`): the one-run ε bound tests the card's claim only when
each unit's membership is its own random draw, so a transition-level release (the default) is split **by
transition** (a random 80% of the transitions, ``privsynth datasets split --by transition`` under a seed derived from
the demo's, on a random stream apart from the one that generated the data) and
a trajectory-level one by episode. The members are then a valid dataset of their own: each row keeps its episode id,
and stored episodes are the chained runs of member steps (gaps start a new Minari episode); DP-SGD, its sample rate
and δ < 1/N count the N member transitions. What needs whole episodes reads the whole sensitive set (members and
non-members, internal, not DP, never seen by the synthesizer): the evaluation's real column (trajectory statistics,
the utility predictor's held-out episodes, TrajScore's real baseline, agents on real data); fidelity is also scored
against the members alone.

This module only orchestrates library calls; it sits to the right of every layer (data -> privacy -> synth -> release
-> evaluation) and nothing imports it.

Why this module is long: besides the five steps (the audit's design is in :mod:`privsynth.demo_audit`, the
report's markdown in :mod:`privsynth.demo_report`) it holds what makes the demo fit its time
budget on 2 cores and is used nowhere else: the data stage's task split over worker processes, the forked child that
writes the release beside evaluation, thread limits per phase, and the per-stage wall/CPU clock.
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from privsynth.threads import idle_cores, torch_threads

from privsynth.errors import PrivsynthError

__all__ = ["DemoConfig", "run_demo"]


@dataclass
class DemoConfig:
    """The embedded default: small enough for a few minutes on 2 CPU cores."""

    out: str = "demo-output"
    public_mazes: tuple[str, ...] = ("open", "medium")  # PrivORL pre-trains on the sibling maps of the sensitive one
    sensitive_maze: str = "umaze"
    public_steps: int = 20_000  # per public map
    # earlier measurement: marginal 0.927 at ε=10 (0.889 with 20k steps: DP noise needs more data); the current
    # defaults give 0.859 against the sensitive set and against the members alike (0.857 with the split by episode)
    sensitive_steps: int = 50_000
    dense: bool = True  # maze2d-umaze-dense, as PrivORL's main table
    seed: int = 0
    # members (a random share of the units: transitions for unit="transition", episodes for "trajectory") fine-tune
    # the model; the rest are the audit's non-members (PrivORL: 0.8)
    member_fraction: float = 0.8
    epsilon: float = 10.0
    delta: float = 1e-5  # must stay below 1/N for the N member transitions
    unit: str = "transition"
    n_samples: int = 20_000
    ref_episodes: int = 20  # episodes per reference policy (random / noiseless controller)
    agents: tuple[str, ...] = ()  # e.g. ("td3bc",): trained on the synthetic data, scored in the real env
    agent_updates: int = 5_000
    agent_seeds: tuple[int, ...] = (0,)
    audit_units: int = 1000
    data_workers: int = 2  # processes generating the PointMaze sets at once (the demo machine has 2 cores)
    # torch intra-op threads; None: the cores left idle by other jobs (cores minus the 1-minute load average, at
    # least 1). On a shared machine a thread per busy core stalls every parallel op behind a descheduled thread
    # (measured: a DP fine-tune step took 2.8 s with 2 threads at load 7, against 0.15 s with 1 thread).
    threads: int | None = None
    store: str | None = None  # Minari store; default: <out>/minari (the demo never touches your own store)
    extra: dict[str, Any] = field(default_factory=dict)


def _dataset(dataset_id: str, make: Callable[[], Any], log: Callable[[str], None], sensitive: bool = False):
    from privsynth.data import minari_io

    if minari_io.dataset_exists(dataset_id):
        log(f"  reusing {dataset_id}")
        return minari_io.load_dataset(dataset_id)
    ds = make().mark_sensitive(sensitive)
    minari_io.write_dataset(ds, dataset_id, overwrite=True)
    log(f"  wrote {dataset_id}: {ds.n_episodes} episodes, {ds.n_transitions} transitions")
    return ds


def _data_task(task: tuple[str, Any, str]) -> Any:
    """Worker: one part of a PointMaze set (a child process of the demo): its collection run (``collect``: the
    dataset without reference scores) or one reference policy's mean return (the part is the policy's name)."""
    from privsynth.data.pointmaze import collect_pointmaze, reference_args, reference_return

    _, pc, part = task
    if part == "collect":
        return collect_pointmaze(pc, False)
    return reference_return(*reference_args(pc), part)


def _task_steps(task: tuple[str, Any, str]) -> int:
    """Environment steps a data task simulates (the pool starts the longest first, then balances the rest)."""
    from privsynth.data.pointmaze import EPISODE_STEPS

    _, pc, part = task
    return pc.steps if part == "collect" else pc.ref_episodes * EPISODE_STEPS[pc.maze]


def _datasets(jobs: list[tuple[str, Any]], workers: int, progress: bool, log: Callable[[str], None],
              meanwhile: Callable[[], None] | None = None, sensitive: frozenset[str] = frozenset()) -> list[Any]:
    """Generate (or reuse) each ``(dataset_id, PointMazeConfig)``; missing sets are made by up to ``workers``
    processes at once, then every set is read back from the store. The ids in ``sensitive`` are stored flagged
    sensitive (a stored set of those ids that is not, from a store of an older demo, is flagged in place).

    In parallel, a set is three tasks: its collection run and the rollouts of each reference policy (each one
    sequential simulation, deterministic under its seed, so the parts are the same whichever process makes them and
    the set equals :func:`~privsynth.data.pointmaze.generate_pointmaze`'s); this process assembles and writes each set
    as soon as its parts are in, while the workers go on with the others. ``meanwhile()`` runs once the workers have
    started (first, without workers).
    """
    from privsynth.data import minari_io
    from privsynth.data.pointmaze import REFERENCE_POLICIES, generate_pointmaze, with_reference_scores

    for dataset_id, pc in jobs:
        if minari_io.dataset_exists(dataset_id) and not _made_by(dataset_id, pc):
            # an older demo's set of other settings (--seed, --sensitive-steps, --public-steps): made again, so the
            # report's config is what the data are (and the split and checkpoints follow, by their stamps)
            minari_io.delete_dataset(dataset_id)
            log(f"  discarded {dataset_id}: generated with other settings than this run's")
    for dataset_id, _ in jobs:
        if dataset_id in sensitive and minari_io.dataset_exists(dataset_id) \
                and not minari_io.describe(dataset_id)["sensitive"]:
            minari_io.write_dataset(minari_io.load_dataset(dataset_id).mark_sensitive(True), dataset_id, overwrite=True)
            log(f"  flagged {dataset_id} sensitive in the store")
    missing = [job for job in jobs if not minari_io.dataset_exists(job[0])]
    if missing and workers > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        tasks = sorted(((dataset_id, pc, part) for dataset_id, pc in missing
                        for part in ("collect", *REFERENCE_POLICIES)), key=lambda task: -_task_steps(task))
        parts: dict[str, dict[str, Any]] = {dataset_id: {} for dataset_id, _ in missing}
        pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("fork"))
        try:
            futures = {pool.submit(_data_task, task): task for task in tasks}
            if meanwhile is not None:
                meanwhile()
            for future in as_completed(futures):
                dataset_id, pc, part = futures[future]
                got = parts[dataset_id]
                got[part] = future.result()
                if len(got) == 1 + len(REFERENCE_POLICIES):
                    ds = with_reference_scores(got.pop("collect"), pc, tuple(got[p] for p in REFERENCE_POLICIES))
                    ds = ds.mark_sensitive(dataset_id in sensitive)
                    minari_io.write_dataset(ds, dataset_id, overwrite=True)
                    log(f"  wrote {dataset_id}: {ds.n_episodes} episodes, {ds.n_transitions} transitions")
        finally:
            pool.shutdown(cancel_futures=True)
        return [minari_io.load_dataset(dataset_id) for dataset_id, _ in jobs]
    if meanwhile is not None:
        meanwhile()
    return [_dataset(dataset_id, lambda pc=pc: generate_pointmaze(pc, progress), log, dataset_id in sensitive)
            for dataset_id, pc in jobs]


def _made_by(dataset_id: str, pc: Any) -> bool:
    """Whether the stored ``dataset_id`` was generated from the PointMaze settings ``pc`` (recorded by the generator
    in ``info.extra["config"]``; a set without the record is taken as another's)."""
    from privsynth.data import minari_io

    try:
        made = minari_io.read_info(dataset_id).extra.get("config")
    except Exception:  # noqa: BLE001 - an unreadable set is made again
        return False
    return made == json.loads(json.dumps(dataclasses.asdict(pc)))


def run_demo(cfg: DemoConfig, *, progress: bool = True, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the whole pipeline; return the report dict (also written to ``<out>/report.json`` and ``report.md``)."""
    threads = cfg.threads or idle_cores()
    log(f"torch threads: {threads}")
    return _run(cfg, threads, progress, log)


def _import_pipeline() -> None:
    """Import torch, the synthesizer, the release and the evaluation (seconds of single-threaded work): the demo
    does it while the data workers simulate, which forked before it."""
    import privsynth.evaluation.mia  # noqa: F401
    import privsynth.evaluation.report  # noqa: F401
    import privsynth.release  # noqa: F401
    import privsynth.synth  # noqa: F401


def _cpu_seconds() -> float:
    """CPU seconds of this process and of its child processes that have ended (data workers, the release writer)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


class _Clock:
    """Wall and CPU seconds per stage and since the start (CPU time depends little on what else the machine runs;
    wall time does)."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}
        self.start_wall, self.start_cpu = time.perf_counter(), _cpu_seconds()

    @contextlib.contextmanager
    def stage(self, name: str) -> Iterator[None]:
        t, c = time.perf_counter(), _cpu_seconds()
        try:
            yield
        finally:
            self.wall[name] = time.perf_counter() - t
            self.cpu[name] = _cpu_seconds() - c


def _in_child(fn: Callable[[], Any]) -> Callable[[], Any]:
    """Start ``fn()`` in a forked child process now; return ``wait()``, which returns its value or raises its error.

    The child shares the parent's memory as it was at the fork (nothing is pickled on the way in), so ``fn`` may
    close over large arrays; only the result travels back.
    """
    import multiprocessing

    if "fork" not in multiprocessing.get_all_start_methods():  # e.g. Windows: run it here, one stage after the other
        try:
            value = fn()
        except BaseException as exc:  # noqa: BLE001 - raised when the caller waits, as from the child
            err = exc

            def fail() -> Any:
                raise err
            return fail
        return lambda: value
    ctx = multiprocessing.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)

    def child() -> None:
        try:
            outcome: tuple[bool, Any] = (True, fn())
        except BaseException as exc:  # noqa: BLE001 - every failure goes back to the parent
            outcome = (False, exc)
        try:
            send.send(outcome)
        except Exception as exc:  # noqa: BLE001 - an unpicklable result or error
            send.send((False, PrivsynthError(f"{type(exc).__name__}: {exc}")))

    proc = ctx.Process(target=child, daemon=True)
    proc.start()
    send.close()

    def wait() -> Any:
        try:
            ok, value = receive.recv()
        except EOFError:
            proc.join()
            raise PrivsynthError(f"the child process ended without a result (exit code {proc.exitcode})") from None
        finally:
            receive.close()
        proc.join()
        if not ok:
            raise value
        return value

    return wait


def _timed_release(dataset: Any, ledger: Any, dataset_id: str, cfg: DemoConfig,
                   split_parts: list[tuple[str, Any]] = ()) -> dict[str, Any]:  # type: ignore[assignment]
    """The guarded release (budget checks, then the Minari write), then the Minari write of ``split_parts`` (``(id,
    dataset)`` of the members / non-members that are not stored yet: thousands of Minari episodes once a split by
    transition breaks episodes, so this child process writes them too); returns spent ε, the wall / CPU seconds of
    each, and the log lines of the split's writes."""
    from privsynth.release import release_dataset

    t, c = time.perf_counter(), time.process_time()
    spent = release_dataset(dataset, ledger, dataset_id, epsilon_budget=cfg.epsilon, delta=cfg.delta, overwrite=True)
    out: dict[str, Any] = {"epsilon": spent, "wall": time.perf_counter() - t, "cpu": time.process_time() - c}
    t, c = time.perf_counter(), time.process_time()
    out["split_lines"] = [_store_part(part_id, part) for part_id, part in split_parts]
    out.update(split_wall=time.perf_counter() - t, split_cpu=time.process_time() - c)
    return out


def _store_part(dataset_id: str, part: Any) -> str:
    """Write one part of the split to the store (replacing a stale one); returns its log line."""
    from privsynth.data import minari_io

    minari_io.write_dataset(part, dataset_id, overwrite=True)
    return f"  wrote {dataset_id}: {part.n_transitions} transitions (split by {part.info.extra['split']['by']})"


_REPORT_FILES = ("report.md", "report.json", "audit.json", "audit.md", "audit_roc.png", "audit-rerun.json",
                 "audit-rerun.md", "audit-rerun-roc.png")


def _run(cfg: DemoConfig, threads: int, progress: bool, log: Callable[[str], None]) -> dict[str, Any]:
    from privsynth.data.split import check_split, split_for_unit

    # cheap checks first (before an older report is removed or any data made): the audit's unit, each unit a
    # random draw, and a member fraction inside (0, 1)
    by = split_for_unit(cfg.unit)
    check_split(cfg.member_fraction, by)
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    # an older run's report and audit describe its split and checkpoint, which this run may replace: never left
    # beside this run's store and work folder (a run that fails leaves no report rather than a stale one)
    for name in _REPORT_FILES:
        (out / name).unlink(missing_ok=True)
    store = Path(cfg.store) if cfg.store else out / "minari"
    os.environ["MINARI_DATASETS_PATH"] = str(store.resolve())

    from privsynth.data import minari_io
    from privsynth.data.pointmaze import PointMazeConfig

    clock = _Clock()
    suffix = "-dense" if cfg.dense else ""
    synthetic_id = f"privsynth/demo-synthetic-{cfg.sensitive_maze}{suffix}-eps{cfg.epsilon:g}-v0"
    minari_io.resolve_id(synthetic_id, for_write=True)  # a malformed id fails before any work

    log("1/5 data: public and sensitive PointMaze sets (generated locally)")
    with clock.stage("data"):
        # public sets are named by their store id, so the card's public_data says where to find them
        jobs = [(f"privsynth/demo-public-{maze}{suffix}-v0",
                 PointMazeConfig(maze=maze, steps=cfg.public_steps, seed=cfg.seed + 1 + i, dense=cfg.dense,
                                 ref_episodes=cfg.ref_episodes, name=f"privsynth/demo-public-{maze}{suffix}-v0"))
                for i, maze in enumerate(cfg.public_mazes)]
        sensitive_id = f"privsynth/demo-sensitive-{cfg.sensitive_maze}{suffix}-v0"
        jobs.append((sensitive_id, PointMazeConfig(maze=cfg.sensitive_maze, steps=cfg.sensitive_steps, seed=cfg.seed,
                                                   dense=cfg.dense, ref_episodes=cfg.ref_episodes)))
        *publics, sensitive = _datasets(jobs, cfg.data_workers, progress, log, meanwhile=_import_pipeline,
                                        sensitive=frozenset({sensitive_id}))
        sensitive = sensitive.mark_sensitive(True)
        split_ids = (f"privsynth/demo-members-{cfg.sensitive_maze}{suffix}-v0",
                     f"privsynth/demo-non-members-{cfg.sensitive_maze}{suffix}-v0")
        members, non_members, to_store = _split_sensitive(sensitive, split_ids, sensitive_id, cfg, log)
    log(f"  split by {by}: members {members.n_transitions} transitions ({members.n_episodes} episodes), "
        f"non-members {non_members.n_transitions} ({non_members.n_episodes})")

    data = _DemoData(publics, sensitive, members, non_members, synthetic_id, split_ids, by, to_store)
    return _pipeline(cfg, threads, out, data, clock, progress, log)


_SPLIT_STREAM = 0x5B117  # domain tag of the membership split's random stream (kept apart from the data generator's)


def membership_seed(seed: int) -> int:
    """The seed of the demo's members / non-members split for demo seed ``seed``: its own stream, not the one the data
    generator (and so the environment, and ``numpy.random.default_rng(seed)``) draws from."""
    import numpy as np

    return int(np.random.SeedSequence([int(seed), _SPLIT_STREAM]).generate_state(1)[0])


def _split_sensitive(sensitive: Any, ids: tuple[str, str], source: str, cfg: DemoConfig,
                     log: Callable[[str], None]) -> tuple[Any, Any, list[tuple[str, Any]]]:
    """Split ``sensitive`` at the release's unit (:func:`~privsynth.data.split.split_for_unit`: by transition for
    ``unit='transition'``), a random ``member_fraction`` of the units as members under ``seed`` (the split of
    ``privsynth datasets split``). Returns the members and non-members named by ``ids``, the split recorded in
    ``info.extra["split"]`` (what the audit reads to decide whether its ε test applies), and the ``(id, part)`` to
    store (:func:`_store_part`; sensitive, as their source, so the audit can be re-run from the CLI): a stored part
    holding the same rows is kept, one of another split deleted now."""
    import numpy as np

    from privsynth.data import minari_io
    from privsynth.data.dataset import ARRAY_FIELDS
    from privsynth.data.split import named_part, split_dataset, split_for_unit

    by = split_for_unit(cfg.unit)
    # the generator seeds the environment with cfg.seed, and numpy's default_rng(cfg.seed) would replay the same
    # stream: membership drawn from it would not be independent of the records, so the split gets its own stream
    # (a seed derived from cfg.seed, recorded in the split: `privsynth datasets split --seed` repeats it)
    split_seed = membership_seed(cfg.seed)
    parts = split_dataset(sensitive, cfg.member_fraction, by=by, seed=split_seed)
    named_parts, to_store = [], []
    for dataset_id, role, part in zip(ids, ("members", "non-members"), parts):
        named = named_part(part, dataset_id, source=source, role=role, fraction=cfg.member_fraction, by=by,
                           seed=split_seed)
        named_parts.append(named)
        if minari_io.dataset_exists(dataset_id):
            old = minari_io.load_dataset(dataset_id)
            if old.info.sensitive == named.info.sensitive and old.info.extra.get("split") == named.info.extra["split"] \
                    and all(np.array_equal(getattr(old, a), getattr(named, a)) for a in ARRAY_FIELDS):
                log(f"  reusing {dataset_id}")
                continue
            minari_io.delete_dataset(dataset_id)  # another split: never left beside this run's checkpoint
        to_store.append((dataset_id, named))
    return named_parts[0], named_parts[1], to_store


_PUBLIC_STAMP = "pretrained.public"  # beside pretrained.pt: the key of the public sets it was pre-trained on


def _drop_stale_pretrain(workdir: Path, key: str, log: Callable[[str], None]) -> None:
    """Delete the work folder's checkpoints (pre-trained, pre-training in progress, fine-tuned from them) unless the
    stamp says they were pre-trained on the public sets of ``key``."""
    from privsynth.demo_audit import STAMP, drop_stale

    drop_stale(workdir, _PUBLIC_STAMP, key, ("pretrained.pt", "pretrain-checkpoint.pt"), ("finetuned.pt", STAMP), log,
               "pre-trained on other public data than this run's")


@dataclass
class _DemoData:
    """What step 1 of the demo hands to the rest: the sets, the members/non-members split (named by the ids it is
    stored under, and its unit), the release's id."""

    publics: list[Any]
    sensitive: Any
    members: Any
    non_members: Any
    synthetic_id: str
    split_ids: tuple[str, str]
    split_by: str
    split_to_store: list[tuple[str, Any]]  # written beside evaluation, with the release


def _pipeline(cfg: DemoConfig, threads: int, out: Path, data: _DemoData, clock: _Clock, progress: bool,
              log: Callable[[str], None]) -> dict[str, Any]:
    """Steps 2-5 of :func:`run_demo`, on the data of step 1, with ``threads`` torch threads (one fewer, and as many
    OpenMP/BLAS threads, while the release's child process takes a core: a thread per busy core stalls every
    parallel op behind a descheduled thread)."""
    from privsynth.demo_audit import (drop_stale_finetune, finetune_key, rerun_command, rows_key, run_demo_audit,
                                      stamp_finetune)
    from privsynth.demo_report import render_report
    from privsynth.evaluation.fidelity import tabular_fidelity
    from privsynth.evaluation.report import evaluate_synthetic
    from privsynth.release import synthesize
    from privsynth.synth import TransitionSynthesizer
    from privsynth.synth.config import demo_config

    publics, sensitive, members, non_members = data.publics, data.sensitive, data.members, data.non_members
    synthetic_id, workdir = data.synthetic_id, out / "work"
    log(f"2/5 synthesize: pre-train on public, DP fine-tune on members (ε={cfg.epsilon:g}, δ={cfg.delta:g}, "
        f"unit={cfg.unit}), sample {cfg.n_samples} from the EMA weights; guarded release written beside steps 3-4")
    public_key = rows_key(publics)  # what pre-training read
    _drop_stale_pretrain(workdir, public_key, log)  # pre-trained on other public sets: pre-train (and fine-tune) again
    key = finetune_key(members, epsilon=cfg.epsilon, delta=cfg.delta, unit=cfg.unit)
    drop_stale_finetune(workdir, key, log)  # a checkpoint that saw other members (an older split) is not resumed
    with clock.stage("synthesize"), torch_threads(threads):
        result = synthesize(  # out_dataset=None: the guard's checks run here, the write runs below
            members,  # the member transitions only: no non-member reaches the synthesizer or its normaliser
            epsilon=cfg.epsilon,
            delta=cfg.delta,
            public=publics,
            unit=cfg.unit,  # type: ignore[arg-type]
            n=cfg.n_samples,
            config=demo_config(),
            overwrite=True,
            workdir=workdir,
            progress=progress,
        )
    stamp_finetune(workdir, key)
    if (workdir / "pretrained.pt").exists():
        (workdir / _PUBLIC_STAMP).write_text(public_key + "\n")
    # the name synthesize gives a release written as synthetic_id
    synthetic = dataclasses.replace(result.dataset, info=dataclasses.replace(result.dataset.info, name=synthetic_id))
    # the Minari writes (one HDF5 episode per transition; the split's episodes broken at every non-member) are
    # single-threaded library work: a child process does them while evaluation and audit, which read the in-memory
    # rows, run here; the report waits for it
    wait_release = _in_child(lambda: _timed_release(synthetic, result.ledger, synthetic_id, cfg,
                                                    data.split_to_store))
    store = cfg.store or str(out / "minari")
    command = rerun_command(store=store, release=synthetic_id, members=data.split_ids[0],
                            non_members=data.split_ids[1], workdir=str(workdir), unit=cfg.unit, seed=cfg.seed,
                            max_units=cfg.audit_units, out=str(out / "audit-rerun.json"))
    try:
        with torch_threads(max(1, threads - 1), native_pools=True):
            log("3/5 evaluate: fidelity, RL-aware checks" + (f", agents {', '.join(cfg.agents)}" if cfg.agents else "")
                + " against the whole sensitive set (whole episodes); fidelity also against the members")
            with clock.stage("evaluate"):
                evaluation = evaluate_synthetic(
                    synthetic,
                    sensitive,
                    agents=cfg.agents,
                    seeds=cfg.agent_seeds,
                    num_updates=cfg.agent_updates,
                    agents_on_real=bool(cfg.agents),
                    public=publics[0],
                    out=out / "evaluation.json",
                    progress=progress,
                )
                fidelity_members = tabular_fidelity(synthetic, members).to_dict()

            log(f"4/5 audit: membership inference on the release (rows and EMA weights), members vs non-members "
                f"split by {data.split_by}, tested against the card's ε")
            with clock.stage("audit"):
                reference = TransitionSynthesizer.load(workdir / "pretrained.pt")
                audit = run_demo_audit(result.synthesizer, reference, synthetic, members, non_members, unit=cfg.unit,
                                       max_units=cfg.audit_units, seed=cfg.seed, out=out, command=command,
                                       checkpoint=str(workdir / "finetuned.pt"))
            log("  " + audit["epsilon_audit"]["line"])
    finally:
        with clock.stage("release_wait"):
            released = wait_release()  # also when a step above failed: the release finishes or fails cleanly
    seconds = {"data": clock.wall["data"], **{f"synth_{k}": v for k, v in result.seconds.items()},
               "synthesize": clock.wall["synthesize"], "release": released["wall"],
               "store_split": released["split_wall"],
               "release_wait": clock.wall["release_wait"], "evaluate": clock.wall["evaluate"],
               "audit": clock.wall["audit"], "total": time.perf_counter() - clock.start_wall}
    # the child's CPU time joins this process's count when it is waited for: report it as the release's
    cpu = {**{k: v for k, v in clock.cpu.items() if k != "release_wait"}, "release": released["cpu"],
           "store_split": released["split_cpu"], "total": _cpu_seconds() - clock.start_cpu}
    for line in released["split_lines"]:
        log(line)
    log(f"  released {synthetic_id}: {synthetic.n_transitions} transitions, spent ε = {released['epsilon']:.3f} "
        f"(budget {cfg.epsilon:g}) at δ = {cfg.delta:g}")

    log("5/5 report")
    split = {"by": data.split_by, "fraction": cfg.member_fraction, "seed": membership_seed(cfg.seed)}
    report = {
        "config": dataclasses.asdict(cfg),
        "datasets": {
            "public": [p.info.name for p in publics],
            "sensitive": sensitive.info.name,
            # sizes only: they are treated as public (the card says so); other statistics of the
            # sensitive data (returns, rates) would be unaccounted releases and stay out of the report's header
            "members": {"id": data.split_ids[0], "episodes": members.n_episodes,
                        "transitions": members.n_transitions},
            "non_members": {"id": data.split_ids[1], "episodes": non_members.n_episodes,
                            "transitions": non_members.n_transitions},
            "split": split,
            "synthetic": synthetic_id,
        },
        "privacy_card": result.ledger.card(),
        "fidelity": evaluation.get("fidelity"),
        "fidelity_members": fidelity_members,
        "trajscore": evaluation.get("trajscore"),
        "rl_checks": evaluation.get("rl_checks"),
        "agents": evaluation.get("agents"),
        "audit": {name: {k: v for k, v in a.items() if k != "roc"}
                  for part in ("data_only", "white_box") for name, a in audit[part]["attacks"].items()},
        "epsilon_audit": {k: audit["epsilon_audit"].get(k) for k in ("status", "line", "notes", "split",
                                                                      "best_possible_bound", "members_needed")},
        "audit_command": command,
        "seconds": seconds,
        "cpu_seconds": cpu,
    }
    (out / "report.json").write_text(json.dumps(report, indent=1, default=str))
    (out / "report.md").write_text(render_report(report, result.ledger.render_markdown(), out))
    stages = ("data", "synth_pretrain", "synth_finetune", "synth_sample", "release", "store_split", "evaluate",
              "audit")
    log("time (s): " + ", ".join(f"{k.removeprefix('synth_')} {seconds[k]:.1f}" for k in stages if k in seconds)
        + f" (release and store_split beside evaluate and audit, then waited {seconds['release_wait']:.1f}); "
        f"total {seconds['total']:.1f}")
    log("CPU (s, with child processes): " + ", ".join(f"{k} {v:.1f}" for k, v in cpu.items() if k != "total")
        + f"; total {cpu['total']:.1f}")
    log(f"wrote {out / 'report.md'} (total {seconds['total']:.0f} s)")
    return report
