"""`tgagent web`: a local page for the graph, its runs node by node, and replays."""
