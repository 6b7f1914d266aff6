"""The other ways to differentiate (lecture 2), beside the core's reverse mode.

Numerical differentiation (finite differences, ``check_grads``), forward mode with dual
numbers, the symbolic differentiator on expression trees, and function transforms
(``grad``, ``vjp``, ``jvp``, ...) built on the graph.
"""
