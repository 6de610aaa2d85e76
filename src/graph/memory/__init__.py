"""Long-term memory made from the conversation: typed facts and the running summary."""
