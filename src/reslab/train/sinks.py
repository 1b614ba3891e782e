"""Optional metric sinks beside metrics.jsonl: TensorBoard and Weights & Biases, when installed."""

from __future__ import annotations

from ..errors import ReslabError


class Sinks:
    def __init__(self, t_cfg, run_path, name: str, config: dict):
        self.tb = self.wandb = None
        if t_cfg.tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                raise ReslabError("train.tensorboard: the tensorboard package is not installed "
                                  "(pip install tensorboard)") from None
            self.tb = SummaryWriter(str(run_path / "tensorboard"))
        if t_cfg.wandb:
            try:
                import wandb
            except ImportError:
                raise ReslabError("train.wandb: the wandb package is not installed (pip install wandb)") from None
            # The run folder's name is the W&B id, so a resumed run continues the same W&B run.
            self.wandb = wandb.init(project=t_cfg.wandb_project, name=name, id=run_path.name,
                                    resume="allow", config=config, dir=str(run_path))

    def log(self, row: dict) -> None:
        scalars = {k: v for k, v in row.items() if isinstance(v, (int, float)) and k != "step"}
        if self.tb:
            for key, value in scalars.items():
                self.tb.add_scalar(key, value, row["step"])
        if self.wandb:
            self.wandb.log(scalars, step=row["step"])

    def close(self) -> None:
        if self.tb:
            self.tb.close()
        if self.wandb:
            self.wandb.finish()
