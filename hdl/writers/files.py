"""Writing generated files so that a failure leaves nothing half-written (see
:mod:`pytorch_ref.ir.atomic_file`, shared with saved models)."""
from pytorch_ref.ir.atomic_file import atomic_output, write_atomically

__all__ = ["atomic_output", "write_atomically"]
