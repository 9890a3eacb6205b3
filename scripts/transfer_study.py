"""A quick study of PrivORL-n's DP fine-tuning schedule on a locomotion transfer proxy (issue 37): from the suite's
public pre-trained checkpoint, DP fine-tune at ε = 10 with each schedule, sample 50k rows, train 3 agents per agent
kind (20k updates, batched) and print the share of the public-to-real gap closed.

    OMP_NUM_THREADS=1 python scripts/transfer_study.py --checkpoint PATH --real 53.5 --public 8.8 \
        --schedule epochs=30 --schedule epochs=150 [--schedule epochs=150,lr=1e-3]
    OMP_NUM_THREADS=1 python scripts/transfer_study.py --env hopper --agent iql --agent td3bc \
        --checkpoint PATH --real 62.2 --real 69.1 --public 1.4 --public 2.5 --schedule epochs=150

Schedule keys: epochs, lr, batch (DP fine-tune), clip (max_grad_norm), ema (EMA decay), mult (noise multiplicity K:
diffusion-noise draws per record averaged inside its one clipped gradient, DPDM), cols=1 (the DP loss averages the
state and action columns only, which the simulator repair keeps: dp.fit_columns = "state_action"; cols=0 every column;
without it the route's "auto", recorded in the line's fit_columns), lora (rank R of low-rank adapters plus biases and
norms instead of every parameter: dp.trainable = "lora"), finecur=0/1 (curiosity during the DP fine-tune, FineCur;
else the checkpoint's setting), rho=R (with finecur=1: the share of each fine-tune batch replaced by the most novel
pool rows, curiosity.rate; else the checkpoint's, the paper's 0.3), pol=E (a DP behaviour policy at ε = E relabels the
actions before post=N: privsynth.synth.dp_policy; polmode=1 replaces them, else the residual around the release's own
policy is kept; polepochs), route=1 (the release exactly as `privsynth synthesize` makes it: the default
post-processing and DP action relabel, one budget; share=S sets the relabel's share of epsilon; pair=1 also reports
the same fine-tuned model's rows without the relabel, from the same first draw and top-up draws), seed (synthesizer
seed: initial noise of the fine-tune and the sampler), rows (synthetic rows sampled), dp=0 (the same fine-tune without
clipping or noise: the no-DP control), real=1 (agents on the sensitive set itself: the real row), ft=0 (no fine-tune:
the public model alone, the control row), ceil=1 (a diagnosis: a synthesizer trained without privacy on the sensitive
set itself, no public data; width, depth, epochs, curio: see _ceiling), post=N (post-processing, free under DP): 1
actions clipped, s', reward and terminal recomputed by the public simulator from each (s, a); 2 only the terminal flag
recomputed from each row's own s' by the environment's rule; 3 as 2, and rows starting in a state the environment ends
episodes in dropped; 4 = 1 and 3 (the default repair of `release.synthesize` on locomotion since round 4; without
post=N the rows stay as sampled); chain=H (after post=N, or on a saved release that was re-simulated) continues the
rows as H-step simulator rollouts (the `rollout` post-processing step, privsynth.release.rollout; free; with mix=F
only the first share F of the rows, the rest kept as they were: a diagnosis); edge=X (a diagnosis, before post=N)
moves actions at the box edge (|a| >= 1) to ±X; beta=B (a diagnosis) trains IQL with that AWR inverse temperature
instead of CORL's 3.

--rows-from reads the rows an earlier run wrote with --save instead of a new fine-tune, so post=N measures
post-processing on that very release (paired); --diagnose records each row's data checks (--no-agents: only them). The pre-trained
checkpoint and the real / public-alone scores (one per --agent, in the same order) come from
`evaluation/suites/transfer_<env>.yaml` (its pretrain artifact and its agent_real / agent_public cells). Every dataset
is our own public rollout; nothing here reads a data holder's data.
"""
from __future__ import annotations

import argparse
import copy
import json
import pathlib
import time

import numpy as np


