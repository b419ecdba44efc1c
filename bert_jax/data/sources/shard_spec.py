"""One unit of input; its own module so that source modules and the registry need not
import each other."""
import dataclasses


@dataclasses.dataclass(frozen=True)
class ShardSpec:
  """One unit of input read at once.

  index: position in the source's full shard list (stable across hosts). name: a file path,
  'builtin' or 'tfds:NAME/SPLIT[a:b]'. kind: 'file', 'builtin', 'tfds' or 'prepared'. size:
  bytes of text (files, prepared) or examples (tfds). block: (block index, block bytes, blocks)
  for a file read in blocks.
  """
  index: int
  name: str
  kind: str
  size: int
  split: str = ""
  block: tuple = ()
