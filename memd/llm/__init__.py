"""Model calls: the only package that talks to the anthropic SDK, plus usage and budgets."""
