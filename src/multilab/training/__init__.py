"""Model and training: build a BERT, train it resumably, and know what a model directory holds.

``model`` builds the BERT and its MLM head on the selected positions (``architecture``: its
parameter count, ``language_layers``: per-language copies); ``train`` is the Accelerate
training loop on one screen, beside what it reads and writes: ``training_data`` (a run's
examples), ``member`` (the contract the single-model and the stacked trainer share: a run's
member, its plan and each step's batch and masks), ``checkpoints`` (all-or-nothing checkpoint
I/O) and ``run_tracking`` (what the run tells MLflow). ``model_dir`` names what a trained
model directory holds (done file, data fingerprint, checkpoints), so that the rooms that only
read models never import the loop.
"""
