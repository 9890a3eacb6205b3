"""Acrobot datasets for the kickstart DP chain: 'sensitive' episodes of the suite's PPO teacher and 'public'
episodes of a uniform-random policy (no private information).

    OMP_NUM_THREADS=1 python scripts/kickstart_make_acrobot_data.py --teacher-dir evaluation/kickstarting --episodes 150
"""
from __future__ import annotations

import argparse
from pathlib import Path

import torch

from privsynth.data.minari_io import write_dataset
from privsynth.methods.kickstart.experiments import SuiteConfig, load_teacher, make_env
from privsynth.methods.kickstart.offline import collect_dataset


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--teacher-dir", type=Path, default=Path("evaluation/kickstarting"))
    ap.add_argument("--episodes", type=int, default=150)
    ap.add_argument("--public-episodes", type=int, default=40)
    args = ap.parse_args()
    torch.set_num_threads(1)
    cfg = SuiteConfig()
    net, _ = load_teacher(args.teacher_dir, cfg)
    sens = collect_dataset(make_env(cfg.env_id), net, args.episodes, seed=1000, env_id=cfg.env_id, sensitive=True,
                           name="acrobot-teacher")
    write_dataset(sens, "privsynth/acrobot-kick-teacher-v0", overwrite=True)
    uniform = lambda x: torch.zeros(x.shape[0], 3)  # noqa: E731
    pub = collect_dataset(make_env(cfg.env_id), uniform, args.public_episodes, seed=5000, env_id=cfg.env_id,
                          sensitive=False, name="acrobot-random")
    write_dataset(pub, "privsynth/acrobot-kick-random-v0", overwrite=True)
    print(f"sensitive: {sens.n_episodes} episodes, {len(sens)} transitions; public: {pub.n_episodes} episodes, {len(pub)}")


if __name__ == "__main__":
    main()
