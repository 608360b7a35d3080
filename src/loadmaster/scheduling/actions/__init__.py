"""Actions: the steps of a scheduling cycle, run in the order a profile lists them."""
