"""loadmaster: scheduler, simulator, monitor and diagnostician for shared GPU clusters."""

__version__ = "0.1.0"
