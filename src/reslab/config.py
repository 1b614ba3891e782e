"""The model's configuration lives in reslab/model/config.py, beside the model (as data/config.py and
train/config.py sit beside theirs); this module keeps `from reslab.config import ModelConfig` and the
other names below working for code written against earlier releases."""

from .model.config import (MAX_MLP_RATIO, MAX_SIZES, GainMode, Init, LearnedScale, MLPKind, ModelConfig,
                           Norm, Positions, check_shapes, raise_if)

__all__ = ["ModelConfig", "check_shapes", "raise_if", "MAX_SIZES", "MAX_MLP_RATIO", "Norm", "LearnedScale",
           "Init", "MLPKind", "Positions", "GainMode"]
