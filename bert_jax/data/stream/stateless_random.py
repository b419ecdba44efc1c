"""Counter-based random numbers: pure functions of integer keys, vectorised.

Every draw is f(key, counter) with keys derived from (seed, purpose, epoch, index, ...): no
RNG state, so any stream position is rebuilt alone with the same result on any machine
(uint64 arithmetic: SplitMix64's finaliser, a bijection that passes BigCrush).
"""
import numpy as np

_GAMMA = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31, _S11 = np.uint64(30), np.uint64(27), np.uint64(31), np.uint64(11)


def mix(z: np.ndarray) -> np.ndarray:
  """SplitMix64's finaliser on a uint64 array (a bijection of uint64)."""
  z = np.asarray(z, np.uint64)
  z = (z ^ (z >> _S30)) * _M1
  z = (z ^ (z >> _S27)) * _M2
  return z ^ (z >> _S31)


def derive(key, *data) -> np.ndarray:
  """Folds integers (scalars or arrays) into uint64 keys, broadcast over `key` and `data`."""
  k = np.asarray(key, np.uint64)
  with np.errstate(over="ignore"):
    for d in data:
      d = np.asarray(d).astype(np.int64).astype(np.uint64)
      k = mix(k ^ mix(d + _GAMMA))
  return k


def root_key(seed: int, purpose: str) -> np.uint64:
  """A key for one use of randomness (e.g. 'mask', 'nsp') under a seed."""
  code = int.from_bytes(purpose.encode("utf-8")[:8].ljust(8, b"\0"), "little")
  return derive(np.uint64(code), seed)[()]


def bits(key, counter) -> np.ndarray:
  """Random uint64 for each (key, counter) pair (broadcast)."""
  with np.errstate(over="ignore"):
    k = np.asarray(key, np.uint64)
    c = np.asarray(counter).astype(np.int64).astype(np.uint64)
    return mix(k + (c + np.uint64(1)) * _GAMMA)


def uniform(key, counter) -> np.ndarray:
  """Uniform float64 in [0, 1) for each (key, counter) pair (broadcast)."""
  return (bits(key, counter) >> _S11).astype(np.float64) * (1.0 / (1 << 53))


def randint(key, counter, low, high) -> np.ndarray:
  """Uniform integers in [low, high) (broadcast; high > low)."""
  low = np.asarray(low, np.int64)
  span = np.asarray(high, np.int64) - low
  return low + np.minimum((uniform(key, counter) * span).astype(np.int64), span - 1)


def permutation(key, n: int) -> np.ndarray:
  """A uniformly random permutation of range(n) (argsort of random keys)."""
  return np.argsort(bits(key, np.arange(n)), kind="stable")


def binomial_half(key, counter, n, max_n: int) -> np.ndarray:
  """Binomial(n, 1/2) int64 counts (n <= the static max_n), broadcast as `bits`."""
  n = np.asarray(n, np.int64)
  words = max(1, -(-int(max_n) // 64))
  total = np.zeros(np.broadcast(np.asarray(key), np.asarray(counter), n).shape, np.int64)
  for w in range(words):  # A fixed number of vectorised passes (max_n / 64).
    b = bits(derive(key, w), counter)
    nbits = np.clip(n - 64 * w, 0, 64).astype(np.uint64)
    keep = np.where(nbits >= 64, np.uint64(0xFFFFFFFFFFFFFFFF),
                    (np.uint64(1) << np.minimum(nbits, np.uint64(63))) - np.uint64(1))
    total += np.bitwise_count(b & keep).astype(np.int64)
  return total
