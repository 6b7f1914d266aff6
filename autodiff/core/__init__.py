"""The core: what lectures 1 and 3 teach, small enough to read in one sitting.

``graph.py`` (nodes, ops, leaves, the topological sort), ``errors.py`` (errors written
for a student), ``gradients.py`` (reverse mode, graph to graph), ``schedule.py`` and
``executor.py`` (running a graph: the Executor's loop), ``backend.py`` (NumPy or CuPy,
devices, Python numbers). The core imports only itself and ``ops/``;
docs/reading-the-code.md gives the order to read it in.
"""
