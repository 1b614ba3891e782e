import os
import tempfile

import pytest
import torch

from reslab.config import ModelConfig
from reslab.testing import CPU_ONLY_FALLBACK, slow_vmap_ops  # noqa: F401  (the conformance kit's own)

# `reslab train` lists its run in $RESLAB_STORE (default ./results): tests, and the processes they
# start, write into a store of their own, never into the checkout or a developer's real store.
os.environ["RESLAB_STORE"] = tempfile.mkdtemp(prefix="reslab-test-store-")

# Tests that start runs in a temporary folder must still find ../shared/data: a sweep refuses the
# KJV fallback, and a run trained on it would not be the run the test means.
_SHARED_DATA = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data")
if "RESLAB_DATA_DIR" not in os.environ and os.path.isfile(os.path.join(_SHARED_DATA, "tinyshakespeare", "input.txt")):
    os.environ["RESLAB_DATA_DIR"] = os.path.abspath(_SHARED_DATA)

# Under pytest-xdist (`-n auto`, the README's command) every worker is its own process: give each
# its share of the CPUs this process may use, so that N workers do not run N x all-cores threads.
# The processes a test starts (train, sweep workers) keep their own thread settings.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    _cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    torch.set_num_threads(max(1, _cpus // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))


@pytest.fixture(autouse=True)
def _float32_default():
    torch.set_default_dtype(torch.float32)
    yield


def small(design: str = "pre-ln", **kw) -> ModelConfig:
    base = dict(design=design, vocab_size=65, n_layer=4, n_head=4, n_embd=32, block_size=16, dropout=0.0)
    base.update(kw)
    return ModelConfig(**base)


def tokens(B: int = 2, T: int = 16, vocab: int = 65, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, vocab, (B, T), generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def one_thread():
    """Tiny tensors: intra-op threads only add contention on a shared CPU. Use per module with
    `pytestmark = pytest.mark.usefixtures("one_thread")`."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def meta_built(cfg: ModelConfig, seed: int):
    """`cfg` built on the meta device, materialised on the CPU and initialised from `seed` (eval mode):
    equal to GPT(cfg, seed) exactly when every parameter and buffer is rewritten by init_weights."""
    from reslab.model.gpt import GPT

    with torch.device("meta"):
        model = GPT(cfg, seed=seed)
    model.to_empty(device="cpu")
    model.init_weights(seed=seed)
    return model.eval()




class CountingBackend:
    """A torch.compile backend that runs the traced graph as is and counts how often dynamo traced."""

    def __init__(self):
        self.compiles = 0

    def __call__(self, graph_module, example_inputs):
        self.compiles += 1
        return graph_module.forward


def bench_module(name: str):
    """bench/<name>.py imported as a module (bench/ is not a package)."""
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "bench" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault(name, module)
    spec.loader.exec_module(module)
    return module
