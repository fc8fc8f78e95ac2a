"""What an engine step costs, learned online from measured step times.

A step's time is modelled as a fixed part plus one part per prefill token,
per decoding sequence and per KV-cache token its attention reads: the
GEMMs grow with the tokens in the step, the sampler and per-sequence
bookkeeping with the sequences, attention with the context it reads. The
coefficients are fitted, none negative, by least squares over the most
recent steps, so they follow the machine's load and the model.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

WINDOW_STEPS = 256
"""Steps the fit remembers: a few seconds of serving, so a change of load
(another process on the cores) shows within seconds."""
MARGIN_QUANTILE = 0.99
"""Steps may take longer than predicted (noise, page faults, the other
process on the cores): the margin is this quantile of measured / predicted
over the remembered steps, so that few steps exceed the objective. The
objective is a p99 inter-token latency: with the 95th percentile the p99
of mixed traffic on the 0.5b preset came out 12-14 % over it."""
MAX_MARGIN = 1.5
REFIT_EVERY = 8
"""New steps between two fits (about 0.25 ms each): the cost moves slowly,
and a tiny model's steps take only a few milliseconds."""


@dataclass(frozen=True)
class StepShape:
    prefill_tokens: int
    """Prompt tokens the step computes (chunks of prefills)."""
    decode_seqs: int
    """Sequences that each generate one token in the step."""
    kv_tokens: int
    """Context tokens the step's attention reads (every scheduled
    sequence's tokens already in the KV cache)."""


@dataclass(frozen=True)
class StepCost:
    fixed_s: float
    per_prefill_token_s: float
    per_decode_seq_s: float
    per_kv_token_s: float

    def predict(self, shape: StepShape) -> float:
        return (
            self.fixed_s
            + self.per_prefill_token_s * shape.prefill_tokens
            + self.per_decode_seq_s * shape.decode_seqs
            + self.per_kv_token_s * shape.kv_tokens
        )


def _features(shape: StepShape) -> tuple[float, float, float, float]:
    return (1.0, shape.prefill_tokens, shape.decode_seqs, shape.kv_tokens)


def nonnegative_least_squares(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """x >= 0 minimising |a x - b|: least squares, dropping the column with
    the most negative coefficient until none is negative (the columns are
    few, and a negative cost per token would make the sizing nonsense)."""
    active = list(range(a.shape[1]))
    x = np.zeros(a.shape[1])
    while active:
        solution, *_ = np.linalg.lstsq(a[:, active], b, rcond=None)
        if (solution >= 0).all():
            x[active] = solution
            return x
        active.pop(int(np.argmin(solution)))
    return x


class StepCostModel:
    """Measured steps in, the fitted ``StepCost`` out."""

    def __init__(self, window: int = WINDOW_STEPS) -> None:
        self._features = np.zeros((window, 4))
        self._seconds = np.zeros(window)
        self._count = 0
        """Steps recorded in all; the last ``window`` are remembered."""
        self._cost: StepCost | None = None
        self._margin = 1.0
        self._new_steps = 0

    def record(self, shape: StepShape, seconds: float) -> None:
        if shape.prefill_tokens == 0 and shape.decode_seqs == 0:
            return
        slot = self._count % len(self._seconds)
        self._features[slot] = _features(shape)
        self._seconds[slot] = seconds
        self._count += 1
        self._new_steps += 1

    def _remembered(self) -> tuple[np.ndarray, np.ndarray]:
        """Features and times of the remembered steps, oldest first."""
        window = len(self._seconds)
        if self._count <= window:
            return self._features[: self._count], self._seconds[: self._count]
        order = np.roll(np.arange(window), -(self._count % window))
        return self._features[order], self._seconds[order]

    def recorded(self) -> list[tuple[StepShape, float]]:
        """The remembered steps and their times in seconds, oldest first."""
        features, seconds = self._remembered()
        return [
            (StepShape(int(row[1]), int(row[2]), int(row[3])), float(time))
            for row, time in zip(features, seconds, strict=True)
        ]

    @property
    def ready(self) -> bool:
        """A prefill step and a pure decode step seen: without both, the
        cost of a prefill token cannot be told from the rest of a step."""
        prefill = self._remembered()[0][:, 1]
        return bool((prefill > 0).any() and (prefill == 0).any())

    def cost(self) -> StepCost | None:
        """The fit over the remembered steps; None until ``ready``. While
        the remembered steps lack a prefill or a decode step (a long spell
        of decoding only), the last fit stands."""
        if self._cost is not None and self._new_steps < REFIT_EVERY:
            return self._cost
        if not self.ready:
            return self._cost
        a, b = self._remembered()
        # Columns scaled to 1 so that the fit does not favour the columns
        # with the largest numbers (KV tokens).
        scale = np.abs(a).max(axis=0)
        scale[scale == 0] = 1.0
        x = nonnegative_least_squares(a / scale, b) / scale
        self._cost = StepCost(*(float(v) for v in x))
        predicted = np.maximum(a @ x, 1e-9)
        ratio = float(np.quantile(b / predicted, MARGIN_QUANTILE))
        self._margin = min(MAX_MARGIN, max(1.0, ratio))
        self._new_steps = 0
        return self._cost

    def margin(self) -> float:
        """How much longer than predicted a step may take (>= 1): the share
        of the objective a step is planned for is 1 / margin."""
        self.cost()
        return self._margin
