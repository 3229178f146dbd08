"""The lab's bench: what an experiment varies and what it measures.

The registry of modifications (each ablation one declarative object, with the paper's model
IDs), the one table of metrics with the paper's reported values, and the ``variant`` runner
that trains and evaluates one modification over the seeds. Every other room reads these;
none of them decides what a modification or a metric is.
"""
