"""The sweep's time-left estimate, weighted by each run's work.

A sweep mixes runs of very different sizes: a design card trains 4- and 16-layer models, and a ladder
widths 64 to 256. Averaging the wall time of the runs finished so far and multiplying by the runs left
says "12 minutes" after the small runs finish first and the large ones are still queued. Instead each
run is given its work from its config (the matmul work of training and evaluating it, in arbitrary
units), the finished runs give this machine's seconds per unit of work, and the time left is that rate
times the work not yet done, shared among the workers:

    work(run)  = tokens (trained + evaluated / 3) x per-token work
    per token  = n_layer (4 + 2 mlp_ratio) C^2 + n_layer 2 T C + C V      (C width, T context, V vocabulary)
    time left  = (sum of finished walls / their work) x (work of the runs not finished) / workers

What a design adds beyond these matmuls (a depth-wise mix, a convolution) is not in the formula; the
rate measured on the sweep's own finished runs takes it in as they finish. (train/throughput.py's
flops_per_token counts a built model's own Linear layers, for MFU; the plan has only configs, and
building every planned model to count them would cost more than the estimate is worth.)
"""

from __future__ import annotations


def run_work(config) -> float:
    """A run's work in arbitrary units (a forward + backward of one token through the blocks' matmuls
    and the head is the unit's scale); evaluation counts its forward passes as a third of a step's."""
    m, t = config.model, config.train
    per_token = (m.n_layer * (4 + 2 * m.mlp_ratio) * m.n_embd ** 2 + m.n_layer * 2 * m.block_size * m.n_embd
                 + m.n_embd * m.vocab_size)
    trained = t.steps * t.batch_size * t.grad_accum * m.block_size
    evaluations = t.steps // max(t.eval_interval, 1) + 1
    evaluated = evaluations * t.eval_iters * (t.eval_batch_size or t.batch_size) * m.block_size
    return float(per_token * (trained + evaluated / 3))


class TimeLeft:
    """finished(run_id, wall) as runs end; seconds(jobs) is the estimate (None before any run ended)."""

    def __init__(self, work: dict[str, float]):
        self.work = dict(work)
        self.done: set[str] = set()
        self.wall_s = 0.0
        self.measured_work = 0.0

    def finished(self, run_id: str, wall_s: float, measured: bool = True) -> None:
        """A run ended; `measured`: it trained to its end, so its wall time measures its work (a failed or
        diverged run stops early, and a run another process was training is left alone in seconds)."""
        self.done.add(run_id)
        if measured and self.work.get(run_id):
            self.wall_s += wall_s
            self.measured_work += self.work[run_id]

    def seconds(self, jobs: int) -> float | None:
        if not self.measured_work:
            return None
        left = sum(w for run_id, w in self.work.items() if run_id not in self.done)
        return self.wall_s / self.measured_work * left / max(jobs, 1)
