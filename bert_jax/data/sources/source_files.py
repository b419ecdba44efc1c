"""Text files: a glob (comma-separated globs allowed) of .txt / .gz files, local or gs://.

A plain file larger than `block_mb` is read in blocks: block i holds the documents that
start in bytes [i * B, (i + 1) * B), so a block is addressable from the file's size alone,
with no index and no scan. A .gz file is one shard. Listing validates up front (no match,
unreadable, binary, truncated .gz, all files empty).
"""
from __future__ import annotations  # annotations naming tf are not evaluated (no TensorFlow)

import concurrent.futures
import dataclasses
import glob
import gzip
import logging
import os
import zlib

from bert_jax.data.sources import raw_docs
from bert_jax.data.sources import shard_spec
from bert_jax.data.sources import source_base
from bert_jax.runtime.optional_tensorflow import tf


def _expand_globs(pattern: str) -> list[str]:
  files = []
  for one in (p.strip() for p in pattern.split(",")):
    if not one:
      continue
    matches = tf.io.gfile.glob(one)
    if not matches:
      raise _no_match(one)
    files += [m for m in matches if not tf.io.gfile.isdir(m)]
  return sorted(set(files))


def check_local_globs(pattern: str) -> None:
  """Fails fast, before TensorFlow loads, on a local glob of config.data.files matching nothing."""
  for one in (p.strip() for p in pattern.split(",")):
    if one and "://" not in one and not glob.glob(one):
      raise _no_match(one)


def _no_match(pattern: str) -> FileNotFoundError:
  if not any(c in pattern for c in "*?["):
    return FileNotFoundError(f"config.data.files: file {pattern!r} does not exist")
  return FileNotFoundError(f"config.data.files: glob {pattern!r} matches no file")


# .gz shards are decompressed whole before training (~1 s per 100 MB here) when they
# total at most this; larger corpora have their first block checked up front, the rest as read.
MAX_GZ_CHECK_BYTES = 2 << 30
_SNIFF_BYTES = 1 << 16


def check_text_file(path: str, whole_gz: bool = True) -> bool:
  """Refuses (ValueError) a shard that is unreadable, truncated (.gz) or binary.

  Binary means a NUL byte or over 1% invalid UTF-8 in the first 64 KiB. Returns True for a
  file under 64 KiB of only whitespace (skipped like an empty one).
  """
  try:
    with tf.io.gfile.GFile(path, "rb") as f:
      if path.endswith(".gz"):
        with gzip.GzipFile(fileobj=f) as z:
          head = z.read(_SNIFF_BYTES)
          while whole_gz and z.read(1 << 24):
            pass
      else:
        head = f.read(_SNIFF_BYTES)
  except (OSError, EOFError, zlib.error, tf.errors.OpError) as e:
    raise ValueError(f"config.data.files: cannot read {path}: {type(e).__name__}: "
                     f"{str(e).splitlines()[0] if str(e) else 'truncated or corrupt'}") from None
  if b"\0" in head:
    raise ValueError(f"config.data.files: {path} is not a text file (NUL bytes in its first "
                     f"64 KiB); pretraining reads UTF-8 text")
  text = head.decode("utf-8", "replace")
  bad = text.count("\ufffd") - head.count("\ufffd".encode("utf-8"))
  if bad > 4 and bad > 0.01 * len(text):
    raise ValueError(f"config.data.files: {path} is not UTF-8 text ({bad} invalid sequences in "
                     f"its first 64 KiB); pretraining reads UTF-8 text")
  return len(head) < _SNIFF_BYTES and not head.strip()


