"""Runs leave nothing in the system temp directory, even when killed.

TensorFlow's autograph writes a generated source file per converted function there and removes
it only at a clean exit (atexit): a killed run, a test subprocess or a crashed worker left
hundreds. The tokenizers' tf.functions are graph code already and are traced with autograph off.
"""
import os
import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]

_SCRIPT = """
import os, sys
from bert_jax.data.tokenizers import wordpiece
tok = wordpiece.WordPieceTokenizer(wordpiece.default_vocab_file(), lowercase=True)
print(tok.tokenize_to_ids(["the cat sat on the mat", "x" * 150]))  # both branches of tf_tokenize
print(tok.basic_tokenize("a Sentence with some WORDS"))
sys.stdout.flush()
os._exit(0)  # like SIGKILL: no atexit handlers
"""

def test_a_killed_tokenizing_process_leaves_no_temp_files(tmp_path):
  tmp = tmp_path / "tmp"
  tmp.mkdir()
  env = dict(os.environ, TMPDIR=str(tmp), PYTHONPATH=str(ROOT))
  out = subprocess.run([sys.executable, "-c", _SCRIPT], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=300)
  assert out.returncode == 0, out.stderr[-2000:]
  assert sorted(p.name for p in tmp.iterdir()) == []
