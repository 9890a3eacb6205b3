"""Where privacy randomness comes from: OS entropy by default, a recorded seed only behind an explicit switch.

Every DP mechanism in privsynth draws its noise (and DP-SGD its Poisson masks and the randomness its loss draws
itself, :meth:`NoiseSource.keyed_global_rng`) from a :class:`NoiseSource` (docs/privacy.md, "Randomness"). Two kinds:

* ``NoiseSource()`` (secure, the default): each generator it hands out is keyed with fresh bits from the operating
  system (:mod:`secrets`, i.e. ``os.urandom``), which are never stored, logged or written on a card. Nobody, the data
  holder included, can replay the noise and subtract it.
* ``NoiseSource.reproducible(seed)``: a deterministic stream for tests and benchmarks. Its ledger events are tagged
  ``noise="reproducible"``; the card then says "not DP: noise reproducible" and the release guard refuses it.

Why our own code: Opacus' ``secure_mode`` needs torchcsprng, which has no build for the torch pinned here. We key
torch's and numpy's generators from OS entropy instead (64 bits for torch's CPU generator, 128 bits for numpy's
PCG64) and re-key torch generators on every :meth:`NoiseSource.torch_generator` call, so the one property DP needs
from the randomness here, that nothing an attacker can read determines it, holds. The draws themselves use the
generators' ordinary samplers (``torch.randn``, ``numpy.random.Generator.normal``).
"""
from __future__ import annotations

import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch

__all__ = ["NoiseSource", "SECURE", "REPRODUCIBLE", "NOT_DP_NOTE", "as_noise_source"]

SECURE = "secure"
REPRODUCIBLE = "reproducible"
NOT_DP_NOTE = (
    "NOT DP: noise reproducible. The privacy noise was drawn from a recorded seed, so anyone who knows it can "
    "regenerate and subtract the noise; this output is for tests and benchmarks only and cannot be released."
)


@dataclass(frozen=True)
class NoiseSource:
    """The randomness of privacy mechanisms (noise, sampling masks, teacher partitions' keys).

    ``seed=None`` (default): OS entropy, nothing recorded. An integer seed makes the stream reproducible and marks
    every event it feeds as not DP (:data:`NOT_DP_NOTE`).
    """

    seed: int | None = None
    # reproducible mode: calls without an explicit stream take the next stream number, so two mechanisms fed by one
    # source never reuse the same draws (the first call gets stream 0, as before)
    _streams: list = field(default_factory=lambda: [0], compare=False, repr=False)  # next stream (mutable cell)

    @classmethod
    def reproducible(cls, seed: int) -> "NoiseSource":
        """A deterministic source for tests and benchmarks; its outputs are refused by the release guard."""
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise TypeError(f"a reproducible noise source needs an integer seed, got {seed!r}")
        return cls(int(seed))

    @property
    def secure(self) -> bool:
        return self.seed is None

    @property
    def kind(self) -> str:
        """``"secure"`` or ``"reproducible"``: recorded on every ledger event the source feeds."""
        return SECURE if self.secure else REPRODUCIBLE

    def _stream(self, stream: int | None) -> int:
        if stream is not None:
            return int(stream)
        n = self._streams[0]
        self._streams[0] = n + 1
        return n

    def torch_generator(self, stream: int | None = None) -> torch.Generator:
        """A CPU generator: keyed from OS entropy (secure) or from ``(seed, stream)`` (reproducible; ``stream=None``
        takes the source's next stream number)."""
        if self.secure:
            key = secrets.randbits(63)
        else:
            stream = self._stream(stream)
            key = int(np.random.SeedSequence([self.seed, int(stream)]).generate_state(1, np.uint64)[0] >> 1)
        return torch.Generator().manual_seed(key)

    @contextmanager
    def keyed_global_rng(self, stream: int | None = None) -> Iterator[None]:
        """Inside the block, torch's global RNG (CPU, and every CUDA device already in use) is keyed like
        :meth:`torch_generator`: from OS entropy (secure) or ``(seed, stream)`` (reproducible). On exit it is put back
        as it was, so the key is held nowhere afterwards and code after the block draws what it drew before.

        For the randomness a DP-SGD loss draws itself (diffusion σ and noise, fragment or row picks): that randomness
        changes the clipped per-unit gradients and is handed out by batch position, so it must be as secret as the
        noise, never derived from a seed on the card (DP-SGD's sensitivity C holds only then)."""
        key = self.torch_generator(stream).initial_seed()
        devices = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
        with torch.random.fork_rng(devices=devices):
            torch.default_generator.manual_seed(key)
            for d in devices:
                torch.cuda.default_generators[d].manual_seed(key)
            yield

    def numpy_rng(self, stream: int | None = None) -> np.random.Generator:
        """A numpy generator (PCG64): 128 bits of OS entropy (secure) or ``(seed, stream)`` (reproducible; ``stream=None``
        takes the source's next stream number)."""
        if self.secure:
            return np.random.default_rng(secrets.randbits(128))
        return np.random.default_rng([self.seed, self._stream(stream)])

    def secret_key(self, nbytes: int = 16) -> bytes:
        """Bytes for keyed hashes (e.g. assigning records to PATE teachers); never written anywhere."""
        if self.secure:
            return secrets.token_bytes(nbytes)
        return np.random.SeedSequence([self.seed, 0x6B6579]).generate_state((nbytes + 3) // 4, np.uint32).tobytes()[:nbytes]


def as_noise_source(source: NoiseSource | None) -> NoiseSource:
    """``None`` means the secure default."""
    if source is None:
        return NoiseSource()
    if not isinstance(source, NoiseSource):
        raise TypeError(f"expected a NoiseSource, got {type(source).__name__}")
    return source