def _schedule(text: str) -> dict[str, float]:
    out = {}
    for part in text.split(","):
        k, _, v = part.partition("=")
        out[k.strip()] = float(v)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", required=True, help="the suite's pretrain artifact (model.pt)")
    ap.add_argument("--env", default="walker2d", choices=["walker2d", "hopper"], help="the suite's sensitive body")
    ap.add_argument("--agent", action="append", default=[], help="iql (default) / td3bc (repeatable)")
    ap.add_argument("--real", type=float, action="append", required=True,
                    help="real-data final score per --agent (the suite's agent_real)")
    ap.add_argument("--public", type=float, action="append", required=True,
                    help="public-alone final score per --agent (agent_public)")
    ap.add_argument("--schedule", action="append", default=[],
                    help="epochs=E[,lr=L][,batch=B][,clip=C][,ema=D][,mult=K][,cols=1][,lora=R][,finecur=1][,rho=R][,pol=E][,polmode=1][,route=1[,share=S][,pair=1]][,ceil=1[,width=W][,depth=D]][,seed=S][,rows=R][,dp=0][,real=1][,post=1][,chain=H][,edge=X][,beta=B][,ft=0] (repeatable)")
    ap.add_argument("--sensitive-steps", type=int, default=20_000,
                    help="size of the sensitive set (the suites use 20k; a larger one tests how N changes the cost of DP)")
    ap.add_argument("--epsilon", type=float, default=10.0)
    ap.add_argument("--delta", type=float, default=1e-5, help="below 1/N (1e-6 for --sensitive-steps 200000)")
    ap.add_argument("--updates", type=int, default=20_000)
    ap.add_argument("--diagnose", action="store_true",
                    help="record each row's data checks against the sensitive set (simulator replay of s', reward and "
                         "terminal agreement, terminal rate, k-NN policy R^2 on real states): what separates releases")
    ap.add_argument("--no-agents", action="store_true", help="with --diagnose: the checks only, no agents trained")
    ap.add_argument("--rows-from", default=None, help="an .npz of --save: reuse that release's rows (no fine-tune)")
    ap.add_argument("--save", default=None, help="directory: write each row's rows as <label>.npz (for later checks)")
    args = ap.parse_args()

    from privsynth.data.locomotion.generate import LocomotionConfig, generate_locomotion
    from privsynth.evaluation.agents import AgentJob, train_batched
    from privsynth.synth import registry

    agents = args.agent or ["iql"]
    if not len(agents) == len(args.real) == len(args.public):
        ap.error("give one --real and one --public per --agent")
    sens = generate_locomotion(LocomotionConfig(env=args.env, kind="medium", steps=args.sensitive_steps,
                                                seed=0)).mark_sensitive()
    base = registry.load(args.checkpoint)
    for text in args.schedule or ["epochs=30"]:
        sched = _schedule(text)
        synth = copy.deepcopy(base)
        cfg = synth.config
        cfg.dp.trainable = "lora" if sched.get("lora") else "all"
        cfg.dp.lora_rank = int(sched.get("lora") or cfg.dp.lora_rank)
        cfg.finetune.epochs = sched.get("epochs", cfg.finetune.epochs)
        cfg.finetune.lr = sched.get("lr", cfg.finetune.lr)
        cfg.finetune.batch_size = int(sched.get("batch", cfg.finetune.batch_size))
        cfg.dp.max_grad_norm = sched.get("clip", cfg.dp.max_grad_norm)
        cfg.dp.noise_multiplicity = int(sched.get("mult", cfg.dp.noise_multiplicity))
        if "cols" in sched:  # the DP loss over the state and action columns only, or every column (dp.fit_columns;
            # else "auto": the route resolves it, the state and action columns on locomotion above eps = 1)
            cfg.dp.fit_columns = "state_action" if sched["cols"] else "all"
        cfg.finetune.ema_decay = sched.get("ema", cfg.finetune.ema_decay)
        cfg.private = bool(sched.get("dp", 1.0))
        if "finecur" in sched:  # FineCur: curiosity in the fine-tune (else the checkpoint's setting, "auto" kept)
            cfg.finetune_curiosity = bool(sched["finecur"])
        cfg.curiosity.rate = sched.get("rho", cfg.curiosity.rate)  # share of each batch from the novelty pool
        seed = int(sched.get("seed", 0))
        cfg.seed = seed
        t0 = time.time()
        n_rows = int(sched.get("rows", 50_000))
        # the row, decided once: the real data, a DP release, the no-DP control or the public model alone
        kind = ("saved" if args.rows_from else "real" if sched.get("real") else "public" if not sched.get("ft", 1.0)
                else "ceiling" if sched.get("ceil") else "dp" if cfg.private else "nodp")
        if kind == "saved":  # an earlier release of this script (arrays and info JSON, never unpickled)
            from privsynth.evaluation.bench.dataset_cache import load_dataset_file

            rows = load_dataset_file(pathlib.Path(args.rows_from))
        elif kind == "real":  # agents trained on the sensitive set itself (our own rollout)
            rows = sens
        elif kind == "ceiling":  # diagnosis, never released: a synthesizer fitted to the sensitive set without privacy
            synth, rows = _ceiling(sens, sched, n_rows, seed)
        elif kind == "dp":  # through the one release route, writing nothing
            from privsynth.release import synthesize

            if sched.get("route"):  # the release exactly as the product makes it: its default post-processing
                # and its DP action relabel (share=S of epsilon; 0 = none), all within one budget
                res = synthesize(sens, epsilon=args.epsilon, delta=args.delta, unit="transition", pretrained=synth,
                                 n=n_rows, out_dataset=None, progress=False,
                                 policy_share=sched.get("share", "auto"))
                rows = res.dataset
                post = rows.info.extra.get("postprocess", {})
                pol = rows.info.extra.get("policy_relabel", {})
                route_spent = res.epsilon
                if sched.get("pair"):  # the same fine-tuned model's rows without the relabel (paired: the first
                    # draw is the same sample), repaired and topped up as the route does
                    fine = res.synthesizer  # its top-up draws are the route's too (the same draw_seed)
                    paired = _repaired(fine, sens, n_rows, fine.config.seed, name=rows.info.name)
            else:  # rows as sampled: post=N below applies the repair (post=4 is the default repair on locomotion)
                rows = synthesize(sens, epsilon=args.epsilon, delta=args.delta, unit="transition", pretrained=synth,
                                  n=n_rows, out_dataset=None, progress=False, postprocess=False).dataset
        else:
            if kind == "nodp":  # the no-DP control, never released
                synth.finetune(sens, args.epsilon, args.delta, "transition", progress=False)
            else:  # the public model alone, labelled with the sensitive set's (public) environment
                synth.adopt_environment(sens.info)
            rows = registry.sample(synth, n_transitions=n_rows, seed=seed)
        if not sched.get("route"):
            pol, post, route_spent = {}, {}, None
        if sched.get("pol"):  # a DP behaviour policy relabels the actions (privsynth.synth.dp_policy); before post=N
            rows, pol = _relabel(rows, sens, sched, args)
        if sched.get("edge"):  # diagnosis: actions clipped to the box edge moved inside it to ±edge (then post=N)
            import dataclasses as dc

            act = np.clip(rows.actions, -1.0, 1.0)
            at_edge = np.abs(act) >= 1.0
            rows = dc.replace(rows, actions=np.where(at_edge, np.sign(act) * sched["edge"], act).astype(act.dtype))
        if sched.get("post"):  # free: a function of the rows and the public environment only
            from privsynth.release.postprocess import LOCOMOTION_DEFAULT, postprocess, step_options

            steps = {1: "clip,resimulate,reward", 2: "terminal", 3: "terminal,healthy",
                     4: LOCOMOTION_DEFAULT}[int(sched["post"])]
            rows, stats = postprocess(rows, environment=sens.info, **step_options(steps))
            post = {k: v for k, v in stats.items() if isinstance(v, (int, float))}
        if sched.get("chain"):  # free: rows continued as simulator rollouts (privsynth.release.rollout)
            from privsynth.release.rollout import chain_rollouts

            mix = float(sched.get("mix", 1.0))  # diagnosis: mix=F rolls out a share F of the rows, keeps the rest
            k = int(round(mix * rows.n_transitions))
            if k < rows.n_transitions:
                from privsynth.data.dataset import OfflineDataset

                if rows.n_episodes != rows.n_transitions:
                    raise SystemExit("mix=F splits a release of one row per episode")
                rolled, chained = chain_rollouts(rows.select_episodes(np.arange(k)), horizon=int(sched["chain"]))
                rows = OfflineDataset.concatenate([rolled, rows.select_episodes(np.arange(k, rows.n_transitions))],
                                                  info=rolled.info)
            else:
                rows, chained = chain_rollouts(rows, horizon=int(sched["chain"]))
            post = {**post, **{f"chain_{k}": v for k, v in chained.items() if isinstance(v, (int, float))}}
        ft = time.time() - t0
        if isinstance(post.get("rollout"), dict):  # the route's rollouts, recorded as a chain=N schedule's are
            post = {**post, **{f"chain_{k}": v for k, v in post["rollout"].items()}}
        post = {k: v for k, v in post.items() if isinstance(v, (int, float))}
        pol = {k: v for k, v in pol.items() if isinstance(v, (int, float, str)) and k != "note"}
        out = {"env": args.env, "sensitive_steps": args.sensitive_steps, "delta": args.delta, "schedule": sched,
               "denoiser": f"{synth.config.denoiser.width}x{synth.config.denoiser.depth}",
               "epsilon": {"real": "real", "public": 0.0, "dp": args.epsilon, "nodp": None, "saved": args.rows_from,
                           "ceiling": None}[kind],
               "dp_steps": synth.history[-1]["steps"] if kind in ("dp", "nodp", "ceiling") else 0,
               "noise_multiplier": synth.history[-1].get("noise_multiplier") if kind == "dp" else None,
               "finetune_and_sample_s": round(ft, 1), "postprocess": post, "policy": pol, "epsilon_spent": route_spent}
        if kind in ("dp", "nodp"):  # the loss columns the fine-tune fitted (resolved from "auto" by the route)
            out["fit_columns"] = synth.history[-1].get("fit_columns", "all")
        variants = [("", rows)]
        if kind == "dp" and sched.get("route") and sched.get("pair"):
            variants.append(("no relabel (same fine-tune, same first draw)", paired))
        for variant, rows in variants:
            _report(dict(out, variant=variant) if variant else out, rows, sens, sched, args, agents, train_batched,
                    AgentJob)


