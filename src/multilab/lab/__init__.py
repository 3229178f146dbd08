"""The lab's bench: what an experiment varies and what it measures, as registries.

The registry of modifications (each ablation one declarative object, with the paper's model
IDs), the languages a study may list (the Bible's editions and the transforms of them, with
K et al. 2020's ``enfake``), and the one table of metrics with the paper's reported values. Pure
data and pure functions, no I/O: the configuration is built on them, and every other room
reads them; none of them decides what a modification, a language or a metric is.
"""
