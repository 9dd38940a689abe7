"""What every training loop in bab shares: seeding, the Accelerator, optimizer and schedule, the result record."""

from __future__ import annotations

import random

import numpy as np
import torch


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
