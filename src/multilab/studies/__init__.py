"""Studies: the papers' claims, the records every command leaves, and the one verdict rule.

A study is one declarative file per paper table (``studies/`` at the project's top level);
its claims are checked against the committed records under ``results/`` by
:mod:`multilab.studies.verdict`. Nothing here imports the training or evaluation code:
records and verdicts are plain data, so a lost MLflow store never loses a table. Which model
a row is comes from the configuration's resolution (:mod:`multilab.resolve`), the same one
``train`` runs (:mod:`multilab.studies.settings`).
"""
