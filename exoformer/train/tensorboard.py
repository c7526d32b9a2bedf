"""Optional TensorBoard event files of a training run (off by default; metrics.jsonl stays the source of truth).

Switched on by `EXOFORMER_TENSORBOARD=1` in the environment of the job (`reproduce.py run --tensorboard` sets it),
never by the spec, so it cannot change a run's identity. Written without the tensorboard package: an event file
is a sequence of TFRecords (length, masked CRC-32C of the length, payload, masked CRC-32C of the payload), each
payload an `Event` protobuf (tensorflow/core/util/event.proto: wall_time = 1, step = 2, file_version = 3,
summary = 5; Summary.value = 1; Value.tag = 1, Value.simple_value = 2).
"""

from __future__ import annotations

import os
import socket
import struct
import time
from pathlib import Path

ENV = "EXOFORMER_TENSORBOARD"


def enabled() -> bool:
    return os.environ.get(ENV, "").strip().lower() in ("1", "true", "yes", "on")


def _crc32c_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        bits = value & 0x7F
        value >>= 7
        out.append(bits | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _field(number: int, wire: int, payload: bytes) -> bytes:
    return _varint((number << 3) | wire) + payload


def _delimited(number: int, payload: bytes) -> bytes:
    return _field(number, 2, _varint(len(payload)) + payload)


def event_bytes(*, wall_time: float, step: int = 0, file_version: str | None = None,
                scalars: dict[str, float] | None = None) -> bytes:
    """One serialised Event: a file-version header, or scalar summaries at `step`."""
    out = _field(1, 1, struct.pack("<d", wall_time)) + _field(2, 0, _varint(step))
    if file_version is not None:
        out += _delimited(3, file_version.encode())
    if scalars:
        values = b"".join(_delimited(1, _delimited(1, tag.encode()) + _field(2, 5, struct.pack("<f", value)))
                          for tag, value in scalars.items())
        out += _delimited(5, values)
    return out


def record_bytes(payload: bytes) -> bytes:
    header = struct.pack("<Q", len(payload))
    return header + struct.pack("<I", masked_crc(header)) + payload + struct.pack("<I", masked_crc(payload))


class EventWriter:
    """Appends scalar events to `<directory>/events.out.tfevents.<time>.<host>`, one file per writer."""

    def __init__(self, directory: str | os.PathLike) -> None:
        Path(directory).mkdir(parents=True, exist_ok=True)
        now = time.time()
        self.path = Path(directory) / f"events.out.tfevents.{int(now)}.{socket.gethostname()}"
        self._file = open(self.path, "ab")
        self._write(event_bytes(wall_time=now, file_version="brain.Event:2"))

    def _write(self, payload: bytes) -> None:
        self._file.write(record_bytes(payload))
        self._file.flush()

    def scalars(self, step: int, values: dict[str, float]) -> None:
        finite = {k: float(v) for k, v in values.items() if isinstance(v, (int, float)) and v == v}
        if finite:
            self._write(event_bytes(wall_time=time.time(), step=step, scalars=finite))

    def close(self) -> None:
        self._file.close()
