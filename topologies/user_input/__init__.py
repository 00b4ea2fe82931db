"""Users' input files: the pydantic base every user file is read with and its one-line error
(model; the one module of topologies/ that workloads/ may import), and bounded reading of
a file (files).
"""
