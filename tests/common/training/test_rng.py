"""`common.training.rng`: restoring the saved generator states repeats the draws made after the saved point."""

import random

import numpy as np
import pytest
import torch

from common.training.rng import rng_states, set_rng_states


def _draws() -> dict:
    """One draw from each global generator: a dropout mask (torch), NumPy normals and uniforms, Python's."""
    mask = torch.nn.functional.dropout(torch.ones(64), p=0.5, training=True) > 0
    return {
        "dropout": mask.tolist(),
        "normal": np.random.standard_normal(3).tolist(),
        "uniform": np.random.rand(3).tolist(),
        "python": [random.random() for _ in range(3)],
        "shuffle": torch.randperm(10).tolist(),
    }


def test_a_draw_after_set_rng_states_repeats_the_draw_after_the_saved_point():
    torch.manual_seed(7), np.random.seed(7), random.seed(7)
    np.random.standard_normal()  # NumPy now holds a cached Gaussian: part of its state too
    saved = rng_states()
    assert saved["numpy"][3] == 1  # has_gauss
    expected = _draws()
    moved_on = _draws()
    assert moved_on != expected  # the generators did move on
    set_rng_states(saved)
    assert _draws() == expected
    assert _draws() == moved_on  # and continue as they did


def test_states_survive_a_weights_only_checkpoint(tmp_path):
    torch.manual_seed(3), np.random.seed(3), random.seed(3)
    path = tmp_path / "states.ckpt"
    torch.save({"rng_states": rng_states()}, path)
    expected = _draws()
    torch.manual_seed(0), np.random.seed(0), random.seed(0)
    assert _draws() != expected
    loaded = torch.load(path, weights_only=True)["rng_states"]
    assert set(loaded) >= {"torch", "numpy", "python"}
    assert loaded["numpy"][0] == "MT19937" and loaded["numpy"][1].dtype == torch.int64
    set_rng_states(loaded)
    assert _draws() == expected


class _Cuda:
    """torch.cuda's generator calls on `visible` devices, device 0 current; `drawn` moves a device's generator."""

    def __init__(self, visible: int):
        self.states = {device: torch.tensor([device, 0], dtype=torch.uint8) for device in range(visible)}

    def patch(self, monkeypatch) -> None:
        monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
        monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device="cuda": self.states[0].clone())
        monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device="cuda": self.states.update({0: state}))
        monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: [s.clone() for s in self.states.values()])

        def set_all(states):
            for device, state in enumerate(states):
                self.states[device]  # a device not visible: torch raises IndexError (KeyError here)
                self.states[device] = state

        monkeypatch.setattr(torch.cuda, "set_rng_state_all", set_all)

    def drawn(self, device: int = 0) -> None:
        self.states[device] = self.states[device] + torch.tensor([0, 1], dtype=torch.uint8)


def test_the_current_cuda_devices_generator_alone_is_saved_and_restored(monkeypatch):
    """A process of a DDP run draws from its own GPU, the current device; a resumed process that sees fewer devices
    (SLURM's --gpus-per-task=1) must restore what it saved."""
    saver = _Cuda(visible=4)
    saver.patch(monkeypatch)
    saver.drawn(0), saver.drawn(0), saver.drawn(2)
    saved = rng_states()
    assert saved["cuda"].tolist() == [0, 2]  # device 0's, not a list of the four
    resumer = _Cuda(visible=1)
    resumer.patch(monkeypatch)
    set_rng_states(saved)
    assert resumer.states[0].tolist() == [0, 2]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_generators_are_restored():
    torch.cuda.manual_seed_all(5)
    saved = rng_states()
    expected = torch.rand(8, device="cuda").tolist()
    torch.rand(8, device="cuda")
    set_rng_states(saved)
    assert torch.rand(8, device="cuda").tolist() == expected
