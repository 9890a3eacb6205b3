"""Trajectory-level DP synthesis: PrivORL-j (conditional diffusion transformer over fragments, stitched into
trajectories) and its baselines, the temporal U-Net variant (PrivORL-j-U) and the autoregressive DP-Transformer.
See docs/trajectories.md."""
from privsynth.synth.trajectory.config import TrajSynthConfig, cpu_config, paper_config, tiny_config
from privsynth.synth.trajectory.synthesizer import TrajectorySynthesizer, TrajectoryLoss

__all__ = ["TrajSynthConfig", "TrajectorySynthesizer", "TrajectoryLoss", "cpu_config", "paper_config", "tiny_config"]
