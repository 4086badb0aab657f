"""The shipped models, their data (scikit-learn's digits) and their cached training."""
