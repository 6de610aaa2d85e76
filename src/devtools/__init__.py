"""Developer tools: draw the graph, browse past turns, replay them, prune checkpoints.

The bot's daily job imports `prune_checkpoints` from `src.devtools.prune`.
"""
