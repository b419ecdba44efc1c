r"""A stand-in for a GLUE single-sentence task's files, for speed measurements without its data.

  python benchmarks/glue_standin.py --corpus $CORPUS_DIR/wikitext-2-raw/wiki.test.raw \
      --out /tmp/glue_standin [--task sst2]

Writes OUT/SST-2/train.tsv and dev.tsv in GLUE's layout (a `sentence` and a `label` column):
runs of the corpus's lowercased words, cut to lengths drawn like SST-2's (training rows are
phrases, 8 words on average, many of 1 to 5 and a tail to 52; dev rows are sentences, about 19
words), labels drawn with SST-2's positive share (0.56). The text carries no sentiment, so the
model cannot learn the task: it measures speed only (the padding, the length buckets and the
number of rows are SST-2's). Rows and lengths are the same on every machine (seed 0).
"""
import argparse
import os
import random
import re

# (rows, draw of a row's word count) per split: SST-2 holds 67,349 training phrases and 872 dev
# sentences.
_SPLITS = {
    "train": (67_349, lambda r: max(1, min(52, int(r.lognormvariate(1.85, 0.8))))),
    "dev": (872, lambda r: max(2, min(55, int(r.gauss(19.5, 9.0))))),
}
_POSITIVE = 0.56


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--corpus", required=True, help="a plain-text file")
  p.add_argument("--out", required=True, help="the GLUE folder to write SST-2/ into")
  p.add_argument("--task", default="sst2", choices=["sst2"])
  args = p.parse_args(argv)
  with open(args.corpus, encoding="utf-8") as f:
    words = re.findall(r"[a-z']+|[.,!?;:-]", f.read().lower())
  if len(words) < 1000:
    p.error(f"--corpus holds {len(words)} words; give a text of at least 1,000")
  rng = random.Random(0)
  folder = os.path.join(args.out, "SST-2")
  os.makedirs(folder, exist_ok=True)
  for split, (rows, draw) in _SPLITS.items():
    with open(os.path.join(folder, f"{split}.tsv"), "w", encoding="utf-8") as f:
      f.write("sentence\tlabel\n")
      for _ in range(rows):
        n = draw(rng)
        start = rng.randrange(len(words) - n)
        f.write(f"{' '.join(words[start:start + n])} \t{int(rng.random() < _POSITIVE)}\n")
  print(f"wrote {folder}/train.tsv and dev.tsv ({', '.join(f'{s} {n:,} rows' for s, (n, _) in _SPLITS.items())})")
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