def _report(out, rows, sens, sched, args, agents, train_batched, AgentJob) -> None:
    """One output line: the row's data checks, its saved rows and its agents' scores."""
    if args.diagnose:
        out["checks"] = diagnose(rows, sens)
    if args.save:
        from privsynth.evaluation.bench.dataset_cache import save_dataset

        label = ("_".join(f"{k}{v:g}" for k, v in sched.items()) or "default") + ("_norelabel" if out.get("variant")
                                                                                else "")
        path = pathlib.Path(args.save) / f"{args.env}_{args.sensitive_steps}_{label}.npz"
        save_dataset(rows, path)
        out["saved"] = str(path)
    for agent, real, public in zip(agents, args.real, args.public) if not args.no_agents else ():
        config = None
        if agent == "iql" and sched.get("beta"):  # diagnosis: IQL's AWR inverse temperature (CORL 3.0)
            from privsynth.evaluation.agents.iql import IQLConfig

            config = IQLConfig(beta=sched["beta"])
        runs = train_batched([AgentJob(rows, sens.info, s) for s in (0, 1, 2)], agent, num_updates=args.updates,
                             eval_every=2000, eval_episodes=5, final_k=3, progress=False, config=config)
        scores = np.array([r.final_score for r in runs])
        out[f"{agent}_final"] = [round(float(s), 1) for s in scores]
        out[f"{agent}_mean"] = round(float(scores.mean()), 1)
        out[f"{agent}_gap_closed"] = round(float((scores.mean() - public) / (real - public)), 2)
    print(json.dumps(out), flush=True)


