"""The long connection's binary frames (``pbbp2.Frame``), encoded and decoded by hand.

Feishu's event WebSocket speaks protobuf 2 messages whose schema is published
only as ``pbbp2.proto`` inside the official SDKs::

    message Header { required string key = 1; required string value = 2; }
    message Frame {
      required uint64 SeqID = 1;   required uint64 LogID = 2;
      required int32 service = 3;  required int32 method = 4;   // 0 control, 1 data
      repeated Header headers = 5; optional string payload_encoding = 6;
      optional string payload_type = 7; optional bytes payload = 8;
      optional string LogIDNew = 9;
    }

Nine fields of three wire types are a few dozen lines of varint arithmetic, so
tmy writes them here rather than import lark-oapi for its generated class: that
import costs ~2 s and creates an event loop at import time (see the package
docstring). The test fake encodes and decodes with the SDK's own generated
``pbbp2_pb2.Frame``, so both sides are checked against the reference codec.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tmy.errors import AdapterError

CONTROL = 0  # Frame.method: ping / pong
DATA = 1  # Frame.method: an event (or a card callback) to acknowledge

_VARINT, _LENGTH = 0, 2


@dataclass(slots=True)
class Frame:
    """One ``pbbp2.Frame``; ``headers`` keep their order (keys may repeat on the wire)."""

    seq_id: int = 0
    log_id: int = 0
    service: int = 0
    method: int = CONTROL
    headers: list[tuple[str, str]] = field(default_factory=list)
    payload_encoding: str = ""
    payload_type: str = ""
    payload: bytes = b""
    log_id_new: str = ""

    def header(self, key: str, default: str = "") -> str:
        """The first header named ``key`` (``type``, ``message_id``, ``sum``, ``seq`` …)."""
        for k, v in self.headers:
            if k == key:
                return v
        return default

    def encode(self) -> bytes:
        out = bytearray()
        _varint_field(out, 1, self.seq_id)
        _varint_field(out, 2, self.log_id)
        _varint_field(out, 3, self.service)
        _varint_field(out, 4, self.method)
        for key, value in self.headers:
            inner = bytearray()
            _bytes_field(inner, 1, key.encode())
            _bytes_field(inner, 2, value.encode())
            _bytes_field(out, 5, bytes(inner))
        if self.payload_encoding:
            _bytes_field(out, 6, self.payload_encoding.encode())
        if self.payload_type:
            _bytes_field(out, 7, self.payload_type.encode())
        if self.payload:
            _bytes_field(out, 8, self.payload)
        if self.log_id_new:
            _bytes_field(out, 9, self.log_id_new.encode())
        return bytes(out)

    @classmethod
    def decode(cls, data: bytes) -> Frame:
        """The frame in ``data``; AdapterError when it is not a well-formed Frame."""
        frame = cls()
        for number, value in _fields(data):
            if number == 1:
                frame.seq_id = _int(value)
            elif number == 2:
                frame.log_id = _int(value)
            elif number == 3:
                frame.service = _int32(_int(value))
            elif number == 4:
                frame.method = _int32(_int(value))
            elif number == 5:
                parts = dict(_fields(_bytes(value)))
                frame.headers.append((_text(parts.get(1, b"")), _text(parts.get(2, b""))))
            elif number == 6:
                frame.payload_encoding = _text(value)
            elif number == 7:
                frame.payload_type = _text(value)
            elif number == 8:
                frame.payload = _bytes(value)
            elif number == 9:
                frame.log_id_new = _text(value)
        return frame


def _varint(out: bytearray, value: int) -> None:
    value &= (1 << 64) - 1  # a negative int32 is sent as its 64-bit two's complement
    while True:
        low = value & 0x7F
        value >>= 7
        if value:
            out.append(low | 0x80)
        else:
            out.append(low)
            return


def _varint_field(out: bytearray, number: int, value: int) -> None:
    _varint(out, number << 3 | _VARINT)
    _varint(out, value)


def _bytes_field(out: bytearray, number: int, value: bytes) -> None:
    _varint(out, number << 3 | _LENGTH)
    _varint(out, len(value))
    out += value


def _read_varint(data: bytes, at: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            raise AdapterError("feishu: a truncated varint in a long-connection frame")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if not byte & 0x80:
            return value, at


def _fields(data: bytes) -> list[tuple[int, int | bytes]]:
    """(field number, value) in wire order; unknown wire types 1 and 5 are skipped over."""
    out: list[tuple[int, int | bytes]] = []
    at = 0
    while at < len(data):
        key, at = _read_varint(data, at)
        number, wire = key >> 3, key & 7
        if wire == _VARINT:
            value, at = _read_varint(data, at)
            out.append((number, value))
        elif wire == _LENGTH:
            size, at = _read_varint(data, at)
            if at + size > len(data):
                raise AdapterError("feishu: a truncated field in a long-connection frame")
            out.append((number, data[at : at + size]))
            at += size
        elif wire in (1, 5):
            at += 8 if wire == 1 else 4
        else:
            raise AdapterError(f"feishu: wire type {wire} in a long-connection frame")
    if at != len(data):
        raise AdapterError("feishu: a truncated long-connection frame")
    return out


def _int(value: int | bytes) -> int:
    if isinstance(value, bytes):
        raise AdapterError("feishu: a number field carried bytes in a long-connection frame")
    return value


def _int32(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value & 0x80000000 else value


def _bytes(value: int | bytes) -> bytes:
    if isinstance(value, int):
        raise AdapterError("feishu: a bytes field carried a number in a long-connection frame")
    return value


def _text(value: int | bytes) -> str:
    return _bytes(value).decode("utf-8", errors="replace")
