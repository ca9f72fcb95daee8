//! trybuild UI tests for fucina's compile-time axis checks; see `tests/ui/`.
