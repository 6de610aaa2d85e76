"""What the model sees each turn (seed 002's layers, seed 003's numbered thread).

- `budget`: the layers' token budgets, and cutting text to a budget on a sentence;
- `render`: one stored message as the model reads it, its cost, its transcript line;
- `sections`: the system prompt and its delimited memory section (facts, previous
  conversations, running summary);
- `working`: which stored messages fill working memory;
- `assemble`: all of it put together within the model's context limit.
"""
