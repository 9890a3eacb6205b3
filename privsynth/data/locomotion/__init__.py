"""MuJoCo locomotion behaviour policies (SAC) and D4RL-style datasets made from them (PrivORL's third domain)."""
