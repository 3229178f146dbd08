"""Model and training: build a BERT, train it resumably, and know what a model directory holds.

``model`` builds the BERT and its MLM head on the selected positions; ``train`` is the
Accelerate training loop with checkpoints and MLflow tracking; ``model_dir`` names what a
trained model directory holds (done file, data fingerprint, checkpoints), so that the rooms
that only read models never import the training loop.
"""
