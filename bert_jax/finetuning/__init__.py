"""Fine-tuning's library: its setup and checks, its batches, its evaluation, the run of one
seed. bert_jax.finetune is the program that puts them together."""
