"""Pretraining input at pod scale: each host's start-up time and what it reads, for 1, 16 and
256 hosts simulated in one process (process_index / process_count of PretrainData).

    python benchmarks/pod_input.py [--hosts 1,16,256] [--sample 8] [--files 1024]

Writes two corpora to a temporary folder: many small files (--files of --docs documents) and
fewer files than hosts (--few_files of --few_docs documents); the tiny variant's seq_len 128
and a 60-token vocab, mode full_sentences, 1 row per host per batch. For each host count it
builds --sample hosts' inputs (spread over the hosts, the last included) one after another:
start-up is PretrainData(...) and the first batch of train_iterator(); files opened and bytes
read are counted by wrapping tf.io.gfile.GFile (every read of a text shard and of the listing's
checks goes through it). The 'python' loader runs the stream, whose threads are joined when the
iterator closes, so each count belongs to one host. One untimed host first loads TensorFlow and
the tokenizer. Prints one table row per corpus and host count.
"""
import argparse
import os
import pathlib
import random
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

from bert_jax.data.stream import pretrain_data  # noqa: E402
from bert_jax.runtime.cpu_tensorflow import tf  # noqa: E402
from configs import pretrain as pretrain_config  # noqa: E402

_WORDS = ("the cat sat on a mat and dog ran far away with big red ball under tree while sun "
          "was high in sky over green hill near old town bird sang song of light rain fell "
          "upon wide river where small boat drifted slowly past quiet farm").split()


def _write(folder: pathlib.Path, num_files: int, docs: int, rng: random.Random) -> int:
  folder.mkdir(parents=True)
  total = 0
  for f in range(num_files):
    text = "\n\n".join(
        "\n".join(" ".join(rng.choice(_WORDS) for _ in range(rng.randint(4, 20))) + " ."
                  for _ in range(rng.randint(2, 8)))
        for _ in range(docs)) + "\n"
    (folder / f"part-{f:05d}.txt").write_text(text, encoding="utf-8")
    total += len(text.encode("utf-8"))
  return total


class _Reads:
  """Files opened and bytes read through tf.io.gfile.GFile."""

  def __init__(self):
    self.files, self.bytes = set(), 0
    self._lock = threading.Lock()
    reads, base = self, tf.io.gfile.GFile

    class CountingGFile(base):

      def __init__(self, name, mode="r"):
        super().__init__(name, mode)
        with reads._lock:
          reads.files.add(name)

      def read(self, n=-1):
        data = super().read(n)
        with reads._lock:
          reads.bytes += len(data)
        return data

    self._base = base
    tf.io.gfile.GFile = CountingGFile

  def clear(self):
    self.files, self.bytes = set(), 0

  def close(self):
    tf.io.gfile.GFile = self._base


def _config(files: str, vocab: str):
  c = pretrain_config.get_config("tiny")
  c.data.source = "files"
  c.data.files = files
  c.data.vocab_file = vocab
  c.data.mode = "full_sentences"
  c.data.max_predictions_per_seq = 20
  c.data.loader = "python"
  return c


def _start_up(config, host: int, hosts: int, reads: _Reads) -> tuple[float, int, int]:
  reads.clear()
  t0 = time.perf_counter()
  data = pretrain_data.PretrainData(config.data, seq_len=config.seq_len,
                                    global_batch_size=hosts, seed=0, process_index=host,
                                    process_count=hosts)
  it = data.train_iterator()
  next(it)
  seconds = time.perf_counter() - t0
  it.close()
  return seconds, len(reads.files), reads.bytes


def main(argv=None) -> None:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  p.add_argument("--hosts", default="1,16,256", help="host counts, comma-separated")
  p.add_argument("--sample", type=int, default=8, help="hosts timed per host count")
  p.add_argument("--files", type=int, default=1024, help="files of the many-files corpus")
  p.add_argument("--docs", type=int, default=20, help="documents per file (many files)")
  p.add_argument("--few_files", type=int, default=8, help="files of the few-files corpus")
  p.add_argument("--few_docs", type=int, default=2000, help="documents per file (few files)")
  args = p.parse_args(argv)
  rng = random.Random(0)
  reads = _Reads()
  try:
    _run(args, rng, reads)
  finally:
    reads.close()


def _run(args, rng: random.Random, reads: _Reads) -> None:
  with tempfile.TemporaryDirectory() as tmp:
    root = pathlib.Path(tmp)
    vocab = root / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "."] + _WORDS)
                     + "\n", encoding="utf-8")
    corpora = [("many files", args.files, _write(root / "many", args.files, args.docs, rng)),
               ("few files", args.few_files,
                _write(root / "few", args.few_files, args.few_docs, rng))]
    warm = _config(str(root / "few" / "*.txt"), str(vocab))
    _start_up(warm, 0, 1, reads)
    print("| corpus | hosts | start-up s per host (median, max) | files opened per host (max) "
          "| MB read per host (median, max) | corpus MB |")
    print("|---|---:|---|---:|---|---:|")
    for (name, num_files, size), folder in zip(corpora, ("many", "few")):
      config = _config(str(root / folder / "*.txt"), str(vocab))
      for hosts in (int(h) for h in args.hosts.split(",")):
        sample = sorted({round(i * (hosts - 1) / max(1, args.sample - 1))
                         for i in range(min(args.sample, hosts))})
        got = [_start_up(config, h, hosts, reads) for h in sample]
        secs, files, nbytes = zip(*got)
        mb = [b / 1e6 for b in nbytes]
        print(f"| {name} ({num_files}) | {hosts} | {statistics.median(secs):.2f}, "
              f"{max(secs):.2f} | {max(files)} | {statistics.median(mb):.2f}, {max(mb):.2f} "
              f"| {size / 1e6:.1f} |", flush=True)


if __name__ == "__main__":
  main()
