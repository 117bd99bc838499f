"""One exception class per ge2_status_t, carrying ge2_last_error()."""
from __future__ import annotations


class Ge2Error(Exception):
    """Base class: `status` is the numeric ge2_status_t, the text is ge2_last_error()."""

    status = -1

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        if status is not None:
            self.status = status


class InvalidArgumentError(Ge2Error, ValueError):
    status = 1


class ShapeMismatchError(Ge2Error, ValueError):
    status = 2


class UnsupportedError(Ge2Error):
    status = 3


class NoDeviceError(Ge2Error):
    status = 4


class CudaError(Ge2Error):
    status = 5


class CublasError(Ge2Error):
    status = 6


class OutOfMemoryError(Ge2Error, MemoryError):
    status = 7


class TuneDbError(Ge2Error):
    status = 8


class VersionMismatchError(Ge2Error):
    status = 9


class InternalError(Ge2Error):
    status = 10


BY_STATUS = {cls.status: cls for cls in (
    InvalidArgumentError, ShapeMismatchError, UnsupportedError, NoDeviceError, CudaError, CublasError,
    OutOfMemoryError, TuneDbError, VersionMismatchError, InternalError)}
