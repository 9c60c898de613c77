"""Decode graphs use programmatic dependent launch by default (DECODE_PDL); TILESAFE_PDL, when
set, decides instead, and an explicit `pdl=` wins over both."""
import pytest
import torch

import tilesafe as ts
from tilesafe.engine import decode_step
from tilesafe.engine.decode_step import DecodeSteps
from tilesafe.settings import Settings


@pytest.mark.parametrize("env,want", [({}, True), ({"TILESAFE_PDL": "0"}, False), ({"TILESAFE_PDL": "1"}, True)])
def test_the_decode_steps_pdl_default(monkeypatch, env, want):
    monkeypatch.setattr(ts, "settings", Settings.from_env(env))
    assert DecodeSteps(None, torch.float32, "cpu", use_graph=False).pdl is want
    assert DecodeSteps(None, torch.float32, "cpu", use_graph=False, pdl=not want).pdl is (not want)


def test_decode_pdl_off_leaves_it_to_tilesafe_pdl(monkeypatch):
    monkeypatch.setattr(decode_step, "DECODE_PDL", False)
    monkeypatch.setattr(ts, "settings", Settings.from_env({}))
    assert DecodeSteps(None, torch.float32, "cpu", use_graph=False).pdl is False
