"""Pictures of the circles: a palette PNG and an animated GIF, in pure Python (zlib + struct).

No third-party imaging library: the demo must run from a fresh clone with
nothing but the standard library.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable, Sequence

__all__ = ["PALETTE", "raster", "write_gif", "write_png"]

# Index 0 background, 1 region borders, 2.. one colour per region (cycled).
PALETTE: list[tuple[int, int, int]] = [
    (18, 20, 28), (90, 90, 110),
    (79, 195, 247), (255, 167, 38), (102, 187, 106), (239, 83, 80),
    (171, 71, 188), (255, 238, 88), (38, 198, 218), (141, 110, 99),
]
_REGION_COLOURS = len(PALETTE) - 2


def raster(circles: Iterable[Sequence[float]], width: float, height: float, bounds: Sequence[float],
           scale: float = 1.0) -> tuple[int, int, bytearray]:
    """Filled circles, coloured by the region (strip between ``bounds``) that owns them."""
    w, h = max(1, int(width * scale)), max(1, int(height * scale))
    pixels = bytearray(w * h)
    for b in bounds[1:-1]:  # inner region borders
        px = min(w - 1, int(b * scale))
        for row in range(h):
            if row % 6 < 3:
                pixels[row * w + px] = 1
    for c in circles:
        x, y, r = c[1] * scale, c[2] * scale, c[5] * scale
        region = 0
        while region < len(bounds) - 2 and c[1] >= bounds[region + 1]:
            region += 1
        colour = 2 + region % _REGION_COLOURS
        r2 = r * r
        for row in range(max(0, int(y - r)), min(h, int(y + r) + 1)):
            dy = row + 0.5 - y
            if dy * dy > r2:
                continue
            half = (r2 - dy * dy) ** 0.5
            x0, x1 = max(0, int(x - half + 0.5)), min(w, int(x + half + 0.5))
            if x1 > x0:
                base = row * w
                pixels[base + x0:base + x1] = bytes((colour,)) * (x1 - x0)
    return w, h, pixels


def _chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(
        ">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def write_png(path: str, w: int, h: int, pixels: bytes | bytearray,
              palette: Sequence[tuple[int, int, int]] = PALETTE) -> None:
    """An 8-bit palette PNG (colour type 3)."""
    rows = b"".join(b"\x00" + bytes(pixels[y * w:(y + 1) * w]) for y in range(h))
    data = (b"\x89PNG\r\n\x1a\n"
            + _chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 3, 0, 0, 0))
            + _chunk(b"PLTE", b"".join(bytes(c) for c in palette))
            + _chunk(b"IDAT", zlib.compress(rows, 6))
            + _chunk(b"IEND", b""))
    with open(path, "wb") as f:
        f.write(data)


def _lzw(pixels: bytes | bytearray, min_code_size: int) -> bytes:
    """GIF's variable-width LZW, reset with a clear code when the table fills."""
    clear = 1 << min_code_size
    eoi = clear + 1
    out = bytearray()
    acc = 0
    nbits = 0
    code_size = min_code_size + 1
    table: dict[int, int] = {}
    next_code = eoi + 1

    acc |= clear << nbits
    nbits += code_size
    prefix = pixels[0]
    for i in range(1, len(pixels)):
        b = pixels[i]
        key = (prefix << 8) | b
        code = table.get(key)
        if code is not None:
            prefix = code
            continue
        acc |= prefix << nbits
        nbits += code_size
        while nbits >= 8:
            out.append(acc & 0xFF)
            acc >>= 8
            nbits -= 8
        if next_code < 4095:
            table[key] = next_code
            next_code += 1
            if next_code > (1 << code_size) and code_size < 12:
                code_size += 1
        else:
            acc |= clear << nbits
            nbits += code_size
            table = {}
            next_code = eoi + 1
            code_size = min_code_size + 1
        prefix = b
    for code in (prefix, eoi):
        acc |= code << nbits
        nbits += code_size
        # After the last data code the decoder may have grown its code size by one.
        if code == prefix and next_code + 1 > (1 << code_size) and code_size < 12:
            code_size += 1
    while nbits > 0:
        out.append(acc & 0xFF)
        acc >>= 8
        nbits -= 8
    return bytes(out)


def write_gif(path: str, w: int, h: int, frames: Sequence[bytes | bytearray],
              delay_cs: int = 4, palette: Sequence[tuple[int, int, int]] = PALETTE) -> None:
    """An animated GIF89a that loops forever; ``delay_cs`` hundredths of a second per frame."""
    bits = max(1, (len(palette) - 1).bit_length())
    colours = list(palette) + [(0, 0, 0)] * ((1 << bits) - len(palette))
    min_code_size = max(2, bits)
    parts = [b"GIF89a", struct.pack("<HHBBB", w, h, 0x80 | 0x70 | (bits - 1), 0, 0),
             b"".join(bytes(c) for c in colours),
             b"!\xff\x0bNETSCAPE2.0\x03\x01\x00\x00\x00"]
    for pixels in frames:
        parts.append(b"!\xf9\x04\x04" + struct.pack("<H", delay_cs) + b"\x00\x00")
        parts.append(b"," + struct.pack("<HHHHB", 0, 0, w, h, 0))
        data = _lzw(pixels, min_code_size)
        parts.append(bytes((min_code_size,)))
        for k in range(0, len(data), 255):
            block = data[k:k + 255]
            parts.append(bytes((len(block),)) + block)
        parts.append(b"\x00")
    parts.append(b";")
    with open(path, "wb") as f:
        f.write(b"".join(parts))
