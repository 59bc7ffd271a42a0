"""scikit-learn's bundled digits, read once per process (the forkserver's preload)."""


_digits = None  # (x, y) as load_digits returns them, read once per process (the forkserver's preload)


def preload_digits():
    """Read the bundled digits once; ranks forked afterwards share them. The same arrays either way."""
    global _digits
    if _digits is None:
        from sklearn.datasets import load_digits

        _digits = load_digits(return_X_y=True)
    return _digits
