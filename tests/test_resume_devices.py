"""Resuming on another device type or on fewer GPUs (gmts/run/checkpoint.py, set_rng_state): every
random stream is restored where it fits, and carried across where it cannot (a generator state of
another device type), instead of crashing on a raw set_state ("Expected a CPUGeneratorImplState of
size 5056 but found ... 16") or an IndexError.

No GPU here: a CUDA generator's state (Philox: seed and offset, 16 bytes) is restored into a CPU
generator (a CUDA run resumed on the CPU, the same size mismatch as the other way round), and the
CUDA states go through torch.cuda's functions patched to record what they are handed, with fewer
GPUs than the checkpoint saw."""

import torch

from gmts.run import checkpoint as ckpt


def draws(generator, n=5):
    return torch.rand(n, generator=generator).tolist()


def test_a_state_of_the_same_device_type_is_restored_exactly():
    gen = torch.Generator().manual_seed(1)
    draws(gen)
    saved = gen.get_state()
    expected = draws(gen)
    other = torch.Generator().manual_seed(2)
    ckpt.restore_generator(other, saved)
    assert draws(other) == expected


def test_a_state_of_another_device_type_is_carried_across_reproducibly():
    philox = torch.tensor(
        [7, 0, 0, 0, 0, 0, 0, 0, 16, 0, 0, 0, 0, 0, 0, 0], dtype=torch.uint8
    )  # seed 7, offset 16
    a, b = torch.Generator(), torch.Generator().manual_seed(99)
    ckpt.restore_generator(a, philox)
    ckpt.restore_generator(b, philox)
    assert draws(a) == draws(b)  # the same stream at every resume
    c = torch.Generator()
    ckpt.restore_generator(c, philox.clone().index_fill_(0, torch.tensor([8]), 32))
    assert draws(c) != draws(
        torch.Generator().manual_seed(0)
    )  # seeded from the state, not a fixed seed
    d = torch.Generator()
    ckpt.restore_generator(d, philox)
    assert draws(c) != draws(d)


def test_cuda_states_of_more_gpus_than_there_are_now(monkeypatch):
    """A checkpoint written with 4 GPUs visible, resumed with 1: the one GPU's state is restored, no
    IndexError; and a checkpoint without CUDA states resumed on a GPU restores none."""
    restored = []
    record = lambda state, device="cuda": restored.append(device)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "set_rng_state", record)
    monkeypatch.setattr(torch.cuda.random, "set_rng_state", record)
    gen = torch.Generator().manual_seed(3)
    state = {
        "python": __import__("random").getstate(),
        "numpy": __import__("numpy").random.get_state(),
        "torch": torch.get_rng_state(),
        "cuda": [torch.zeros(16, dtype=torch.uint8)] * 4,
        "sampler": gen.get_state(),
    }
    ckpt.set_rng_state(state, torch.Generator())
    assert restored == [0]
    restored.clear()
    ckpt.set_rng_state(dict(state, cuda=None), torch.Generator())
    assert restored == []


def test_a_cuda_runs_sampler_state_resumed_on_the_cpu():
    """set_rng_state itself, as gmts/run/build.py's restore calls it: the raw set_state raised here.
    """
    import random
    import numpy as np

    state = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
        "cuda": None,
        "sampler": torch.tensor([7] + [0] * 15, dtype=torch.uint8),
    }
    a, b = torch.Generator(), torch.Generator()
    ckpt.set_rng_state(state, a)
    ckpt.set_rng_state(state, b)
    assert draws(a) == draws(b)