def _ceiling(sens, sched, n_rows, seed):
    """ceil=1: the synthesizer's reach without privacy or public data (a diagnosis, SynthER's recipe: a diffusion
    model trained on the data itself): the cpu preset's transition synthesizer with a width x depth denoiser
    (width=W, depth=D; default 256 x 2), trained without privacy on the sensitive set for epochs=E (default 300) at
    batch 256 with curiosity off (curio=1 on), sampled, then the route's locomotion repair and top-up."""
    from privsynth.synth import TransitionSynthesizer
    from privsynth.synth.config import DenoiserConfig, cpu_config

    cfg = cpu_config()
    cfg.seed = seed
    cfg.denoiser = DenoiserConfig(width=int(sched.get("width", 256)), depth=int(sched.get("depth", 2)))
    cfg.pretrain.epochs = float(sched.get("epochs", 300.0))
    cfg.pretrain_curiosity = bool(sched.get("curio", 0.0))
    synth = TransitionSynthesizer(cfg)
    synth.pretrain(sens.mark_sensitive(False), progress=False)  # a diagnosis on our own rollout, never released
    return synth, _repaired(synth, sens, n_rows, seed, sample_seed=seed)


def _repaired(synth, sens, n_rows, seed, *, sample_seed=None, name=None):
    """``n_rows`` rows of ``synth`` after the route's locomotion repair, topped up with more draws as the route does
    (their seeds from ``seed``, privsynth.release.postprocess.draw_seed); the first draw with ``sample_seed``."""
    from privsynth.release.postprocess import LOCOMOTION_DEFAULT, draw_seed, step_options, topped_up
    from privsynth.release.support import prepare_release

    first = prepare_release(synth.sample(n_rows, seed=sample_seed, name=name), sens.info)
    return topped_up(first, lambda k, i: prepare_release(synth.sample(k, seed=draw_seed(seed, i)), sens.info),
                     n_rows, **step_options(LOCOMOTION_DEFAULT))[0]


