"""What a trained model is worth: multilinguality and model-fit metrics on the dev corpus.

``metrics`` holds the paper's metrics as batched tensor code; ``evaluate`` runs a model over
the dev corpus, writes the evaluation JSON and logs it to the model's MLflow run; ``variant``
trains (or reuses) and evaluates one modification over the seeds for ``multilab variant``.
"""
