"""Bitwise equality of saved training state (checkpoint dicts: tensors, nested dicts and lists, plain values), for the
tests that prove a resumed, branched or re-ranked run equals the uninterrupted one."""

from __future__ import annotations

import torch


def assert_same_tensors(a, b, where=""):
    """`a` equals `b` exactly: every tensor in dtype and value, every key, length and plain value; `where` names the
    first place that differs."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b), where
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            assert_same_tensors(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same_tensors(x, y, f"{where}[{i}]")
    else:
        assert a == b, where
