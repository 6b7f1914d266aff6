"""Training (lecture 4): layers and losses, optimisers, small data sets, the loop."""
