"""From records and MLflow runs to what a reader sees: Table 1 and 2 beside the paper, figures,
plot data.

``report`` reads the records the finished, evaluated runs carry (through the studies' one
table builder) and writes the tables and DVC plot data; ``figures`` draws position
similarities, token PCAs and training curves.
"""
