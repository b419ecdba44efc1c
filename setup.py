"""bert_jax: pretrain and fine-tune BERT-family encoders with JAX and Flax."""
import setuptools

INSTALL_REQUIRES = [
    # Tested here with 0.10.2 (the newest this registry serves); GPU images run 0.11 (the GPU
    # suites run there from source). 0.12 is allowed where a registry has it.
    "jax>=0.6,<0.13",
    "flax>=0.10.4,<0.13",
    "optax>=0.2.3,<0.3",
    "orbax-checkpoint>=0.11,<0.13",
    "tensorflow>=2.16,<2.22",
    "tensorflow-text>=2.16,<2.22",
    "tensorflow-datasets>=4.9,<5",
    "sentencepiece>=0.2,<0.3",
    # RoBERTa's byte-level BPE (tensorflow-text has no BPE op). 0.23 is what transformers 5
    # needs; 0.22.2 and 0.23.3 give the same ids, offsets and learnt vocabs here.
    "tokenizers>=0.19,<0.24",
    "ml-collections>=0.1.1,<2",
    "absl-py>=1.4",
    "numpy>=1.26",
    "safetensors>=0.4,<1",
    "tensorboardX>=2.6,<3",
    "etils[epath]>=1.5",
    # TensorBoard events to a gs:// workdir (tensorboardX's GCS writer).
    "google-cloud-storage>=2.10",
]

EXTRAS = {
    # The test suite without its parity references: what the fast tier needs. Tests that
    # compare against transformers or PyTorch skip without the `parity` extra, saying so.
    "test": [
        "pytest>=7",
        # pytest.ini runs the suite on two workers.
        "pytest-xdist>=3.5,<4",
        # pytest.ini: a hung test fails and the run goes on (tests/test_suite_guard.py).
        "pytest-timeout>=2.3,<3",
        "scipy>=1.10",
        "scikit-learn>=1.3",
        # trec_eval's C code: the reference for bert_jax.tasks.retrieval.metrics.
        "pytrec-eval-terrier>=0.5.6,<0.6",
        # NER entity scores are compared with seqeval's (conlleval's definition).
        "seqeval>=1.2,<2",
        # A gs:// workdir end to end against a GCS emulator on this machine.
        "gcp-storage-emulator>=2026.7.18,<2027",  # the test patches two of its handlers
        "gcsfs>=2025.3",
        # retrieval_eval --index hnsw: recall against exact search is tested.
        "faiss-cpu>=1.8,<2",
    ],
    # The references the parity tests compare against (CI installs `test` and `parity`).
    # transformers' Flax BERT family (removed in v5); transformers 4.x requires
    # huggingface-hub < 1.0: pip downgrades a newer hub (README.md, Install).
    "parity": [
        "transformers>=4.44,<5",
        # DeBERTa-v2's reference: transformers has no Flax DeBERTa, so its PyTorch classes
        # (tests/test_convert_deberta.py); tested with 2.13.0. PyPI's torch for Linux is a CUDA
        # build of several GB: a CPU build installed first
        # (`pip install torch --index-url https://download.pytorch.org/whl/cpu`) satisfies this
        # range and is kept, where a pin to another version would replace it.
        "torch>=2.4,<3",
        # The sentence-embedding reference (tests/test_sentence_transformers.py, run in a child
        # process); tested with 5.1.2 and 5.7.0 (whose folders keep max_seq_length as the
        # tokenizer's model_max_length alone; the conversion reads it there too). 6.x needs
        # transformers 5, whose Flax BERT the other parity tests lose; that file passes with
        # 6.2 and transformers 5.24 too, run from their own folder.
        "sentence-transformers>=5.1,<5.8",
    ],
    # Approximate nearest-neighbour search for retrieval_eval (--index hnsw): faiss's HNSW.
    "ann": ["faiss-cpu>=1.8,<2"],
    # CUDA 13 wheels, as current GPU images run (a driver for CUDA 12 only: the gpu_cuda12 extra).
    "gpu": ["jax[cuda13]>=0.7,<0.13"],
    "gpu_cuda12": ["jax[cuda12]>=0.6,<0.13"],
    "tpu": ["jax[tpu]>=0.6,<0.13"],
}

setuptools.setup(
    name="bert_jax",
    version="0.1.0",
    description="Pretrain and fine-tune BERT-family encoders with JAX and Flax.",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    packages=setuptools.find_packages(include=["bert_jax", "bert_jax.*"]),
    package_data={"bert_jax": ["assets/*", "assets/**/*"]},
    include_package_data=True,
    python_requires=">=3.10,<3.13",
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS,
    license="Apache-2.0",
)
