"""The system layer (lecture 5): what makes graphs run fast or small.

Graph passes and static shapes, memory plans, checkpointing, compiled straight-line code
and the cache of gradient programs, kernel fusion, CUDA-graph capture, parallel workers.
Each wraps or extends the core from above; the core never imports this layer.
"""
