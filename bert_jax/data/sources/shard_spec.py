"""What every input source lists and the readers read: one unit of input.

Its own module so that a source module (prepared_data) and the registry that dispatches to
it (registry.py) both use it without importing each other.
"""
import dataclasses


@dataclasses.dataclass(frozen=True)
class ShardSpec:
  """One unit of input read at once.

  Attributes:
    index: position in the source's full shard list (stable across hosts).
    name: file path, 'builtin', or 'tfds:NAME/SPLIT[a:b]'.
    kind: 'file', 'builtin', 'tfds' or 'prepared'.
    size: bytes of text (files, prepared) or examples (tfds).
    split: the TFDS split string for kind='tfds'.
    block: for a file read in blocks: (block index, block bytes, blocks).
  """
  index: int
  name: str
  kind: str
  size: int
  split: str = ""
  block: tuple = ()
