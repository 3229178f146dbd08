"""multilab: what makes multilingual BERT multilingual, as controlled, tracked experiments."""

__version__ = "0.1.0"
