"""The live training line (step, loss, tokens/s, ETA) and the optional TensorBoard event files."""

from __future__ import annotations

import io
import struct

import pytest

from exoformer.train import tensorboard as tb
from exoformer.train.progress import Progress, duration


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_line_has_step_loss_throughput_and_an_eta_from_this_attempts_steps():
    clock = Clock()
    progress = Progress(100, True, log=io.StringIO(), tty=False, clock=clock)
    progress.line(41, loss=2.0, tokens_per_s=1000.0)  # resumed at step 40: the first step of this attempt
    clock.now += 30.0  # steps 41-43 of this attempt in 30 s -> 10 s/step, 57 steps left
    line = progress.line(43, loss=1.23456, tokens_per_s=12345.6, lr=3e-4)
    assert line == "step 43/100 loss 1.2346 12,346 tok/s lr 3.00e-04 ETA 9:30"
    assert "ETA" not in progress.line(100, loss=1.0, tokens_per_s=1.0)
    assert duration(3725) == "1:02:05" and duration(59.4) == "0:59"


def test_terminal_rewrites_one_line_and_logs_get_plain_lines_every_two_percent():
    tty, log = io.StringIO(), io.StringIO()
    on_tty = Progress(100, True, stream=tty, tty=True, clock=Clock())
    in_log = Progress(100, True, log=log, tty=False, clock=Clock())
    for step in range(1, 101):
        on_tty.update(step, loss=1.0, tokens_per_s=10.0)
        in_log.update(step, loss=1.0, tokens_per_s=10.0)
    assert tty.getvalue().count("\r") == 100 and tty.getvalue().count("\n") == 1
    assert len(log.getvalue().splitlines()) == 50 and "\r" not in log.getvalue()


def test_crc32c_matches_the_standard_check_value():
    assert tb.crc32c(b"123456789") == 0xE3069283  # the CRC-32C (Castagnoli) check value


def _read_records(data: bytes) -> list[bytes]:
    """An independent TFRecord reader: length, masked CRC of the length, payload, masked CRC of the payload."""
    out, pos = [], 0
    while pos < len(data):
        (length,) = struct.unpack_from("<Q", data, pos)
        (crc_len,) = struct.unpack_from("<I", data, pos + 8)
        assert crc_len == tb.masked_crc(data[pos:pos + 8])
        payload = data[pos + 12:pos + 12 + length]
        (crc_data,) = struct.unpack_from("<I", data, pos + 12 + length)
        assert crc_data == tb.masked_crc(payload)
        out.append(payload)
        pos += 16 + length
    return out


def _fields(buf: bytes) -> list[tuple[int, int, object]]:
    """Decode one protobuf message into (field number, wire type, value) triples."""
    def varint(pos):
        shift = result = 0
        while True:
            byte = buf[pos]
            result |= (byte & 0x7F) << shift
            pos += 1
            shift += 7
            if not byte & 0x80:
                return result, pos

    pos, out = 0, []
    while pos < len(buf):
        key, pos = varint(pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = varint(pos)
        elif wire == 1:
            value, pos = struct.unpack_from("<d", buf, pos)[0], pos + 8
        elif wire == 5:
            value, pos = struct.unpack_from("<f", buf, pos)[0], pos + 4
        else:
            length, pos = varint(pos)
            value, pos = buf[pos:pos + length], pos + length
        out.append((number, wire, value))
    return out


def test_event_file_holds_the_version_header_then_scalars(tmp_path):
    writer = tb.EventWriter(tmp_path / "tb")
    writer.scalars(7, {"train/loss": 1.5, "train/lr": 3e-4, "skipped": float("nan")})
    writer.close()
    records = _read_records(writer.path.read_bytes())
    assert writer.path.name.startswith("events.out.tfevents.") and len(records) == 2
    header = {n: v for n, _, v in _fields(records[0])}
    assert header[3] == b"brain.Event:2"
    event = {n: v for n, _, v in _fields(records[1])}
    assert event[2] == 7
    values = [dict((n, v) for n, _, v in _fields(value)) for n, _, value in _fields(event[5])]
    assert [(v[1].decode(), round(v[2], 6)) for v in values] == [("train/loss", 1.5), ("train/lr", 0.0003)]


def test_tensorboard_reads_our_files_when_it_is_installed(tmp_path):
    loader = pytest.importorskip("tensorboard.backend.event_processing.event_file_loader")
    writer = tb.EventWriter(tmp_path)
    writer.scalars(3, {"train/loss": 2.0})
    writer.close()
    events = list(loader.EventFileLoader(str(writer.path)).Load())
    assert events[-1].step == 3


def test_off_unless_asked(monkeypatch):
    monkeypatch.delenv(tb.ENV, raising=False)
    assert not tb.enabled()
    monkeypatch.setenv(tb.ENV, "1")
    assert tb.enabled()