def _listed(data_config) -> list[shard_spec.ShardSpec]:
  """Every non-empty file's shards from names and sizes alone (.gz whole, plain in blocks)."""
  if not data_config.files:
    raise ValueError("config.data.source='files' needs config.data.files (a glob)")
  block = raw_docs.block_bytes(data_config)
  paths = _expand_globs(data_config.files)
  # Sizes are requests of their own on gs://: several in flight.
  with concurrent.futures.ThreadPoolExecutor(8) as pool:
    sizes = list(pool.map(lambda path: tf.io.gfile.stat(path).length, paths))
  shards = []
  for path, size in zip(paths, sizes):
    if size == 0:
      logging.warning("skipping empty file %s", path)
      continue
    n = 1 if path.endswith(".gz") else -(-size // block)
    for i in range(n):
      length = size if n == 1 else min(block, size - i * block)
      shards.append(shard_spec.ShardSpec(len(shards), path, "file", length,
                                         block=(i, block, n) if n > 1 else ()))
  if not shards:
    raise ValueError(f"config.data.files={data_config.files!r}: every matched file is empty")
  return shards


def _checked(shards: list[shard_spec.ShardSpec]) -> tuple[list[str], list[str]]:
  """(the files of `shards`, those only whitespace), each checked with check_text_file."""
  files = list(dict.fromkeys(sh.name for sh in shards))
  gz_bytes = sum(sh.size for sh in shards if sh.name.endswith(".gz"))  # a .gz is one shard
  with concurrent.futures.ThreadPoolExecutor(4) as pool:  # zlib and file reads drop the GIL
    blank = [f for f, b in zip(files, pool.map(
        lambda f: check_text_file(f, whole_gz=gz_bytes <= MAX_GZ_CHECK_BYTES), files)) if b]
  return files, blank


def list_shards(data_config) -> list[shard_spec.ShardSpec]:
  """The files' shards (_listed), every file checked; files of only whitespace left out."""
  shards = _listed(data_config)
  files, blank = _checked(shards)
  if len(blank) == len(files):  # was: a TensorFlow traceback from the input pipeline
    raise ValueError(f"config.data.files={data_config.files!r}: every matched file is empty or "
                     "only whitespace")
  for path in blank:
    logging.warning("skipping %s: only whitespace", path)
  kept = [sh for sh in shards if sh.name not in blank]
  return [dataclasses.replace(sh, index=i) for i, sh in enumerate(kept)] if blank else shards


def check_shards(shards: list[shard_spec.ShardSpec], data_config) -> None:
  """list_shards' content checks on one host's shards. A whitespace-only file stays a shard:
  leaving it out would change every host's shard list."""
  del data_config
  for path in _checked(shards)[1]:
    logging.warning("%s holds only whitespace: no documents", path)


def read(spec: shard_spec.ShardSpec, data_config) -> raw_docs.RawDocs:
  """One file, or one block of a file, as documents of sentences."""
  try:
    with tf.io.gfile.GFile(spec.name, "rb") as f:
      data = _read_block(f, spec, data_config.format) if spec.block else f.read()
    if spec.name.endswith(".gz"):
      data = gzip.decompress(data)
  except (OSError, tf.errors.OpError, EOFError) as e:
    raise OSError(f"cannot read {spec.name}: {e}") from None
  data, bad = raw_docs.decode(data, spec.name)
  return raw_docs.RawDocs(*raw_docs.text_docs(data, data_config.format), bad)


def _document_start(f, pos: int, file_size: int, fmt: str, limit: int) -> int:
  """The first document start at or after `pos` (after a blank line for sentence_per_line, a
  newline for document_per_line), searched within `limit` bytes; else a line start, else `pos`."""
  if pos >= file_size:
    return file_size
  f.seek(pos - 1)
  window = f.read(limit)
  for sep in ((b"\n\n", b"\n") if fmt == "sentence_per_line" else (b"\n",)):
    j = window.find(sep)
    if j >= 0:
      return pos - 1 + j + len(sep)
  return pos


def _read_block(f, spec: shard_spec.ShardSpec, fmt: str) -> bytes:
  """The documents that start in block i of a file: bytes [start(i), start(i + 1))."""
  i, block, n = spec.block
  size = f.size()
  # Searches stay within block - 2 bytes, so start(i) < start(i + 1).
  limit = block - 2
  start = 0 if i == 0 else _document_start(f, i * block, size, fmt, limit)
  end = size if i == n - 1 else _document_start(f, (i + 1) * block, size, fmt, limit)
  f.seek(start)
  return f.read(max(0, end - start))


def describe_shard(spec: shard_spec.ShardSpec) -> str:
  """The file's base name, and its block when it is read in blocks."""
  name = os.path.basename(spec.name)
  return f"{name} (block {spec.block[0] + 1} of {spec.block[2]})" if spec.block else name


SOURCE = source_base.Source(
    name="files", shard_kind="file", list_shards=list_shards,
    describe=lambda d: f"files {d.files}", read=read, describe_shard=describe_shard,
    check_early=lambda d: check_local_globs(d.files), sized_shards=True,
    list_shards_unread=_listed, check_shards=check_shards)
