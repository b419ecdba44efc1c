"""Checksums of saved arrays, verified on restore: Orbax does not check contents, so a flipped
byte would restore silently. A position-weighted uint32 sum of the bit patterns, computed on
the devices in one jitted pass (no gather), stored as JSON path -> int."""
from typing import Any, Optional

import jax
from jax import lax
import jax.numpy as jnp
import numpy as np

_WEIGHT, _OFFSET = np.uint32(0x9E3779B1), np.uint32(0x7F4A7C15)


class ChecksumError(ValueError):
  """Restored arrays differ from what was saved (the files were altered or damaged)."""


def path_name(path) -> str:
  """'params/bert/encoder/...' for a tree path, alike for dataclasses, dicts and tuples."""
  parts = []
  for k in path:
    for attr in ("key", "name", "idx"):
      if hasattr(k, attr):
        parts.append(str(getattr(k, attr)))
        break
  return "/".join(parts)


def _bits(x: jax.Array) -> jax.Array:
  """The array's bit patterns as uint32 (8-byte values fold their halves)."""
  size = jnp.dtype(x.dtype).itemsize
  if size == 8:
    halves = lax.bitcast_convert_type(x, jnp.uint32)  # [..., 2]
    return halves[..., 0] ^ (halves[..., 1] * _WEIGHT)
  as_uint = {4: jnp.uint32, 2: jnp.uint16, 1: jnp.uint8}[size]
  if x.dtype == jnp.bool_:
    return x.astype(jnp.uint32)
  return lax.bitcast_convert_type(x, as_uint).astype(jnp.uint32)


def _checksum(x: jax.Array) -> jax.Array:
  bits = _bits(x)
  index = jnp.zeros(bits.shape, jnp.uint32)
  stride = np.uint32(1)
  for d in reversed(range(bits.ndim)):
    index = index + lax.broadcasted_iota(jnp.uint32, bits.shape, d) * stride
    stride = np.uint32((int(stride) * bits.shape[d]) & 0xFFFFFFFF)
  weight = (index * _WEIGHT + _OFFSET) | np.uint32(1)  # odd: a flipped bit k adds odd * 2^k != 0
  return jnp.sum(bits * weight, dtype=jnp.uint32)


_checksums = jax.jit(lambda leaves: [_checksum(x) for x in leaves])


def tree_checksums(tree: Any) -> dict[str, int]:
  """path -> checksum of every array leaf of `tree` (global, sharded arrays included)."""
  flat = jax.tree_util.tree_flatten_with_path(tree)[0]
  sums = jax.device_get(_checksums([x for _, x in flat]))
  return {path_name(p): int(s) for (p, _), s in zip(flat, sums)}


def verify(tree: Any, expected: Optional[dict[str, int]], source: str) -> None:
  """Raises ChecksumError naming the arrays of `tree` whose checksum differs.

  Names missing from `tree` are not compared, extra ones are an error; expected None (a
  checkpoint without checksums) verifies nothing.
  """
  if expected is None:
    return
  got = tree_checksums(tree)
  unknown = sorted(set(got) - set(expected))
  bad = sorted(k for k in got if k in expected and got[k] != expected[k])
  if bad or unknown:
    raise ChecksumError(
        f"{source}: {len(bad)} restored array(s) differ from what was saved (damaged or altered "
        f"files): {', '.join(bad[:5])}{' ...' if len(bad) > 5 else ''}"
        + (f"; not recorded at save: {', '.join(unknown[:5])}" if unknown else ""))