def _relabel(rows, sens, sched, args):
    """pol=E: a DP behaviour policy at ε = E (its own DP-SGD, started from the plain fit on the release's rows)
    relabels the rows' actions; polmode=1 replaces them, otherwise the residual around the release's own policy is
    kept. Study accounting: E is spent on top of the release's ε (the product splits one budget)."""
    import dataclasses as dc

    from privsynth.synth.dp_policy import DPPolicyConfig, fit_dp, fit_plain, relabel_actions

    pcfg = DPPolicyConfig(mode="replace" if sched.get("polmode") == 1 else "residual",
                          epochs=sched.get("polepochs", 50.0))
    public_rows = dc.replace(rows, info=dc.replace(rows.info, sensitive=False))
    ref = fit_plain(public_rows, pcfg)
    policy, res = fit_dp(sens, ref, pcfg, epsilon=sched["pol"], delta=args.delta)
    out = relabel_actions(public_rows, policy, mode=pcfg.mode, reference=ref)
    return dc.replace(out, info=rows.info), {"epsilon": round(res.epsilon, 3), "sigma": round(res.noise_multiplier, 3),
                                             "steps": res.steps, "mode": pcfg.mode}


def diagnose(rows, sens) -> dict[str, float | None]:
    """What a release's rows say against the sensitive set (research on our own rollouts, never a release step):
    simulator replay (s' error relative to the real step, reward error, agreement of the flag with a simulator step
    from (s, a)), the environment's termination rule read at each row's s and s' (shares of rows stepping into and
    starting from a state the environment ends episodes in, and of flagged rows among the former), terminal rate,
    the R^2 of a k-NN state -> action policy fitted on the rows and scored on real states, and the nearest-neighbour
    closeness and coverage of the rows' states (privsynth.evaluation.state_distance)."""
    from privsynth.data.env_adapters import adapter_for
    from privsynth.evaluation.fidelity import policy_r2
    from privsynth.evaluation.rl_checks import rl_checks
    from privsynth.evaluation.state_distance import state_distance

    checks = rl_checks(rows, sens)
    near = state_distance(rows, sens)
    syn = checks["synthetic"]
    dyn, rew = syn.get("dynamics") or {}, syn.get("reward") or {}
    adapter = adapter_for(sens.info, sens.observations)
    try:
        ends, starts = adapter.terminated_at(rows.next_observations), adapter.terminated_at(rows.observations)
    finally:
        adapter.close()
    return {"terminal_rate": round(float(rows.terminals.mean()), 5),
            "terminal_rate_real": round(float(sens.terminals.mean()), 5),
            "terminal_agreement": syn.get("terminal_agreement"),
            "next_state_fallen": round(float(ends.mean()), 5),
            "next_state_fallen_and_flagged": round(float((ends & rows.terminals).mean()), 5),
            "flagged_not_fallen": round(float((~ends & rows.terminals).mean()), 5),
            "start_fallen": round(float(starts.mean()), 5),
            "next_state_rel_error": dyn.get("relative_error"),
            "reward_mae": rew.get("mean_abs_error"),
            "reward_mean": round(float(rows.rewards.mean()), 4), "reward_mean_real": round(float(sens.rewards.mean()), 4),
            "policy_r2": round(policy_r2(rows, sens), 3), "coverage_jaccard": checks["coverage"].get("overlap_jaccard"),
            "state_closeness": near["closeness"], "state_coverage": near["coverage"]}


if __name__ == "__main__":
    main()
