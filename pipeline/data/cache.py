"""Decode once: resized pixels kept on disk, keyed by the file list (paths, sizes, mtimes) and the transform.

The cache holds uint8 pixels before normalisation, so one entry serves every split seed, fraction
and normalisation of the same files; a change to a file, the size or the channels makes a new key.
Entries are never modified in place, so the folder can be deleted at any time.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Sequence

import torch

from pipeline.data.decode import RESAMPLE, decode_images
from pipeline.errors import UserError

CACHE_FORMAT = 1  # bump when the decoding changes, so old entries are not reused


def cache_key(paths: Sequence[Path], size: int, channels: int) -> str:
    """A digest of every file's path, size and modification time, and of the transform."""
    transform = f"format={CACHE_FORMAT} size={size} channels={channels} resample={RESAMPLE.name}\n"
    digest = hashlib.sha256(transform.encode())
    for path in paths:
        try:
            stat = path.stat()
        except OSError as error:
            raise UserError(f"cannot read image {path}: {error.strerror}") from None
        digest.update(f"{path}\t{stat.st_size}\t{stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()[:20]


def cache_file(cache_dir: Path, name: str, paths: Sequence[Path], size: int, channels: int) -> Path:
    """Where the pixels of `paths` under this transform are cached (whether or not they are yet)."""
    return cache_dir / f"{name}-{size}px-{channels}ch-{cache_key(paths, size, channels)}.pt"


def cached_pixels(paths: Sequence[Path], size: int, channels: int, cache_dir: Path | None,
                  name: str) -> torch.Tensor:
    """uint8 (N, channels, size, size) pixels of `paths`: read from the cache, or decoded and stored there."""
    if cache_dir is None:
        return decode_images(paths, size, channels)
    file = cache_file(cache_dir, name, paths, size, channels)
    expected = (len(paths), channels, size, size)
    if file.is_file():
        try:
            pixels = torch.load(file, map_location="cpu", weights_only=True)
            if isinstance(pixels, torch.Tensor) and tuple(pixels.shape) == expected and pixels.dtype == torch.uint8:
                return pixels
        except Exception:  # a truncated or foreign file: decode again and replace it
            pass
    pixels = decode_images(paths, size, channels)
    partial = file.with_name(f"{file.name}.{os.getpid()}.partial")
    try:
        cache_dir.mkdir(parents=True, exist_ok=True)
        torch.save(pixels, partial)
        os.replace(partial, file)  # atomic: a concurrent reader sees the old state or the whole file
    except OSError as error:
        partial.unlink(missing_ok=True)
        raise UserError(f"cannot write the image cache in {cache_dir}: {error.strerror}; "
                        f"set cache_dir to another folder, or to \"\" to turn the cache off") from None
    return pixels
