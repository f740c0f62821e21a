"""Elapsed and remaining times as progress lines print them."""


def duration(seconds: float) -> str:
    """``45s``, ``1m23s``, ``2h05m``."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
