"""Studies: the papers' claims, the records every command leaves, and the one verdict rule.

A study is one declarative file per paper table (``studies/`` at the project's top level);
its claims are checked against the committed records under ``results/`` by
:mod:`multilab.studies.verdict`. Records, tables and verdicts import no training or
evaluation code: they are plain data, so a lost MLflow store never loses a table (only the
runner and the writer of a record read a finished model's done file: to measure a model
another study trained, and to name the model a record measures). A record travels with its
model's MLflow run as well (:mod:`multilab.studies.run_records`), and the default study of
``dvc repro`` is a study like the others (:mod:`multilab.studies.default`). Which model
a row is comes from the configuration's resolution (:mod:`multilab.resolve`), the same one
``train`` runs (:mod:`multilab.studies.settings`).
"""
