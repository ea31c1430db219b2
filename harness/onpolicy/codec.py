"""The general-purpose byte codec of a lossless wire format (the ``patch`` sync method).

``zstd`` is Zstandard (PyPI ``zstandard``), at ``level`` 1..22 (higher => smaller payload,
slower encoding; 3 is zstd's own default; its negative "fast" levels are not exposed).
``none`` stores the bytes as they are (the ablation that shows what the codec saves).

One rule lives here: which codec names and levels exist (``check``), used by
harness.validate before launch and by the sync method when it is built.
"""
from __future__ import annotations

from harness.errors import ConfigError

CODECS = ("zstd", "none")
ZSTD_LEVELS = range(1, 23)
CODEC_CODES = {"none": 0, "zstd": 1}


def check(name: str, level: int, key: str = "method") -> None:
    """ConfigError (one line: key, value, what is allowed) for an unknown codec or level."""
    if name not in CODECS:
        raise ConfigError(f"{key}.codec: {name!r} is not a codec; choose one of {', '.join(CODECS)}")
    if name == "zstd" and (isinstance(level, bool) or not isinstance(level, int) or level not in ZSTD_LEVELS):
        raise ConfigError(f"{key}.codec_level: {level!r} is not a zstd level; choose an integer 1..22 "
                          "(higher => smaller, slower; 3 is zstd's default)")


def compress(data: bytes, name: str, level: int) -> bytes:
    """``data`` encoded by codec ``name`` (checked with ``check`` first)."""
    if name == "none":
        return bytes(data)
    import zstandard

    return zstandard.ZstdCompressor(level=level).compress(data)


def decompress(data: bytes, name: str, size: int) -> bytes:
    """Inverse of ``compress``; ``size`` is the decoded length the sender declared (bytes).
    Raises ValueError when the data does not decode to exactly ``size`` bytes."""
    if name == "none":
        out = bytes(data)
    else:
        import zstandard

        try:
            out = zstandard.ZstdDecompressor().decompress(data, max_output_size=size)
        except zstandard.ZstdError as err:
            raise ValueError(f"zstd: {err}") from None
    if len(out) != size:
        raise ValueError(f"decoded {len(out)} bytes, the header says {size}")
    return out
